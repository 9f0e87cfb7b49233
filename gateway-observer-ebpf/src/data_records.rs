//! A transfer's records, reserved, filled and sent on the socket ring: what the transfer moved
//! (its head and tail bytes, gathered when small and scattered), its first bytes looked at for
//! TLS and for HTTP/2's client preface, and a record the ring had no room for counted on its
//! socket. `socket_data.rs` decides which record a transfer gets.

use aya_ebpf::helpers::generated::{bpf_probe_read_kernel, bpf_probe_read_user};
use gateway_observer_common::{
    DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, H2_NEXT_IN_HEADER, H2_NEXT_UNKNOWN, PayloadEvent,
    SOCKET_RINGBUF_BYTES, ThreadState, drop_index, event_kind,
};

use crate::{
    h2_walk::next_after_gathered,
    maps::{config, count_drop, submit_flags},
    socket_data::{EARLY_ON_SOCKET, FIRST_ON_SOCKET, PREFACE_LEN, PREFACE_START, set_h2_next},
    sockets::{SOCKET_EVENTS, SOCKS},
    transfer_buffers::{Gathered, IovArray, gather_small_transfer},
};

/// The first bytes of a connection are a TLS record (handshake, or application data of one
/// first seen mid-way): the same test as userspace's.
#[inline(always)]
fn starts_tls_record(head: &[u8]) -> bool {
    matches!(head, [0x16 | 0x17, 0x03, 0x00..=0x04, ..])
}

/// A TLS connection nothing will decrypt: its first record (just reserved) tells userspace, and
/// no ciphertext of it is reported after (userspace would only drop it).
#[inline(always)]
fn silence_if_undecrypted(key: u64) {
    if config().silence_tls == 0 {
        return;
    }
    if let Some(sock) = SOCKS.get_ptr_mut(&key) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*sock).tls = 1 };
    }
}

/// The connection's first bytes are the HTTP/2 client preface: its transfers that run past the
/// head get their frame headers walked from now on.
#[inline(always)]
fn mark_h2(key: u64) {
    if let Some(sock) = SOCKS.get_ptr_mut(&key) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*sock).h2 = 1 };
    }
}

/// `value`, at most `max`, with the bound where the verifier sees it. LLVM knows a copy length
/// is in range from how it was computed and drops the check; older verifiers cannot follow that
/// reasoning and reject the copy ("R2 min value is negative"). A volatile read hides the value
/// from LLVM, so the comparison stays.
#[inline(always)]
fn verifier_bounded(value: u32, max: u32) -> u32 {
    // SAFETY: reads a local.
    let opaque = unsafe { core::ptr::read_volatile(&value) };
    if opaque > max { max } else { opaque }
}

/// A data record that is not sent, counted under `drop` and on its socket, so that userspace
/// resets this connection only.
#[inline(always)]
pub fn lose_record(state: &ThreadState, drop: u32) {
    count_drop(drop);
    if let Some(sock) = SOCKS.get_ptr_mut(&state.data_sk) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*sock).lost = (*sock).lost.wrapping_add(1) };
    }
}

/// `emit_data` for a small HTTP/2 transfer over many buffers (`bytes`: its buffers, iovec array
/// and where its first frame header is): its bytes gathered into the head, the connection's place
/// taken from them. More pieces than `gather_small_transfer` takes: the first buffer only, the
/// place unknown.
#[inline(always)]
pub fn emit_gathered(
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    bytes: ((u64, u64, u64, u64), IovArray, u64),
    unread: u64,
) {
    let (buffers, iovs, origin) = bytes;
    let gathered = gather_small_transfer(iovs, buffers.1, len);
    let (buffers, next) = match gathered {
        // SAFETY: the per-CPU area, valid for this program run.
        Some(bytes) => ((buffers.0, len, 0, 0), next_after_gathered(unsafe { &(*bytes).bytes }, origin, len)),
        None => (buffers, H2_NEXT_UNKNOWN),
    };
    set_h2_next(state, next);
    if origin >= len && state.data_h2_origin & H2_NEXT_IN_HEADER == 0 {
        emit_payload(state, tid, len, now, unread);
        return;
    }
    emit_record(state, tid, len, now, (buffers, gathered), unread, |_| false);
}

