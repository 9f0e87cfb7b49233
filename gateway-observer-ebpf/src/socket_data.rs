//! The bytes targets move on followed TCP connections, for request timing in userspace: the
//! first and last bytes of each transfer go to the socket ring buffer.
//!
//! The socket layer's own tracepoints, `sock_recv_length`/`sock_send_length`, fire at the end of
//! read/write/recv*/send* of any socket, in the caller's context, with the `struct sock`: the
//! syscall and its buffer are read from the caller's registers there. Kernels before 6.5 lack
//! them; there `tcp_recvmsg`/`tcp_sendmsg` are hooked instead (fentry notes where the caller's
//! bytes are, from the `msghdr`'s iterator; fexit sends what moved).

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit},
    programs::{BtfTracePointContext, FEntryContext, FExitContext},
};
use gateway_observer_common::{
    DATA_FD_UNKNOWN, DATA_HEAD_BYTES, DataEvent, GoTlsCall, H2_NEXT_IN_HEADER, H2_NEXT_PARTIAL, H2_NEXT_UNKNOWN,
    H2DataEvent, SOCKET_RINGBUF_BYTES, SockState, ThreadState, conn_role, data_shape, drop_index, event_kind,
    syscall_class, walk_mode,
};

use crate::{
    data_records::{emit_gathered, emit_payload, emit_record, fill_data, lose_record},
    go_tls::{call_in_progress, go_transfer},
    h2_continue,
    h2_marks::take_h2_mark,
    h2_walk::{Buffers, next_after_head, next_origin, origin_past_split_header, walk_frames},
    loop_iterations::transfer_boundary,
    maps::{btf_field, config, current_ids, now_ns, submit_flags, take_socket_budget, thread_state},
    sockets::{
        SOCKET_EVENTS, SOCKS, emit_conn, has_upper_layer_protocol, insert_counted, is_closed_or_listening, is_tcp,
        remove_counted, ring_share_left, socket_ring_unread,
    },
    syscalls::Call,
    tls::tls_transfer,
    transfer_buffers::{buffers, scattered_small},
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
pub const PREFACE_START: u64 = u64::from_le_bytes(*b"PRI * HT");
pub const PREFACE_LEN: u64 = 24;

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
            // A TLS connection outside the hooked calls moves ciphertext (an unhooked library
            // function, or none hooked), unless kernel TLS took its session over: then the
            // socket carries plaintext once the handshake is done.
            let kernel_tls = !in_tls && sock.tls != 0 && has_upper_layer_protocol(sk);
            // (Ciphertext of a TLS connection does not move its plaintext's place: `tls.rs`.)
            if sock.h2 != 0 && !in_tls && (sock.tls == 0 || kernel_tls) {
                take_h2_place(state, sock, recv);
            }
            if sock.data_seen < EARLY_TRANSFERS {
                sock.data_seen += 1;
            }
            if in_tls {
                sock.tls = 1;
            } else if sock.tls != 0 && !kernel_tls {
                // Ciphertext: never reported, since userspace would parse it as garbage.
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
pub fn set_h2_next(state: &ThreadState, next: u32) {
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
            let read = data_shape::is_read(state.data_shape);
            if let Some(call) = go {
                // A Go `Write`'s plaintext, sent at its first transfer: walked on as this
                // transfer's own would be.
                walk_left =
                    go_transfer::<ACROSS_BUFFERS>(state, tid, call, state.data_sk, read, state.data_queued_ns, now);
            } else if state.tls_depth != 0 {
                // Ciphertext inside a TLS library call: its plaintext is sent when the call returns.
                tls_transfer(state, state.data_sk, read, state.data_queued_ns, now);
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

/// Sends a data record. A transfer of an HTTP/2 connection (or a connection's first one, which
/// may open with the preface) that runs past the head has its frame headers walked; any other
/// pays one test more. `ACROSS_BUFFERS`: the walk goes on past the first buffer of a `writev`
/// (the socket tracepoints; 6.1's verifier, for the `tcp_*msg` fallback, did not finish with it
/// in 150 s, and TLS plaintext is one buffer). `CONTINUE`: the walk is left for the continuation
/// programs, which the caller has (`h2_continue`); without, it is done here and stops at one
/// record's bound. True when the walk is left.
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
    // A small HTTP/2 transfer in more pieces than the walk follows (gRPC's C core: a buffer per
    // header name and value) is gathered instead. Its own path: the verifier would otherwise
    // walk every state the gathering loop leaves through the frame walk below.
    if ACROSS_BUFFERS && state.data_first & ON_H2 != 0 && scattered_small(iovs, buffers.1, len) {
        emit_gathered(state, tid, len, now, (buffers, iovs, origin), unread);
        return false;
    }
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
        if CONTINUE {
            return emit_walk_left(state, tid, len, now, (buffers, walked, origin), unread);
        }
        emit_walked(state, tid, len, now, (buffers, walked, origin), unread);
        return false;
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
    emit_record(state, tid, len, now, (buffers, None), unread, |_| false)
}

/// Where a transfer's walk begins, from its copied head (`head_len` bytes of `event`): past the
/// client preface when the connection opens with it, else `origin`; None when the transfer is
/// not HTTP/2's.
///
/// # Safety
/// `event` points at a filled data record.
#[inline(always)]
unsafe fn walk_origin(state: &ThreadState, event: *const DataEvent, origin: u64) -> Option<u64> {
    // SAFETY: the caller's.
    let preface = unsafe {
        state.data_first & EARLY_ON_SOCKET != 0
            && u64::from((*event).head_len) >= PREFACE_LEN
            && u64::from_le_bytes(*(*event).head.as_ptr().cast::<[u8; 8]>()) == PREFACE_START
    };
    if preface {
        Some(PREFACE_LEN)
    } else if state.data_first & ON_H2 != 0 {
        Some(origin)
    } else {
        None
    }
}

/// `emit_data` for a transfer that may carry HTTP/2 frames past its head, in a hook with
/// continuation programs (`bytes`: its buffers as copied and as walked, and where its first
/// frame header is): a data record, its walk left for them. True when it is left.
#[inline(always)]
fn emit_walk_left(
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    bytes: ((u64, u64, u64, u64), Buffers, u64),
    unread: u64,
) -> bool {
    let (buffers, walked, origin) = bytes;
    emit_record(state, tid, len, now, (buffers, None), unread, |event| {
        // SAFETY: the record, filled and not sent yet.
        unsafe {
            let Some(origin) = walk_origin(state, event, origin) else { return false };
            let read = data_shape::is_read(state.data_shape);
            let copied = u64::from((*event).head_len);
            // The connection's place stays unknown until the continuation has found it.
            let walk_left = h2_continue::leave(tid, state.data_sk, read, len, origin, copied, walked);
            if walk_left {
                (*event).h2_walk = walk_mode::IN_CONTINUATIONS;
            }
            walk_left
        }
    })
}

/// `emit_data` for a transfer that may carry HTTP/2 frames past its head, in a hook without
/// continuation programs (`bytes`: as `emit_walk_left`'s): the larger record with its frame
/// headers walked, as far as one record's bound.
#[inline(always)]
fn emit_walked(
    state: &ThreadState,
    tid: u32,
    len: u64,
    now: u64,
    bytes: ((u64, u64, u64, u64), Buffers, u64),
    unread: u64,
) {
    let (buffers, walked, origin) = bytes;
    let Some(mut entry) = SOCKET_EVENTS.reserve::<H2DataEvent>(0) else {
        lose_record(state, drop_index::SOCKET_RINGBUF);
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: a reserved record of an H2DataEvent's size, whose first field is the DataEvent.
    unsafe {
        let data = &raw mut (*event).data;
        fill_data(data, state, tid, len, now, buffers, None);
        if let Some(origin) = walk_origin(state, data, origin) {
            let copied = u64::from((*data).head_len);
            let end = walk_frames::<false>(&raw mut (*event).walk, walked, len, origin, copied);
            (*data).h2_walk = walk_mode::INLINE;
            set_h2_next(state, next_origin(end.reached(), len));
        }
    }
    let record = size_of::<H2DataEvent>();
    entry.submit(submit_flags(unread + record as u64 + 8, SOCKET_RINGBUF_BYTES, record));
}
