//! TCP connections of targets and the bytes they move, for request timing in userspace.
//!
//! The socket layer's own tracepoints tell which syscalls touch a TCP socket and which one:
//! `sock_recv_length`/`sock_send_length` fire inside read/write/recv*/send* of any socket, in the
//! caller's context, with the `struct sock`. sys_enter noted the syscall's buffer; sys_exit copies
//! the first and last bytes moved into the socket ring buffer. `sk_data_ready` (softirq) notes when
//! unread bytes first arrived, so the read that takes them knows how long they queued.
//! `inet_sock_set_state` follows connections from connect or accept to close, so `SOCKS` holds
//! only live connections.

use aya_ebpf::{
    helpers::generated::{bpf_probe_read_kernel, bpf_probe_read_user},
    macros::{btf_tracepoint, map},
    maps::{HashMap, RingBuf},
    programs::BtfTracePointContext,
};
use gateway_observer_common::{
    ConnEvent, DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, FlowEvent, MAX_LISTEN_PORTS, MAX_SOCKETS,
    SOCKET_RINGBUF_BYTES, SockState, ThreadState, conn_role, data_shape, drop_index, event_kind, listen_key,
};

use crate::maps::{TARGETS, btf_field, config, count_drop, current_ids, now_ns, thread_state};

/// Live TCP connections of targets, by `struct sock` address.
#[map]
pub static SOCKS: HashMap<u64, SockState> = HashMap::with_max_entries(MAX_SOCKETS, 0);

/// `listen_key(namespace, port)` → 1 for each port a target listens on in its network namespace
/// (userspace keeps it current): a connection accepted there is followed from its handshake,
/// before the target reads it. The same port in another namespace (another pod) is not.
#[map]
pub static LISTEN_PORTS: HashMap<u64, u8> = HashMap::with_max_entries(MAX_LISTEN_PORTS, 0);

#[map]
pub static SOCKET_EVENTS: RingBuf = RingBuf::with_byte_size(SOCKET_RINGBUF_BYTES, 0);

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const IPPROTO_TCP: u16 = 6;
const MSG_PEEK: i32 = 2;
const TCP_ESTABLISHED: i32 = 1;
const TCP_SYN_SENT: i32 = 2;
const TCP_SYN_RECV: i32 = 3;
const TCP_CLOSE: i32 = 7;
const TCP_LISTEN: u8 = 10;
/// Ring-buffer submit flags and query: records are committed without waking the daemon (a
/// wakeup is an inter-processor interrupt, several microseconds in a VM, per record); the daemon
/// drains the ring on a short timer, and is woken only when the ring is getting full.
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;
const WAKE_AT_BYTES: u64 = SOCKET_RINGBUF_BYTES as u64 / 4;

#[inline(always)]
fn submit_flags() -> u64 {
    if SOCKET_EVENTS.query(BPF_RB_AVAIL_DATA) >= WAKE_AT_BYTES { BPF_RB_FORCE_WAKEUP } else { BPF_RB_NO_WAKEUP }
}

/// Readv/writev of more buffers than this are not looked into (UIO_MAXIOV is 1024).
const MAX_IOV: u64 = 1024;
/// Buffers of a readv/writev searched for the one holding the last byte moved.
const TAIL_IOV_SCAN: u64 = 8;

/// sock_recv_length(struct sock *sk, int ret, int flags)
#[btf_tracepoint(function = "sock_recv_length")]
pub fn sock_recv_length(ctx: BtfTracePointContext) -> u32 {
    on_transfer(&ctx, true);
    0
}

/// sock_send_length(struct sock *sk, int ret, int flags)
#[btf_tracepoint(function = "sock_send_length")]
pub fn sock_send_length(ctx: BtfTracePointContext) -> u32 {
    on_transfer(&ctx, false);
    0
}

