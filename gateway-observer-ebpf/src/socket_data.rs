//! The bytes targets move on followed TCP connections, for request timing in userspace: the
//! first and last bytes of each transfer go to the socket ring buffer.
//!
//! The socket layer's own tracepoints, `sock_recv_length`/`sock_send_length`, fire at the end of
//! read/write/recv*/send* of any socket, in the caller's context, with the `struct sock`: the
//! syscall and its buffer are read from the caller's registers there. Kernels before 6.5 lack
//! them; there `tcp_recvmsg`/`tcp_sendmsg` are hooked instead (fentry notes where the caller's
//! bytes are, from the `msghdr`'s iterator; fexit sends what moved).

use aya_ebpf::{
    helpers::generated::bpf_probe_read_user,
    macros::{btf_tracepoint, fentry, fexit},
    programs::{BtfTracePointContext, FEntryContext, FExitContext},
};
use gateway_observer_common::{
    DATA_FD_UNKNOWN, DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, GoTlsCall, H2_NEXT_IN_HEADER, H2_NEXT_PARTIAL,
    H2_NEXT_UNKNOWN, H2DataEvent, PayloadEvent, SOCKET_RINGBUF_BYTES, SockState, ThreadState, conn_role, data_shape,
    drop_index, event_kind, syscall_class,
};

use crate::{
    go_tls::{call_in_progress, go_transfer},
    h2_continue,
    h2_marks::take_h2_mark,
    h2_walk::{Buffers, WalkEnd, next_after_head, next_origin, origin_past_split_header, walk_frames},
    loop_iterations::transfer_boundary,
    maps::{btf_field, config, count_drop, current_ids, now_ns, submit_flags, take_socket_budget, thread_state},
    sockets::{
        SOCKET_EVENTS, SOCKS, emit_conn, insert_counted, is_closed_or_listening, is_tcp, remove_counted,
        ring_share_left, socket_ring_unread,
    },
    syscalls::Call,
    tls::tls_transfer,
    transfer_buffers::buffers,
    waits::stack_if_same_call,
};

const MSG_PEEK: i32 = 2;

/// Bits of `ThreadState::data_first`: the transfer is the first seen on its socket (its first
/// bytes say whether it speaks TLS), its socket speaks HTTP/2 (`SockState::h2`), so that its
/// record needs no second map lookup, and it is one of the socket's first `EARLY_TRANSFERS`,
/// which are looked at for HTTP/2's client preface: a server may write first (gRPC's C core
/// sends its SETTINGS as it accepts), so the preface is not always the first transfer.
pub const FIRST_ON_SOCKET: u32 = 1;
pub const ON_H2: u32 = 2;
pub const EARLY_ON_SOCKET: u32 = 4;
/// Transfers of a connection looked at for the client preface (`SockState::data_seen` counts
/// them up to this).
pub const EARLY_TRANSFERS: u32 = 4;
/// "PRI * HT", the client preface's first 8 bytes, read as a little-endian word.
const PREFACE_START: u64 = u64::from_le_bytes(*b"PRI * HT");
const PREFACE_LEN: u64 = 24;

/// tcp_recvmsg(struct sock *sk, struct msghdr *msg, size_t len, int flags[, int *addr_len])
#[fentry(function = "tcp_recvmsg")]
pub fn tcp_recvmsg_enter(ctx: FEntryContext) -> u32 {
    tcp_call_starts(&ctx, true);
    0
}

#[fexit(function = "tcp_recvmsg")]
pub fn tcp_recvmsg_exit(ctx: FExitContext) -> u32 {
    tcp_call_returns(&ctx, true, ctx.arg(3));
    0
}

/// tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size)
#[fentry(function = "tcp_sendmsg")]
pub fn tcp_sendmsg_enter(ctx: FEntryContext) -> u32 {
    tcp_call_starts(&ctx, false);
    0
}

#[fexit(function = "tcp_sendmsg")]
pub fn tcp_sendmsg_exit(ctx: FExitContext) -> u32 {
    tcp_call_returns(&ctx, false, 0);
    0
}

