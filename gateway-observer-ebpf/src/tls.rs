//! TLS plaintext, from uprobes on the TLS library's read and write calls (OpenSSL's `SSL_read`,
//! `SSL_write` and their `_ex` forms), attached by userspace per target process: a process that
//! is not a target never traps.
//!
//! A call's entry notes, in the thread's state, the plaintext buffer and that the thread is inside
//! the library; the socket transfers nested in it (`socket_data.rs`) then only name the socket and
//! mark it TLS, instead of reporting ciphertext. The return sends the plaintext as the same
//! `DataEvent` a plain transfer makes, on that socket, so userspace parses it unchanged. A read
//! the library answers from bytes it already holds has no nested transfer: the socket the same
//! `SSL *` used last (`TLS_SOCKS`) stands for it. The handshake's calls only hide their ciphertext.
//! A session that never moved bytes on a socket inside a hooked call (Node.js feeds OpenSSL from
//! memory buffers, its ciphertext read and written by libuv outside the calls) has its plaintext
//! sent keyed by its `SSL *` (`DATA_FD_TLS_SESSION`): userspace ties it to a connection.

use aya_ebpf::{
    macros::{map, uprobe, uretprobe},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};
use gateway_observer_common::{
    DATA_FD_TLS_SESSION, DATA_FD_UNKNOWN, MAX_TLS_SESSIONS, ThreadState, TlsArrival, TlsKey, data_shape, drop_index,
};

use crate::{
    h2_continue,
    maps::{count_drop, current_ids, now_ns, thread_state},
    socket_data::{EARLY_ON_SOCKET, EARLY_TRANSFERS, ON_H2, emit_data, take_h2_place},
    sockets::SOCKS,
    transfer_buffers::read_user,
};

/// The socket each `SSL *` of a target last moved bytes on.
#[map]
static TLS_SOCKS: LruHashMap<TlsKey, u64> = LruHashMap::with_max_entries(MAX_TLS_SESSIONS, 0);

/// int SSL_read(SSL *ssl, void *buf, int num)
#[uprobe]
pub fn tls_read_enter(ctx: ProbeContext) -> u32 {
    tls_call_starts(&ctx, data_shape::READ_BUF, false);
    0
}

/// int SSL_write(SSL *ssl, const void *buf, int num)
#[uprobe]
pub fn tls_write_enter(ctx: ProbeContext) -> u32 {
    tls_call_starts(&ctx, data_shape::WRITE_BUF, false);
    0
}

/// int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes)
#[uprobe]
pub fn tls_read_ex_enter(ctx: ProbeContext) -> u32 {
    tls_call_starts(&ctx, data_shape::READ_BUF, true);
    0
}

/// int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t *written)
#[uprobe]
pub fn tls_write_ex_enter(ctx: ProbeContext) -> u32 {
    tls_call_starts(&ctx, data_shape::WRITE_BUF, true);
    0
}

/// SSL_do_handshake, SSL_shutdown: ciphertext only.
#[uprobe]
pub fn tls_other_enter(ctx: ProbeContext) -> u32 {
    tls_call_starts(&ctx, data_shape::NONE, false);
    0
}

/// The return of every call above.
#[uretprobe]
pub fn tls_exit(ctx: RetProbeContext) -> u32 {
    if tls_call_returns::<true>(&ctx) {
        // A tail call never returns: this is the program's last action.
        h2_continue::walk_on(&ctx, h2_continue::Continuation::Uprobe);
    }
    0
}

/// `tls_exit` for kernels whose verifier gives up on it (6.1: a million instructions): the
/// plaintext's HTTP/2 walk stops at one record's bound, as the `tcp_*msg` fallback's does.
#[uretprobe]
pub fn tls_exit_bounded(ctx: RetProbeContext) -> u32 {
    tls_call_returns::<false>(&ctx);
    0
}

#[inline(always)]
fn tls_call_starts(ctx: &ProbeContext, shape: u8, ex: bool) {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return };
    state.tls_depth = state.tls_depth.saturating_add(1);
    // Every call, the handshake's included, says which socket its session uses: the first read
    // of a session may be answered from bytes the handshake already took.
    state.tls_ssl = ctx.arg(0).unwrap_or(0);
    state.tls_sk = 0;
    if shape == data_shape::NONE {
        return;
    }
    state.tls_shape = shape;
    state.tls_buf = ctx.arg(1).unwrap_or(0);
    state.tls_len_out = if ex { ctx.arg(3).unwrap_or(0) } else { 0 };
    state.tls_arrival = TlsArrival::default();
}

/// A nested transfer moved ciphertext on `sk` at `now` (called by `socket_data.rs` instead of
/// reporting it); a read took bytes unread since `queued_ns`.
#[inline(always)]
pub fn tls_transfer(state: &mut ThreadState, sk: u64, read: bool, queued_ns: u64, now: u64) {
    state.tls_sk = sk;
    state.tls_arrival.transfer(read, queued_ns, now);
}