/// A target thread in a data syscall moved bytes on socket `sk`: remember which socket, and for a
/// read, since when its bytes were waiting.
#[inline(always)]
fn on_transfer(ctx: &BtfTracePointContext, recv: bool) {
    let (tid, tgid) = current_ids();
    let Some(state) = thread_state(tid) else { return };
    let sk: *const u8 = ctx.arg(0);
    let key = sk as u64;
    let ret: i32 = ctx.arg(1);
    let flags: i32 = ctx.arg(2);
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
                sock.tgid = tgid;
            }
        }
        None => {
            // A connection older than us (or not TCP, which we leave alone). One already closed
            // (its last bytes read after a reset) is not followed again: its close was seen.
            if !is_tcp(sk) || is_closed_or_listening(sk) {
                return;
            }
            let sock = SockState { tgid, role: conn_role::UNKNOWN, ..SockState::default() };
            if SOCKS.insert(&key, &sock, 0).is_err() {
                count_drop(drop_index::SOCKS_FULL);
                return;
            }
            emit_conn(event_kind::SOCKET_OPEN, sk, tgid, conn_role::UNKNOWN);
        }
    }
    state.data_sk = key;
}

/// The bytes that made a followed socket unread were read.
#[inline(always)]
fn clear_unread(key: u64) {
    if let Some(sock) = SOCKS.get_ptr_mut(&key) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*sock).unread_since_ns = 0 };
    }
}

/// sk_data_ready(const struct sock *sk): bytes arrived; runs for every socket on the host.
#[btf_tracepoint(function = "sk_data_ready")]
pub fn sk_data_ready(ctx: BtfTracePointContext) -> u32 {
    let sk: *const u8 = ctx.arg(0);
    if let Some(sock) = SOCKS.get_ptr_mut(&(sk as u64)) {
        // SAFETY: a map value pointer, valid for this program run.
        let sock = unsafe { &mut *sock };
        let now = now_ns();
        sock.rx_last_ns = now;
        if sock.unread_since_ns == 0 {
            sock.unread_since_ns = now;
        }
    }
    0
}

/// inet_sock_set_state(const struct sock *sk, const int oldstate, const int newstate)
#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn inet_sock_set_state(ctx: BtfTracePointContext) -> u32 {
    let sk: *const u8 = ctx.arg(0);
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    let key = sk as u64;
    match new {
        // connect() by a target, in its own context. The local port is chosen after this state
        // is set, so the connection is announced once established.
        TCP_SYN_SENT => {
            let (_, tgid) = current_ids();
            // SAFETY: a map value read; TargetInfo is plain data.
            if unsafe { TARGETS.get(tgid) }.is_some() {
                let sock = SockState { tgid, role: conn_role::CLIENT, ..SockState::default() };
                if SOCKS.insert(&key, &sock, 0).is_err() {
                    count_drop(drop_index::SOCKS_FULL);
                }
            }
        }
        TCP_ESTABLISHED => {
            // SAFETY: a map value read; SockState is plain data.
            if let Some(sock) = unsafe { SOCKS.get(&key) } {
                emit_conn(event_kind::SOCKET_OPEN, sk, sock.tgid, sock.role);
            } else if old == TCP_SYN_RECV && listened_on(sk) {
                // Accepted on a target's port: which worker will accept it is not known yet.
                let sock = SockState { tgid: 0, role: conn_role::SERVER, ..SockState::default() };
                if SOCKS.insert(&key, &sock, 0).is_err() {
                    count_drop(drop_index::SOCKS_FULL);
                    return 0;
                }
                emit_conn(event_kind::SOCKET_OPEN, sk, 0, conn_role::SERVER);
            }
        }
        TCP_CLOSE => {
            // SAFETY: a map value read; SockState is plain data.
            if let Some(sock) = unsafe { SOCKS.get(&key) } {
                let (tgid, role) = (sock.tgid, sock.role);
                let _ = SOCKS.remove(&key);
                emit_conn(event_kind::SOCKET_CLOSE, sk, tgid, role);
            }
        }
        _ => {}
    }
    0
}