/// A target thread calls into TCP: note where its bytes are. The iterator is read now, before
/// the copy advances it.
#[inline(always)]
fn tcp_call_starts(ctx: &FEntryContext, recv: bool) {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return };
    let msg: *const u8 = ctx.arg(1);
    let cfg = config();
    let iter_type: u8 = btf_field(msg, cfg.msg_iter_type_offset);
    let buf: u64 = btf_field(msg, cfg.msg_iter_buf_offset);
    let (shape, buf, count) = if iter_type == cfg.iter_type_ubuf {
        (
            if recv { data_shape::READ_BUF } else { data_shape::WRITE_BUF },
            buf,
            btf_field(msg, cfg.msg_iter_count_offset),
        )
    } else if iter_type == cfg.iter_type_iovec {
        let shape = if recv { data_shape::READ_KERNEL_IOV } else { data_shape::WRITE_KERNEL_IOV };
        (shape, buf, btf_field(msg, cfg.msg_iter_segs_offset))
    } else {
        // Kernel pages (sendfile, splice): only the count is known.
        (if recv { data_shape::NONE } else { data_shape::WRITE_LEN_ONLY }, 0, 0)
    };
    start_transfer(state, shape, DATA_FD_UNKNOWN, buf, count);
}

/// Notes a transfer about to be reported: its shape, descriptor and where its bytes are.
#[inline(always)]
fn start_transfer(state: &mut ThreadState, shape: u8, fd: u32, buf: u64, count: u64) {
    state.data_shape = shape;
    state.data_sk = 0;
    state.data_queued_ns = 0;
    state.data_fd = fd;
    state.data_buf = buf;
    state.data_count = count;
}

/// The call returns: send on what moved, and the stack of a long block in it.
#[inline(always)]
fn tcp_call_returns(ctx: &FExitContext, recv: bool, flags: i32) {
    let (tid, tgid) = current_ids();
    let Some(state) = thread_state(tid) else { return };
    let call = Call::current();
    stack_if_same_call(ctx, state, &call);
    let ret = ctx.ret::<i64>().unwrap_or(0) as i32;
    let go = call_in_progress(tgid, &call);
    on_transfer(state, tgid, ctx.arg(0), ret, flags, recv, go.is_some());
    finish_transfer::<false>(state, tid, ret, go);
}

/// sock_recv_length(struct sock *sk, int ret, int flags)
#[btf_tracepoint(function = "sock_recv_length")]
pub fn sock_recv_length(ctx: BtfTracePointContext) -> u32 {
    socket_layer_transfer(&ctx, true);
    0
}

/// sock_send_length(struct sock *sk, int ret, int flags)
#[btf_tracepoint(function = "sock_send_length")]
pub fn sock_send_length(ctx: BtfTracePointContext) -> u32 {
    socket_layer_transfer(&ctx, false);
    0
}

/// A socket transfer by a target thread ended: where its bytes are comes from the syscall's
/// arguments, in the thread's registers.
#[inline(always)]
fn socket_layer_transfer(ctx: &BtfTracePointContext, recv: bool) {
    let (tid, tgid) = current_ids();
    let Some(state) = thread_state(tid) else { return };
    let call = Call::current();
    stack_if_same_call(ctx, state, &call);
    let cfg = config();
    let shape = call.packed_class() >> syscall_class::SHAPE_SHIFT;
    start_transfer(state, shape, call.arg0() as u32, call.arg(cfg.regs_arg1_offset), call.arg(cfg.regs_arg2_offset));
    let ret: i32 = ctx.arg(1);
    let go = call_in_progress(tgid, &call);
    on_transfer(state, tgid, ctx.arg(0), ret, ctx.arg(2), recv, go.is_some());
    if finish_transfer::<true>(state, tid, ret, go) {
        // A tail call never returns: this is the program's last action.
        let from =
            if recv { h2_continue::Continuation::RecvTracepoint } else { h2_continue::Continuation::SendTracepoint };
        h2_continue::walk_on(ctx, from);
    }
}