/// True when the plaintext's HTTP/2 walk is left for a continuation program (`CONTINUE`: the
/// caller has them).
#[inline(always)]
fn tls_call_returns<const CONTINUE: bool>(ctx: &RetProbeContext) -> bool {
    let (tid, tgid) = current_ids();
    let Some(state) = thread_state(tid) else { return false };
    if state.tls_depth == 0 {
        // Its entry ran before the uprobes were attached.
        return false;
    }
    state.tls_depth -= 1;
    let key = TlsKey { ssl: state.tls_ssl, tgid, _pad: 0 };
    remember_socket(&key, state.tls_sk);
    let shape = state.tls_shape;
    if shape == data_shape::NONE {
        return false;
    }
    state.tls_shape = data_shape::NONE;
    // Both forms return an int: the bytes moved, or (`_ex`, and the internal function both
    // wrappers call) > 0 for success.
    let ret = ctx.ret::<u64>() as i32;
    let len = if state.tls_len_out != 0 {
        if ret > 0 { read_user::<u64>(state.tls_len_out) } else { 0 }
    } else if ret > 0 {
        ret as u64
    } else {
        0
    };
    if len == 0 {
        return false;
    }
    send_plaintext::<CONTINUE>(state, tid, shape, len, state.tls_sk, &key)
}

/// Sends the `len` bytes of plaintext (`shape`) a call of session `key` moved: on `sk`, the socket
/// its nested transfers used, or (0) the one the session used last, or keyed by the session when
/// none is known. True when its HTTP/2 walk is left for a continuation program (`CONTINUE`: the
/// caller has them).
#[inline(always)]
pub fn send_plaintext<const CONTINUE: bool>(
    state: &mut ThreadState,
    tid: u32,
    shape: u8,
    len: u64,
    sk: u64,
    key: &TlsKey,
) -> bool {
    let known = if sk != 0 {
        Some(sk)
    } else {
        // SAFETY: a map value read, copied at once.
        unsafe { TLS_SOCKS.get(key) }.copied()
    };
    // One call of `emit_plaintext` below, whatever the branch: each inlined copy of its walk is
    // verified on its own, and two put `tls_exit` past 6.1's million instructions.
    let (target, fd, lost) = match known {
        // No socket known for this session: the `SSL *` (or `*tls.Conn`) stands for it.
        None => {
            state.data_first = 0;
            (key.ssl, DATA_FD_TLS_SESSION, 0)
        }
        Some(sk) => {
            let Some(sock) = SOCKS.get_ptr_mut(&sk) else {
                // Not followed (over quota, or closed): its plaintext belongs to no connection we know.
                count_drop(drop_index::TLS_UNATTRIBUTED);
                return false;
            };
            // SAFETY: a map value pointer, valid for this program run.
            let sock = unsafe { &mut *sock };
            // HTTP/2 inside TLS: the plaintext's frames are walked as a cleartext connection's
            // are, from the place its last plaintext in this direction left (the ciphertext
            // leaves it alone).
            let mut first = 0;
            if sock.plain_seen < EARLY_TRANSFERS {
                // The preface opens the client's first plaintext, which a server may read after
                // its own first write (its SETTINGS): the first few records either way are looked
                // at. Also once the connection is HTTP/2: a server's SETTINGS first look to
                // userspace like a connection first seen mid-way, and its mark may reach the
                // kernel before the preface.
                first = EARLY_ON_SOCKET;
                sock.plain_seen += 1;
            }
            if sock.h2 != 0 {
                first |= ON_H2;
                take_h2_place(state, sock, data_shape::is_read(shape));
            }
            state.data_first = first;
            (sk, DATA_FD_UNKNOWN, sock.lost)
        }
    };
    emit_plaintext::<CONTINUE>(state, tid, shape, len, target, fd, lost)
}

/// Notes `sk` (unless 0) as the socket session `key` last moved bytes on.
#[inline(always)]
pub fn remember_socket(key: &TlsKey, sk: u64) {
    // SAFETY: a map value read, copied at once.
    if sk != 0 && unsafe { TLS_SOCKS.get(key) }.copied() != Some(sk) {
        let _ = TLS_SOCKS.insert(key, &sk, 0);
    }
}

/// Sends the `len` bytes of plaintext (`shape`) the call moved as a `DataEvent` on `sk` (or, with
/// `DATA_FD_TLS_SESSION`, on the session `sk`). True when its walk is left for a continuation.
#[inline(always)]
fn emit_plaintext<const CONTINUE: bool>(
    state: &mut ThreadState,
    tid: u32,
    shape: u8,
    len: u64,
    sk: u64,
    fd: u32,
    lost: u32,
) -> bool {
    state.data_shape = shape;
    state.data_buf = state.tls_buf;
    state.data_count = len;
    state.data_sk = sk;
    state.data_fd = fd;
    state.data_queued_ns = state.tls_arrival.queued_ns;
    state.data_sock_lost = lost;
    let walk_left = emit_data::<false, CONTINUE>(state, tid, len, now_ns());
    state.data_shape = data_shape::NONE;
    state.data_sk = 0;
    walk_left
}