/// tcp_retransmit_skb(const struct sock *sk, const struct sk_buff *skb, int err): data went
/// unacknowledged long enough to be sent again. Rare on a healthy flow, the signature of a dead
/// return path.
#[btf_tracepoint(function = "tcp_retransmit_skb")]
pub fn tcp_retransmit_skb(ctx: BtfTracePointContext) -> u32 {
    let sk: *const u8 = ctx.arg(0);
    let Some(sock) = SOCKS.get_ptr_mut(&(sk as u64)) else { return 0 };
    // SAFETY: a map value pointer, valid for this program run.
    let sock = unsafe { &mut *sock };
    sock.retransmits = sock.retransmits.wrapping_add(1);
    let cfg = config();
    let una: u32 = read_kernel(sk, cfg.tcp_snd_una_offset);
    let nxt: u32 = read_kernel(sk, cfg.tcp_snd_nxt_offset);
    emit_flow(event_kind::SOCKET_RETRANSMIT, sk, sock, nxt.wrapping_sub(una), 0);
    0
}

/// tcp_receive_reset(struct sock *sk): the peer reset the connection.
#[btf_tracepoint(function = "tcp_receive_reset")]
pub fn tcp_receive_reset(ctx: BtfTracePointContext) -> u32 {
    on_reset(ctx.arg(0), 1);
    0
}

/// tcp_send_reset(const struct sock *sk, const struct sk_buff *skb, enum sk_rst_reason reason)
#[btf_tracepoint(function = "tcp_send_reset")]
pub fn tcp_send_reset(ctx: BtfTracePointContext) -> u32 {
    on_reset(ctx.arg(0), 0);
    0
}

#[inline(always)]
fn on_reset(sk: *const u8, by_peer: u32) {
    // SAFETY: a map value read; SockState is plain data.
    if let Some(sock) = unsafe { SOCKS.get(&(sk as u64)) } {
        let sock = *sock;
        emit_flow(event_kind::SOCKET_RESET, sk, &sock, 0, by_peer);
    }
}

#[inline(always)]
fn emit_flow(kind: u32, sk: *const u8, sock: &SockState, unacked_bytes: u32, by_peer: u32) {
    let event = FlowEvent {
        kind,
        tgid: sock.tgid,
        sk: sk as u64,
        timestamp_ns: now_ns(),
        rx_last_ns: sock.rx_last_ns,
        unacked_bytes,
        retransmits: sock.retransmits,
        by_peer,
        _pad: 0,
    };
    match SOCKET_EVENTS.reserve::<FlowEvent>(0) {
        Some(mut entry) => {
            entry.write(event);
            // Rare and urgent: wake the daemon now.
            entry.submit(BPF_RB_FORCE_WAKEUP);
        }
        None => count_drop(drop_index::SOCKET_RINGBUF),
    }
}

/// A field of the `struct tcp_sock` that `sk` is (past `struct sock`, so not a BTF-checked load).
#[inline(always)]
fn read_kernel(sk: *const u8, offset: u32) -> u32 {
    let mut value = 0u32;
    // SAFETY: a 4-byte read of kernel memory into a local; a fault leaves 0.
    unsafe {
        bpf_probe_read_kernel((&mut value as *mut u32).cast(), 4, sk.wrapping_add(offset as usize).cast());
    }
    value
}

#[inline(always)]
fn is_tcp(sk: *const u8) -> bool {
    let cfg = config();
    let family: u16 = btf_field(sk, cfg.sock_family_offset);
    let protocol: u16 = btf_field(sk, cfg.sock_protocol_offset);
    (family == AF_INET || family == AF_INET6) && protocol == IPPROTO_TCP
}

#[inline(always)]
fn is_closed_or_listening(sk: *const u8) -> bool {
    let state: u8 = btf_field(sk, config().sock_state_offset);
    state == TCP_CLOSE as u8 || state == TCP_LISTEN
}

#[inline(always)]
fn listened_on(sk: *const u8) -> bool {
    let port: u16 = btf_field(sk, config().sock_local_port_offset);
    // SAFETY: a lookup in our own map; the value is only read.
    unsafe { LISTEN_PORTS.get(&listen_key(sock_netns(sk), port)) }.is_some_and(|listened| *listened != 0)
}

