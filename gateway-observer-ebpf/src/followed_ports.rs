//! Followed connections counted by local port, so that `sk_data_ready`, which runs for every
//! packet of data to every socket on the host, looks a socket up in `SOCKS` only where a followed
//! connection has its port: an array read instead of a hash lookup for the host's other sockets.
//! A connection counts once its local port is known (a connect's is chosen after `SYN_SENT`),
//! and stops counting when it leaves `SOCKS`. Ports in other network namespaces share the count:
//! a socket there with a followed port's number is looked up, and not found.

use aya_ebpf::{macros::map, maps::Array};
use gateway_observer_common::SockState;

use crate::maps::{btf_field, config};

const PORTS: u32 = 1 << 16;

/// Followed connections with each local port.
#[map]
static FOLLOWED_PORTS: Array<i32> = Array::with_max_entries(PORTS, 0);

/// The local port (host order) of socket `sk`, a BTF `struct sock` pointer.
#[inline(always)]
fn local_port(sk: *const u8) -> u16 {
    btf_field(sk, config().sock_local_port_offset)
}

/// Whether `sk` may be a followed connection: some followed connection has its local port.
#[inline(always)]
pub fn may_be_followed(sk: *const u8) -> bool {
    FOLLOWED_PORTS.get(u32::from(local_port(sk))).is_some_and(|count| *count > 0)
}

#[inline(always)]
fn add(port: u32, delta: i32) {
    if let Some(count) = FOLLOWED_PORTS.get_ptr_mut(port) {
        // SAFETY: an array value pointer, valid for this program run; an atomic add, since
        // connections open and close on every CPU.
        unsafe {
            core::intrinsics::atomic_xadd::<i32, i32, { core::intrinsics::AtomicOrdering::Relaxed }>(count, delta);
        }
    }
}

/// Counts `sock`'s connection `sk` under its local port, unless it already is.
#[inline(always)]
pub fn count(sock: &mut SockState, sk: *const u8) {
    if sock.counted_port != 0 {
        return;
    }
    let port = u32::from(local_port(sk));
    add(port, 1);
    // Stored one up: 0 means not counted.
    sock.counted_port = port + 1;
}

/// The connection of `sock` left `SOCKS`: it no longer counts.
#[inline(always)]
pub fn uncount(sock: &SockState) {
    if sock.counted_port != 0 {
        add(sock.counted_port - 1, -1);
    }
}