/// A target thread in a data syscall moved bytes on socket `sk`: remember which socket, and for a
/// read, since when its bytes were waiting. `in_go_tls`: its goroutine is inside a Go TLS call.
#[inline(always)]
fn on_transfer(state: &mut ThreadState, tgid: u32, sk: *const u8, ret: i32, flags: i32, recv: bool, in_go_tls: bool) {
    let in_tls = state.tls_depth != 0 || in_go_tls;
    let key = sk as u64;
    if state.data_shape == data_shape::NONE || state.data_sk != 0 || data_shape::is_read(state.data_shape) != recv {
        // Not a transfer we report (splice, io_uring, a second socket in one call), but a read
        // still takes the bytes that marked the socket unread.
        if recv && ret > 0 && flags & MSG_PEEK == 0 {
            clear_unread(key);
        }
        return;
    }
    if ret <= 0 {
        // An error or end of stream moves no bytes (and may come after the connection closed).
        // Reading the end of stream takes the FIN that marked the socket unread.
        if ret == 0 && recv {
            clear_unread(key);
        }
        return;
    }
    if recv && flags & MSG_PEEK != 0 {
        // A peek leaves the bytes in the socket (nginx checks idle upstream connections this
        // way): the read that takes them is the one to report.
        return;
    }
    match SOCKS.get_ptr_mut(&key) {
        Some(sock) => {
            // SAFETY: a map value pointer, valid for this program run.
            let sock = unsafe { &mut *sock };
            if recv {
                state.data_queued_ns = sock.unread_since_ns;
                sock.unread_since_ns = 0;
            }
            if sock.tgid == 0 {
                // Accepted on a target's port: the worker that reads it first owns it, and
                // pays for it from its process's budget.
                if !take_socket_budget(tgid) {
                    remove_counted(key, sock);
                    emit_conn(event_kind::SOCKET_CLOSE, sk, 0, conn_role::SERVER);
                    return;
                }
                sock.tgid = tgid;
            }
            if sock.h2 == 0 && sock.data_seen != 0 {
                // Userspace may have told HTTP/2 from the frames of a connection first seen mid-way.
                take_h2_mark(key, sock);
            }
            state.data_sock_lost = sock.lost;
            state.data_first = early_bits(sock.data_seen) | if sock.h2 != 0 { ON_H2 } else { 0 };
            // (Ciphertext of a TLS connection does not move its plaintext's place: `tls.rs`.)
            if sock.h2 != 0 && !in_tls && sock.tls == 0 {
                take_h2_place(state, sock, recv);
            }
            if sock.data_seen < EARLY_TRANSFERS {
                sock.data_seen += 1;
            }
            if in_tls {
                sock.tls = 1;
            } else if sock.tls != 0 {
                // Ciphertext outside the hooked calls (an unhooked library function): never
                // reported, since userspace would parse it as garbage.
                return;
            }
        }
        None => {
            // A connection older than us (or not TCP, which we leave alone). One already closed
            // (its last bytes read after a reset) is not followed again: its close was seen.
            if !is_tcp(sk) || is_closed_or_listening(sk) || !take_socket_budget(tgid) {
                return;
            }
            let tls = u32::from(in_tls);
            let sock = SockState { tgid, role: conn_role::UNKNOWN, tls, data_seen: 1, ..SockState::default() };
            if !insert_counted(key, sk, sock) {
                return;
            }
            emit_conn(event_kind::SOCKET_OPEN, sk, tgid, conn_role::UNKNOWN);
            state.data_sock_lost = 0;
            state.data_first = early_bits(0);
        }
    }
    state.data_sk = key;
}

/// `data_first`'s bits for a transfer after `seen` others on its socket.
#[inline(always)]
fn early_bits(seen: u32) -> u32 {
    let first = if seen == 0 { FIRST_ON_SOCKET } else { 0 };
    if seen < EARLY_TRANSFERS { first | EARLY_ON_SOCKET } else { first }
}

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

/// Moves the place of the next frame header in `sock`'s `read` (or write) direction into the
/// transfer being reported. Unknown until this transfer's walk says where the next header is:
/// a transfer whose record is lost leaves it so.
#[inline(always)]
pub fn take_h2_place(state: &mut ThreadState, sock: &mut SockState, read: bool) {
    if let Some(next) = sock.h2_next.get_mut(usize::from(!read)) {
        state.data_h2_origin = *next;
        *next = H2_NEXT_UNKNOWN;
    }
}

/// Where the transfer's first frame header is, on an HTTP/2 connection: where the last walk in
/// its direction left it, or its first byte when that is not known (or not HTTP/2). `first`:
/// the transfer's first buffer (address, length), whose first bytes may complete the length of
/// a header the last transfer ended inside (`SPLIT_HEADERS`: see `walk_frames`; without, no
/// place is ever left partial).
#[inline(always)]
fn h2_origin<const SPLIT_HEADERS: bool>(state: &ThreadState, first: (u64, u64)) -> u64 {
    let next = state.data_h2_origin;
    if state.data_first & ON_H2 == 0 || next == H2_NEXT_UNKNOWN {
        0
    } else if SPLIT_HEADERS && next & H2_NEXT_PARTIAL != 0 {
        origin_past_split_header(next, first.0, first.1)
    } else {
        u64::from(next & !H2_NEXT_IN_HEADER)
    }
}