/// The socket's network namespace: `sk->__sk_common.skc_net.net->ns.inum`.
#[inline(always)]
fn sock_netns(sk: *const u8) -> u32 {
    let cfg = config();
    let net: *const u8 = btf_field(sk, cfg.sock_net_offset);
    btf_field(net, cfg.net_inum_offset)
}

/// Announces a connection with its addresses (read once per connection, not per transfer).
#[inline(always)]
fn emit_conn(kind: u32, sk: *const u8, tgid: u32, role: u32) {
    let Some(mut entry) = SOCKET_EVENTS.reserve::<ConnEvent>(0) else {
        count_drop(drop_index::SOCKET_RINGBUF);
        return;
    };
    let cfg = config();
    let family: u16 = btf_field(sk, cfg.sock_family_offset);
    let remote_port_be: u16 = btf_field(sk, cfg.sock_remote_port_offset);
    let mut event = ConnEvent {
        kind,
        tgid,
        sk: sk as u64,
        timestamp_ns: now_ns(),
        role,
        family,
        local_port: btf_field(sk, cfg.sock_local_port_offset),
        remote_port: u16::from_be(remote_port_be),
        netns: sock_netns(sk),
        ..ConnEvent::default()
    };
    if family == AF_INET6 {
        // SAFETY: 16-byte reads into our own arrays from fields of a live socket; a failed read
        // leaves zeros.
        unsafe {
            bpf_probe_read_kernel(
                event.local_addr.as_mut_ptr().cast(),
                16,
                sk.wrapping_add(cfg.sock_local_addr6_offset as usize).cast(),
            );
            bpf_probe_read_kernel(
                event.remote_addr.as_mut_ptr().cast(),
                16,
                sk.wrapping_add(cfg.sock_remote_addr6_offset as usize).cast(),
            );
        }
    } else {
        let local: u32 = btf_field(sk, cfg.sock_local_addr_offset);
        let remote: u32 = btf_field(sk, cfg.sock_remote_addr_offset);
        event.local_addr[..4].copy_from_slice(&local.to_ne_bytes());
        event.remote_addr[..4].copy_from_slice(&remote.to_ne_bytes());
    }
    entry.write(event);
    entry.submit(submit_flags());
}

/// sys_enter of a data syscall: note where its bytes are.
#[inline(always)]
pub fn enter_data_syscall(state: &mut ThreadState, shape: u8, regs: *const u8) {
    state.data_shape = shape;
    state.data_sk = 0;
    state.data_queued_ns = 0;
    if shape != data_shape::NONE {
        let cfg = config();
        state.data_fd = btf_field::<u64>(regs, cfg.regs_arg0_offset) as u32;
        state.data_buf = btf_field(regs, cfg.regs_arg1_offset);
        state.data_count = btf_field(regs, cfg.regs_arg2_offset);
    }
}

/// sys_exit of a data syscall that moved `ret` bytes on a followed socket: send them on.
#[inline(always)]
pub fn exit_data_syscall(state: &mut ThreadState, tid: u32, ret: i64) {
    if state.data_sk != 0 && ret > 0 {
        emit_data(state, tid, ret as u64);
    }
    state.data_shape = data_shape::NONE;
    state.data_sk = 0;
}

/// Where the bytes moved are: (first buffer, its bytes moved, end of the last bytes moved or 0
/// when unknown, how many of those last bytes are in that one buffer).
#[inline(always)]
fn buffers(state: &ThreadState, len: u64) -> (u64, u64, u64, u64) {
    match state.data_shape {
        data_shape::READ_BUF | data_shape::WRITE_BUF => (state.data_buf, len, state.data_buf + len, len),
        data_shape::READ_IOV | data_shape::WRITE_IOV => iov_buffers(state.data_buf, state.data_count, len),
        data_shape::READ_MSG | data_shape::WRITE_MSG => {
            // struct msghdr (x86-64 user ABI): msg_iov at 16, msg_iovlen at 24.
            let iov: u64 = read_user(state.data_buf + 16);
            let count: u64 = read_user(state.data_buf + 24);
            iov_buffers(iov, count, len)
        }
        _ => (0, 0, 0, 0),
    }
}