/// Reserves, fills and sends a `DataEvent` (`bytes`: where the transfer's bytes are, and the head
/// gathered already, if it was). `mark` sees the filled record before it goes and says whether
/// the transfer's HTTP/2 walk was left for a continuation, which is returned (false when the
/// ring had no room: no walk is left without its record).
#[inline(always)]
pub fn emit_record(
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    bytes: ((u64, u64, u64, u64), Option<*const Gathered>),
    unread: u64,
    mark: impl FnOnce(*mut DataEvent) -> bool,
) -> bool {
    let Some(mut entry) = SOCKET_EVENTS.reserve::<DataEvent>(0) else {
        lose_record(state, drop_index::SOCKET_RINGBUF);
        return false;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: a reserved record of a DataEvent's size.
    unsafe { fill_data(event, state, tid, len, now, bytes.0, bytes.1) };
    let walk_left = mark(event);
    // The ring's unread bytes with this record (and its 8-byte header), read once by the caller.
    let record = size_of::<DataEvent>();
    entry.submit(submit_flags(unread + record as u64 + 8, SOCKET_RINGBUF_BYTES, record));
    walk_left
}

/// `emit_data` for an HTTP/2 transfer inside one frame's payload: its length and time only.
#[inline(always)]
pub fn emit_payload(state: &ThreadState, tid: u32, len: u64, now: u64, unread: u64) {
    let Some(mut entry) = SOCKET_EVENTS.reserve::<PayloadEvent>(0) else {
        lose_record(state, drop_index::SOCKET_RINGBUF);
        return;
    };
    let event = entry.as_mut_ptr().cast::<DataEvent>();
    // SAFETY: the fields of a DataEvent before its head, which the reserved record holds
    // (`PAYLOAD_EVENT_SIZE`); nothing at or past `head` is written.
    unsafe {
        fill_fields(event, event_kind::SOCKET_PAYLOAD, state, tid, len, now);
        (*event).head_len = 0;
        (*event).tail_len = 0;
    }
    let record = size_of::<PayloadEvent>();
    entry.submit(submit_flags(unread + record as u64 + 8, SOCKET_RINGBUF_BYTES, record));
}

/// Fills a data record's fields before its head but `head_len` and `tail_len`: the transfer.
///
/// # Safety
/// `event` points at a reserved ring-buffer record at least `PAYLOAD_EVENT_SIZE` long.
#[inline(always)]
unsafe fn fill_fields(event: *mut DataEvent, kind: u32, state: &ThreadState, tid: u32, len: u64, now: u64) {
    // SAFETY: the caller's; every field written lies before `head`.
    unsafe {
        (*event).kind = kind;
        (*event).tid = tid;
        (*event).tgid = state.tgid;
        (*event).fd = state.data_fd;
        (*event).sk = state.data_sk;
        (*event).timestamp_ns = now;
        (*event).len = len;
        (*event).queued_since_ns = state.data_queued_ns;
        (*event).shape = state.data_shape;
        (*event).h2_walk = 0;
        (*event).sock_lost = state.data_sock_lost as u16;
    }
}

/// Fills a data record's fields: the transfer, its head and tail. Returns nothing: `head_len`
/// says what was copied.
///
/// # Safety
/// `event` points at a reserved ring-buffer record at least a DataEvent long; every field is
/// written (the byte arrays as far as their valid length).
#[inline(always)]
pub unsafe fn fill_data(
    event: *mut DataEvent,
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    buffers: (u64, u64, u64, u64),
    gathered: Option<*const Gathered>,
) {
    let (head_base, head_avail, tail_end, tail_avail) = buffers;
    let head_len = if head_avail < DATA_HEAD_BYTES as u64 { head_avail as u32 } else { DATA_HEAD_BYTES as u32 };
    // Only bytes of the buffer the transfer ended in: the one before it may lie anywhere.
    let tail_len = if tail_end == 0 {
        0
    } else if tail_avail < DATA_TAIL_BYTES as u64 {
        tail_avail as u32
    } else {
        DATA_TAIL_BYTES as u32
    };
    // SAFETY: the caller's.
    unsafe {
        fill_fields(event, event_kind::SOCKET_DATA, state, tid, len, now);
        let head_len = verifier_bounded(head_len, DATA_HEAD_BYTES as u32);
        let tail_len = verifier_bounded(tail_len, DATA_TAIL_BYTES as u32);
        let mut copied = 0u16;
        if head_len > 0 && head_len <= DATA_HEAD_BYTES as u32 {
            let dst = (*event).head.as_mut_ptr().cast();
            let failed = match gathered {
                Some(bytes) => bpf_probe_read_kernel(dst, head_len, (*bytes).bytes.as_ptr().cast()),
                None => bpf_probe_read_user(dst, head_len, head_base as *const _),
            };
            if failed == 0 {
                copied = head_len as u16;
            }
        }
        (*event).head_len = copied;
        if state.data_first & (FIRST_ON_SOCKET | EARLY_ON_SOCKET) != 0 && copied >= 3 {
            let head = &(*event).head;
            if state.data_first & FIRST_ON_SOCKET != 0 && starts_tls_record(head) {
                silence_if_undecrypted(state.data_sk);
            } else if state.data_first & EARLY_ON_SOCKET != 0
                && copied as u64 >= PREFACE_LEN
                && u64::from_le_bytes(*head.as_ptr().cast::<[u8; 8]>()) == PREFACE_START
            {
                mark_h2(state.data_sk);
            }
        }
        let mut tail_copied = 0u16;
        if tail_len > 0 && tail_len <= DATA_TAIL_BYTES as u32 {
            let src = (tail_end - u64::from(tail_len)) as *const _;
            // Bounded again at the call: 6.1's verifier forgets the bound of a length LLVM
            // spills to the stack between the test and the call (it did, measured).
            let size = verifier_bounded(tail_len, DATA_TAIL_BYTES as u32);
            if bpf_probe_read_user((*event).tail.as_mut_ptr().cast(), size, src) == 0 {
                tail_copied = size as u16;
            }
        }
        (*event).tail_len = tail_copied;
    }
}