/// Where the next transfer in this one's direction starts in its frames.
#[inline(always)]
fn set_h2_next(state: &ThreadState, next: u32) {
    set_h2_next_of(state.data_sk, data_shape::is_read(state.data_shape), next);
}

/// Where the next transfer on socket `sk` in the `read` (or write) direction starts in its frames.
#[inline(always)]
pub fn set_h2_next_of(sk: u64, read: bool, next: u32) {
    if let Some(sock) = SOCKS.get_ptr_mut(&sk) {
        let dir = usize::from(!read);
        // SAFETY: a map value pointer, valid for this program run.
        if let Some(slot) = unsafe { (*sock).h2_next.get_mut(dir) } {
            *slot = next;
        }
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

/// The bytes that made a followed socket unread were read.
#[inline(always)]
fn clear_unread(key: u64) {
    if let Some(sock) = SOCKS.get_ptr_mut(&key) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*sock).unread_since_ns = 0 };
    }
}

/// The transfer is over: send on the bytes it moved on a followed socket. Moving bytes is also
/// an event loop's iteration boundary. `go`: the Go TLS call its goroutine is inside. True when
/// its HTTP/2 frames are left for a continuation program to walk on (`h2_continue`).
#[inline(always)]
fn finish_transfer<const ACROSS_BUFFERS: bool>(
    state: &mut ThreadState,
    tid: u32,
    ret: i32,
    go: Option<*mut GoTlsCall>,
) -> bool {
    let mut walk_left = false;
    if ret > 0 {
        let now = now_ns();
        if state.data_sk != 0 {
            if let Some(call) = go {
                // A Go `Write`'s plaintext, sent at its first transfer: walked on as this
                // transfer's own would be.
                walk_left = go_transfer::<ACROSS_BUFFERS>(state, tid, call, state.data_sk, state.data_queued_ns);
            } else if state.tls_depth != 0 {
                // Ciphertext inside a TLS library call: its plaintext is sent when the call returns.
                tls_transfer(state, state.data_sk, state.data_queued_ns);
            } else {
                walk_left = emit_data::<ACROSS_BUFFERS, ACROSS_BUFFERS>(state, tid, ret as u64, now);
            }
        }
        transfer_boundary(state, tid, now);
    }
    state.data_shape = data_shape::NONE;
    state.data_sk = 0;
    walk_left
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
fn lose_record(state: &ThreadState, drop: u32) {
    count_drop(drop);
    if let Some(sock) = SOCKS.get_ptr_mut(&state.data_sk) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*sock).lost = (*sock).lost.wrapping_add(1) };
    }
}

/// Sends a data record. A transfer of an HTTP/2 connection (or a connection's first one, which
/// may open with the preface) that runs past the head gets the larger record with its frame
/// headers walked; any other pays one test more. `ACROSS_BUFFERS`: the walk goes on past the
/// first buffer of a `writev` (the socket tracepoints; 6.1's verifier, for the `tcp_*msg`
/// fallback, did not finish with it in 150 s, and TLS plaintext is one buffer). `CONTINUE`: past
/// its bound in continuation programs, which the caller has (`h2_continue`). True when the walk
/// is left for one.
#[inline(always)]
pub fn emit_data<const ACROSS_BUFFERS: bool, const CONTINUE: bool>(
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
) -> bool {
    let unread = socket_ring_unread();
    if unread > u64::from(SOCKET_RINGBUF_BYTES / 2) && !ring_share_left(state.tgid) {
        lose_record(state, drop_index::RING_SHARE);
        return false;
    }
    let (buffers, iovs) = buffers(state, len);
    let origin = h2_origin::<CONTINUE>(state, (buffers.0, buffers.1));
    // An h2 transfer with bytes past its copied head (past 512, or in a later buffer), and a
    // connection's first transfer with a large first buffer (it may open with the preface).
    let past_head = if state.data_first & ON_H2 != 0 {
        len > buffers.1.min(DATA_HEAD_BYTES as u64)
    } else {
        state.data_first != 0 && buffers.1 > DATA_HEAD_BYTES as u64
    };
    if past_head && origin < len {
        let iov = if ACROSS_BUFFERS { iovs.0 } else { 0 };
        let walked = Buffers::new(buffers.0, buffers.1, iov, iovs.1, iovs.2);
        return emit_walked::<CONTINUE>(state, tid, len, now, (buffers, walked, origin), unread);
    }
    if state.data_first & ON_H2 != 0 {
        // No header past the head to keep, but the connection's place in its frames moves on.
        set_h2_next(state, next_after_head::<CONTINUE>(buffers.0, buffers.1, origin, len));
        // Wholly inside a frame's payload: no bytes needed. One that starts inside a header
        // keeps them: userspace completes the header from them.
        if origin >= len && state.data_h2_origin & H2_NEXT_IN_HEADER == 0 {
            emit_payload(state, tid, len, now, unread);
            return false;
        }
    }
    let Some(mut entry) = SOCKET_EVENTS.reserve::<DataEvent>(0) else {
        lose_record(state, drop_index::SOCKET_RINGBUF);
        return false;
    };
    // SAFETY: a reserved record of a DataEvent's size.
    unsafe { fill_data(entry.as_mut_ptr(), state, tid, len, now, buffers) };
    // The ring's unread bytes with this record (and its 8-byte header), read once above.
    let record = size_of::<DataEvent>();
    entry.submit(submit_flags(unread + record as u64 + 8, SOCKET_RINGBUF_BYTES, record));
    false
}