/// The first iovec holds the head; the tail is in the iovec where the bytes moved end, looked
/// for among the first few (headers + body + chunk trailer is the common shape of a response).
#[inline(always)]
fn iov_buffers(iov: u64, count: u64, len: u64) -> (u64, u64, u64, u64) {
    if iov == 0 || count == 0 || count > MAX_IOV {
        return (0, 0, 0, 0);
    }
    let base: u64 = read_user(iov);
    let first_len: u64 = read_user(iov + 8);
    if first_len >= len {
        return (base, len, base + len, len);
    }
    let mut before = first_len;
    let mut index = 1u64;
    while index < TAIL_IOV_SCAN && index < count {
        let entry = iov + index * 16;
        let buf_len: u64 = read_user(entry + 8);
        if before + buf_len >= len {
            let buf: u64 = read_user(entry);
            return (base, first_len, buf + (len - before), len - before);
        }
        before += buf_len;
        index += 1;
    }
    (base, first_len, 0, 0)
}

#[inline(always)]
fn read_user<T: Default>(addr: u64) -> T {
    let mut value = T::default();
    // SAFETY: copies size_of::<T>() bytes of user memory into a local; a fault leaves the default.
    unsafe {
        bpf_probe_read_user((&mut value as *mut T).cast(), core::mem::size_of::<T>() as u32, addr as *const _);
    }
    value
}

#[inline(always)]
fn emit_data(state: &ThreadState, tid: u32, len: u64) {
    let Some(mut entry) = SOCKET_EVENTS.reserve::<DataEvent>(0) else {
        count_drop(drop_index::SOCKET_RINGBUF);
        return;
    };
    let event = entry.as_mut_ptr();
    let (head_base, head_avail, tail_end, tail_avail) = buffers(state, len);
    let head_len = if head_avail < DATA_HEAD_BYTES as u64 { head_avail as u32 } else { DATA_HEAD_BYTES as u32 };
    // Only bytes of the buffer the transfer ended in: the one before it may lie anywhere.
    let tail_len = if tail_end == 0 {
        0
    } else if tail_avail < DATA_TAIL_BYTES as u64 {
        tail_avail as u32
    } else {
        DATA_TAIL_BYTES as u32
    };
    // SAFETY: `event` points at a reserved ring-buffer record of size_of::<DataEvent>() bytes;
    // every field is written before submit (the byte arrays as far as their valid length).
    unsafe {
        (*event).kind = event_kind::SOCKET_DATA;
        (*event).tid = tid;
        (*event).tgid = state.tgid;
        (*event).fd = state.data_fd;
        (*event).sk = state.data_sk;
        (*event).timestamp_ns = now_ns();
        (*event).len = len;
        (*event).queued_since_ns = state.data_queued_ns;
        (*event).shape = state.data_shape;
        (*event)._pad = 0;
        (*event)._pad2 = 0;
        let mut copied = 0u16;
        if head_len > 0
            && head_len <= DATA_HEAD_BYTES as u32
            && bpf_probe_read_user((*event).head.as_mut_ptr().cast(), head_len, head_base as *const _) == 0
        {
            copied = head_len as u16;
        }
        (*event).head_len = copied;
        let mut tail_copied = 0u16;
        if tail_len > 0
            && tail_len <= DATA_TAIL_BYTES as u32
            && bpf_probe_read_user(
                (*event).tail.as_mut_ptr().cast(),
                tail_len,
                (tail_end - u64::from(tail_len)) as *const _,
            ) == 0
        {
            tail_copied = tail_len as u16;
        }
        (*event).tail_len = tail_copied;
    }
    entry.submit(submit_flags());
}
