//! TCP connections of targets and the bytes they move, for request timing in userspace.
//!
//! The bytes themselves are `socket_data.rs`'s. `sk_data_ready` (softirq) notes when
//! unread bytes first arrived, so the read that takes them knows how long they queued.
//! `inet_sock_set_state` follows connections from connect or accept to close, so `SOCKS` holds
//! only live connections.

use aya_ebpf::{
    helpers::generated::bpf_probe_read_kernel,
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, RingBuf},
    programs::BtfTracePointContext,
};
use gateway_observer_common::{
    ConnEvent, FlowEvent, MAX_LISTEN_PORTS, MAX_SOCKETS, SOCKET_RINGBUF_BYTES, SockState, conn_role, drop_index,
    event_kind, listen_key, ring_share,
};

use crate::followed_ports;
use crate::maps::{
    BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, TARGETS, btf_field, config, count_drop, current_ids, now_ns, submit_flags,
    take_socket_budget,
};

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

/// `ring_share::EPOCH` (advanced by userspace at each drain) and `ring_share::SHARE`.
#[map]
pub static RING_SHARE: Array<u64> = Array::with_max_entries(ring_share::COUNT, 0);

/// Whether target `tgid` may still write into the congested socket ring: each target gets an
/// equal share of its free half between two drains, so a target flooding it cannot take the
/// room of the others. The count is not atomic: CPUs racing let a few more through.
#[inline(always)]
pub fn ring_share_left(tgid: u32) -> bool {
    let Some(target) = TARGETS.get_ptr_mut(tgid) else { return false };
    let share = RING_SHARE.get(ring_share::SHARE).copied().unwrap_or(0);
    if share == 0 {
        return true; // not set yet: no share to hold anyone to
    }
    let epoch = RING_SHARE.get(ring_share::EPOCH).copied().unwrap_or(0);
    // SAFETY: a map value pointer, valid for this program run.
    let target = unsafe { &mut *target };
    if target.ring_epoch != epoch {
        target.ring_epoch = epoch;
        target.ring_used = 0;
    }
    if target.ring_used >= share {
        return false;
    }
    target.ring_used += 1;
    true
}

/// Bytes unread in the socket ring now (the reader's position to the writers').
#[inline(always)]
pub fn socket_ring_unread() -> u64 {
    SOCKET_EVENTS.query(BPF_RB_AVAIL_DATA)
}

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const IPPROTO_TCP: u16 = 6;
const TCP_ESTABLISHED: i32 = 1;
const TCP_SYN_SENT: i32 = 2;
const TCP_SYN_RECV: i32 = 3;
const TCP_CLOSE: i32 = 7;
const TCP_LISTEN: u8 = 10;
/// The submit flags for the socket ring (see `maps::submit_flags`).
#[inline(always)]
pub fn socket_submit_flags(record_bytes: usize) -> u64 {
    submit_flags(SOCKET_EVENTS.query(BPF_RB_AVAIL_DATA), SOCKET_RINGBUF_BYTES, record_bytes)
}

/// sk_data_ready(const struct sock *sk): bytes arrived; runs for every socket on the host.
#[btf_tracepoint(function = "sk_data_ready")]
pub fn sk_data_ready(ctx: BtfTracePointContext) -> u32 {
    let sk: *const u8 = ctx.arg(0);
    if !followed_ports::may_be_followed(sk) {
        return 0;
    }
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
            if take_socket_budget(tgid) {
                let sock = SockState { tgid, role: conn_role::CLIENT, ..SockState::default() };
                if SOCKS.insert(&key, &sock, 0).is_err() {
                    count_drop(drop_index::SOCKS_FULL);
                }
            }
        }
        TCP_ESTABLISHED => {
            if let Some(sock) = SOCKS.get_ptr_mut(&key) {
                // SAFETY: a map value pointer, valid for this program run.
                let sock = unsafe { &mut *sock };
                // A connect's local port is chosen by now.
                followed_ports::count(sock, sk);
                emit_conn(event_kind::SOCKET_OPEN, sk, sock.tgid, sock.role);
            } else if old == TCP_SYN_RECV && listened_on(sk) {
                // Accepted on a target's port: which worker will accept it is not known yet.
                let sock = SockState { tgid: 0, role: conn_role::SERVER, ..SockState::default() };
                if !insert_counted(key, sk, sock) {
                    return 0;
                }
                emit_conn(event_kind::SOCKET_OPEN, sk, 0, conn_role::SERVER);
            }
        }
        TCP_CLOSE => {
            // SAFETY: a map value read; SockState is plain data.
            if let Some(sock) = unsafe { SOCKS.get(&key) }.copied() {
                remove_counted(key, &sock);
                emit_conn(event_kind::SOCKET_CLOSE, sk, sock.tgid, sock.role);
            }
        }
        _ => {}
    }
    0
}

