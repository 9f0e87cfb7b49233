//! HTTP/2 frame walks in programs of their own. A transfer of an HTTP/2 connection that runs
//! past its copied head has its frame headers walked (`h2_walk`); the walk is unrolled, and in
//! the socket tracepoints' own programs it took half the verifier's million instructions, leaving
//! no room for anything else there. So the tracepoint sends its data record, leaves where the
//! walk begins in a per-CPU entry and, as its last action, tail-calls the continuation program
//! on the same tracepoint, which sends the walked headers in a continuation record and
//! tail-calls itself while frames remain (a gateway answering many streams of one connection in
//! one `writev` writes more frames than the 32 a record holds). Userspace merges the records
//! (they follow each other in the ring) before it lays the walked headers out.
//!
//! TLS plaintext is sent from uprobe programs (`tls.rs`, `go_tls.rs`), which may tail-call only
//! uprobe programs: `tls_walk_more` is their continuation, the same walk.

use aya_ebpf::{
    EbpfContext,
    macros::{btf_tracepoint, map, uprobe},
    maps::{PerCpuArray, ProgramArray},
    programs::{BtfTracePointContext, ProbeContext},
};
use gateway_observer_common::{H2_WALK_CONTINUATIONS, H2ContinuedEvent, SOCKET_RINGBUF_BYTES, drop_index, event_kind};

use crate::{
    h2_walk::{Buffers, HEADER, WalkEnd, next_after_cut_header, next_origin, walk_frames},
    maps::{count_drop, current_ids, submit_flags},
    socket_data::set_h2_next_of,
    sockets::{SOCKET_EVENTS, socket_ring_unread},
};

/// A walk left for a continuation program: whose, and where it begins or stopped.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LeftWalk {
    /// Set while a walk waits for its continuation; taken by it.
    pending: u32,
    /// Continuations sent so far for this transfer.
    hops: u32,
    tid: u32,
    read: u32,
    sk: u64,
    /// The transfer's bytes, and where the next header starts among them.
    len: u64,
    at: u64,
    /// Bytes of the transfer its data record holds (its head): the walk keeps no header that
    /// ends inside them. 0 past the first continuation.
    copied: u64,
    buffers: Buffers,
}

/// One per CPU: the tail call runs on the CPU that left the walk, before anything else runs there.
#[map]
static H2_LEFT_WALKS: PerCpuArray<LeftWalk> = PerCpuArray::with_max_entries(1, 0);

/// The continuation programs, set by userspace at load (slot 0). One map per tracepoint: a
/// tracing program may tail-call only programs of the same attach point.
#[map]
static H2_RECV_MORE: ProgramArray = ProgramArray::with_max_entries(1, 0);
#[map]
static H2_SEND_MORE: ProgramArray = ProgramArray::with_max_entries(1, 0);
/// The same for the uprobe programs that send TLS plaintext.
#[map]
static TLS_WALK_MORE: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Which continuation a walk goes on in: the program array of the program running.
#[derive(Clone, Copy)]
pub enum Continuation {
    RecvTracepoint,
    SendTracepoint,
    Uprobe,
}

/// Leaves the walk of a transfer of `len` bytes (`buffers`), from the frame boundary `origin`
/// past the `copied` bytes its data record holds, for the continuation programs; false when it
/// cannot (its connection's place then stays unknown).
#[inline(always)]
pub fn leave(tid: u32, sk: u64, read: bool, len: u64, origin: u64, copied: u64, buffers: Buffers) -> bool {
    let Some(left) = H2_LEFT_WALKS.get_ptr_mut(0) else { return false };
    // SAFETY: a per-CPU map value pointer, valid for this program run.
    let left = unsafe { &mut *left };
    *left = LeftWalk { pending: 1, hops: 0, tid, read: u32::from(read), sk, len, at: origin, copied, buffers };
    true
}