/// `emit_data` for an HTTP/2 transfer inside one frame's payload: its length and time only.
#[inline(always)]
fn emit_payload(state: &ThreadState, tid: u32, len: u64, now: u64, unread: u64) {
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

/// `emit_data` for a transfer that may carry HTTP/2 frames past its head (`bytes`: its buffers as
/// copied and as walked, and where its first frame header is). True when its walk reached the
/// bound and is left for a continuation (`CONTINUE`: this hook has them).
#[inline(always)]
fn emit_walked<const CONTINUE: bool>(
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    bytes: ((u64, u64, u64, u64), Buffers, u64),
    unread: u64,
) -> bool {
    let (buffers, walked, origin) = bytes;
    let Some(mut entry) = SOCKET_EVENTS.reserve::<H2DataEvent>(0) else {
        lose_record(state, drop_index::SOCKET_RINGBUF);
        return false;
    };
    let event = entry.as_mut_ptr();
    let mut walk_left = false;
    // SAFETY: a reserved record of an H2DataEvent's size, whose first field is the DataEvent.
    unsafe {
        let data = &raw mut (*event).data;
        fill_data(data, state, tid, len, now, buffers);
        let copied = u64::from((*data).head_len);
        let preface = state.data_first & EARLY_ON_SOCKET != 0
            && copied >= PREFACE_LEN
            && u64::from_le_bytes(*(*data).head.as_ptr().cast::<[u8; 8]>()) == PREFACE_START;
        if state.data_first & ON_H2 != 0 || preface {
            let origin = if preface { PREFACE_LEN } else { origin };
            let end = walk_frames::<CONTINUE>(&raw mut (*event).walk, walked, len, origin, copied);
            (*data).h2_walk = 1;
            match (CONTINUE, end) {
                // The connection's place stays unknown until the continuation has found it: at
                // the end of its walk, or past a header this transfer ends inside.
                (true, WalkEnd::Bound { at, buffers } | WalkEnd::Cut { at, buffers }) => {
                    let read = data_shape::is_read(state.data_shape);
                    walk_left = h2_continue::leave(tid, state.data_sk, read, len, at, buffers);
                    let more_records = matches!(end, WalkEnd::Bound { .. });
                    (*event).walk.continued = u8::from(walk_left && more_records);
                }
                _ => set_h2_next(state, next_origin(end.reached(), len)),
            }
        }
    }
    let record = size_of::<H2DataEvent>();
    entry.submit(submit_flags(unread + record as u64 + 8, SOCKET_RINGBUF_BYTES, record));
    walk_left
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
unsafe fn fill_data(
    event: *mut DataEvent,
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    buffers: (u64, u64, u64, u64),
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
        if head_len > 0
            && head_len <= DATA_HEAD_BYTES as u32
            && bpf_probe_read_user((*event).head.as_mut_ptr().cast(), head_len, head_base as *const _) == 0
        {
            copied = head_len as u16;
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