/// Follows connection `sk` (`key`) in `SOCKS`, counted under its local port; false (counted as a
/// drop) when the map is full.
#[inline(always)]
pub fn insert_counted(key: u64, sk: *const u8, mut sock: SockState) -> bool {
    followed_ports::count(&mut sock, sk);
    if SOCKS.insert(&key, &sock, 0).is_err() {
        followed_ports::uncount(&sock);
        count_drop(drop_index::SOCKS_FULL);
        return false;
    }
    true
}

/// Stops following connection `key`, whose state was `sock`.
#[inline(always)]
pub fn remove_counted(key: u64, sock: &SockState) {
    if SOCKS.remove(&key).is_ok() {
        followed_ports::uncount(sock);
    }
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

/// A field of the `struct tcp_sock` (or `inet_connection_sock`) that `sk` is: past `struct
/// sock`, so not a BTF-checked load.
#[inline(always)]
fn read_kernel<T: Default>(sk: *const u8, offset: u32) -> T {
    let mut value = T::default();
    // SAFETY: a read of kernel memory into a local of its size; a fault leaves the default.
    unsafe {
        bpf_probe_read_kernel(
            (&mut value as *mut T).cast(),
            size_of::<T>() as u32,
            sk.wrapping_add(offset as usize).cast(),
        );
    }
    value
}

#[inline(always)]
pub fn is_tcp(sk: *const u8) -> bool {
    let cfg = config();
    let family: u16 = btf_field(sk, cfg.sock_family_offset);
    let protocol: u16 = btf_field(sk, cfg.sock_protocol_offset);
    (family == AF_INET || family == AF_INET6) && protocol == IPPROTO_TCP
}

/// The socket has an upper-layer protocol (`icsk_ulp_ops`): on a connection that began with a
/// TLS record, kernel TLS (OpenSSL's `KTLS` option), whose plaintext the socket calls then move.
/// The field is past `struct sock`, where a BTF pointer cannot reach: a probe read.
#[inline(always)]
pub fn has_upper_layer_protocol(sk: *const u8) -> bool {
    let offset = config().icsk_ulp_ops_offset;
    offset != 0 && read_kernel::<u64>(sk, offset) != 0
}

#[inline(always)]
pub fn is_closed_or_listening(sk: *const u8) -> bool {
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
pub fn emit_conn(kind: u32, sk: *const u8, tgid: u32, role: u32) {
    let Some(mut entry) = SOCKET_EVENTS.reserve::<ConnEvent>(0) else {
        count_drop(drop_index::SOCKET_RINGBUF);
        return;
    };
    let cfg = config();
    let family: u16 = btf_field(sk, cfg.sock_family_offset);
    let remote_port_be: u16 = btf_field(sk, cfg.sock_remote_port_offset);
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved ring-buffer record of size_of::<ConnEvent>() bytes;
    // every field is written before submit. Written field by field in place: a copy of a whole
    // struct built on the stack is done byte by byte, which the verifier rejects for the socket
    // pointer's bytes.
    unsafe {
        (*event).kind = kind;
        (*event).tgid = tgid;
        (*event).sk = sk as u64;
        (*event).timestamp_ns = now_ns();
        (*event).role = role;
        (*event).family = family;
        (*event).local_port = btf_field(sk, cfg.sock_local_port_offset);
        (*event).remote_port = u16::from_be(remote_port_be);
        (*event)._pad = [0; 2];
        (*event).netns = sock_netns(sk);
        (*event).local_addr = [0; 16];
        (*event).remote_addr = [0; 16];
        if family == AF_INET6 {
            // A failed read leaves zeros.
            bpf_probe_read_kernel(
                (*event).local_addr.as_mut_ptr().cast(),
                16,
                sk.wrapping_add(cfg.sock_local_addr6_offset as usize).cast(),
            );
            bpf_probe_read_kernel(
                (*event).remote_addr.as_mut_ptr().cast(),
                16,
                sk.wrapping_add(cfg.sock_remote_addr6_offset as usize).cast(),
            );
        } else {
            let local: u32 = btf_field(sk, cfg.sock_local_addr_offset);
            let remote: u32 = btf_field(sk, cfg.sock_remote_addr_offset);
            (*event).local_addr.as_mut_ptr().cast::<u32>().write_unaligned(local);
            (*event).remote_addr.as_mut_ptr().cast::<u32>().write_unaligned(remote);
        }
    }
    entry.submit(socket_submit_flags(size_of::<ConnEvent>()));
}