/// Hands the walk left on this CPU to the continuation program of the running one. Returns only
/// when the tail call fails (no continuation loaded, the kernel's chain limit): the walk ends.
#[inline(always)]
pub fn walk_on<C: EbpfContext>(ctx: &C, from: Continuation) {
    let more = match from {
        Continuation::RecvTracepoint => &H2_RECV_MORE,
        Continuation::SendTracepoint => &H2_SEND_MORE,
        Continuation::Uprobe => &TLS_WALK_MORE,
    };
    // SAFETY: a tail call into a program of the same type (and, for a tracepoint, attach point);
    // nothing is held across it.
    unsafe { more.tail_call(ctx, 0) };
    if let Some(left) = H2_LEFT_WALKS.get_ptr_mut(0) {
        // SAFETY: a per-CPU map value pointer, valid for this program run.
        unsafe { (*left).pending = 0 };
    }
}

/// sock_recv_length's continuation, never attached: reached by tail call only.
#[btf_tracepoint(function = "sock_recv_length")]
pub fn sock_recv_length_more(ctx: BtfTracePointContext) -> u32 {
    continue_walk(&ctx, Continuation::RecvTracepoint);
    0
}

/// sock_send_length's continuation, never attached: reached by tail call only.
#[btf_tracepoint(function = "sock_send_length")]
pub fn sock_send_length_more(ctx: BtfTracePointContext) -> u32 {
    continue_walk(&ctx, Continuation::SendTracepoint);
    0
}

/// The continuation of the uprobe programs' walks of TLS plaintext, never attached.
#[uprobe]
pub fn tls_walk_more(ctx: ProbeContext) -> u32 {
    continue_walk(&ctx, Continuation::Uprobe);
    0
}

/// Walks the walk left on this CPU on from where it begins or stopped, into a continuation
/// record; hands on again while the walk reaches its bound, or ends inside a header (whose
/// length the next run reads: read here, after the unrolled walk, it would be verified once per
/// frame). The first continuation always sends a record, which says where the walk began.
#[inline(always)]
fn continue_walk<C: EbpfContext>(ctx: &C, from: Continuation) {
    let Some(left) = H2_LEFT_WALKS.get_ptr_mut(0) else { return };
    // SAFETY: a per-CPU map value pointer, valid for this program run.
    let left = unsafe { &mut *left };
    if left.pending == 0 || left.tid != current_ids().0 {
        return;
    }
    left.pending = 0;
    let read = left.read != 0;
    if left.hops > 0 && left.at + HEADER > left.len {
        // The walk before reached the transfer's end inside a header: only its place is left
        // to find, from that header's length; no record.
        let next = next_after_cut_header::<true>(left.buffers.addr(left.at), left.at, left.len);
        set_h2_next_of(left.sk, read, next);
        return;
    }
    let Some(mut entry) = SOCKET_EVENTS.reserve::<H2ContinuedEvent>(0) else {
        // The walked record is laid out as far as it goes: its connection resyncs.
        count_drop(drop_index::SOCKET_RINGBUF);
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: a reserved record of an H2ContinuedEvent's size; every field is written.
    let end = unsafe {
        (*event).kind = event_kind::SOCKET_H2_CONTINUED;
        (*event).tid = left.tid;
        (*event).sk = left.sk;
        // From a frame boundary: every header past the data record's head is kept.
        walk_frames::<true>(&raw mut (*event).walk, left.buffers, left.len, left.at, left.copied)
    };
    left.copied = 0;
    match end {
        // This is continuation `hops + 1`: another only while the bound allows.
        WalkEnd::Bound { at, buffers } | WalkEnd::Cut { at, buffers } if left.hops + 1 < H2_WALK_CONTINUATIONS => {
            left.hops += 1;
            left.at = at;
            left.buffers = buffers;
            left.pending = 1;
            // SAFETY: the reserved record, not yet submitted.
            unsafe { (*event).walk.continued = u8::from(matches!(end, WalkEnd::Bound { .. })) };
        }
        end => set_h2_next_of(left.sk, read, next_origin(end.reached(), left.len)),
    }
    // The reader is woken only when the ring is getting full, as for every other record.
    let record = size_of::<H2ContinuedEvent>();
    entry.submit(submit_flags(socket_ring_unread(), SOCKET_RINGBUF_BYTES, record));
    if left.pending != 0 {
        walk_on(ctx, from);
    }
}
