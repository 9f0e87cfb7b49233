//! TLS plaintext of Go programs (`crypto/tls`), from uprobes at the entry of `(*Conn).Read`,
//! `(*Conn).Write`, `serverHandshake` and `clientHandshake` and at every RET inside them (one
//! program for the data calls' RETs, one for the handshake's, which `Read` and `Write` may run
//! first). A uretprobe rewrites the return address on the stack, which Go moves when it grows a
//! goroutine's stack, so Go functions get none. Go's register ABI (1.17+, x86-64): the receiver
//! in RAX, the slice's pointer and length in RBX and RCX; the count returned in RAX; the running
//! goroutine (`g`) in R14 at all times.
//!
//! A goroutine that blocks inside `Read` parks and may resume on another thread, so the call in
//! progress is kept per goroutine (`GO_TLS_CALLS`, (tgid, g)), not in the thread's state. The
//! socket transfers nested in a call find it from the R14 the syscall was entered with
//! (`call_in_progress`, from `socket_data.rs`): they name the socket and mark it TLS, as inside
//! OpenSSL's calls. A read answered from bytes `crypto/tls` already holds uses the socket the
//! same `*tls.Conn` moved bytes on last (`TLS_SOCKS`, shared with OpenSSL's `SSL *`).
//!
//! A `Write`'s plaintext is sent at its first nested transfer, not at its RET: Go's HTTP/2 server
//! writes from short-lived goroutines, and one held between its `write` and its RET (descheduled,
//! or waiting for a P) let the peer read the response, close, and the socket leave `SOCKS` before
//! the RET, which then found its socket gone. `Write` writes the whole slice or fails, so its
//! length is known at entry. A `Read`'s length is known only at its RET.

use aya_ebpf::{
    macros::{map, uprobe},
    maps::{Array, LruHashMap},
    programs::ProbeContext,
};
use gateway_observer_common::{GoTlsCall, MAX_GO_TLS_CALLS, ThreadState, TlsArrival, TlsKey, data_shape};

use crate::{
    h2_continue,
    maps::{btf_field, config, current_ids, thread_state},
    syscalls::Call,
    tls::{remember_socket, send_plaintext},
};

/// Go `crypto/tls` calls in progress, by (tgid, goroutine).
#[map]
static GO_TLS_CALLS: LruHashMap<TlsKey, GoTlsCall> = LruHashMap::with_max_entries(MAX_GO_TLS_CALLS, 0);

/// Entry 0: how many processes have Go TLS calls hooked (userspace keeps it). While 0, a socket
/// transfer pays one array lookup for Go and no hash lookup.
#[map]
static GO_TLS_PROCESSES: Array<u32> = Array::with_max_entries(1, 0);

/// Offsets in the x86-64 `struct pt_regs` (the user-visible layout, `user_regs_struct`'s). Go
/// calls are hooked on x86-64 only (userspace checks the ELF's machine).
const R14: usize = 8;
const RBX: usize = 40;
const RAX: usize = 80;
const RCX: usize = 88;

#[inline(always)]
fn reg(ctx: &ProbeContext, offset: usize) -> u64 {
    // SAFETY: a kprobe-type program's context is the traced task's pt_regs; reading a field of it
    // at a fixed offset inside the struct is a context access the verifier checks at load.
    unsafe { core::ptr::read_volatile((ctx.regs as *const u8).add(offset).cast::<u64>()) }
}

/// func (c *Conn) Read(b []byte) (int, error)
#[uprobe]
pub fn go_tls_read_enter(ctx: ProbeContext) -> u32 {
    go_data_call_starts(&ctx, data_shape::READ_BUF);
    0
}

/// func (c *Conn) Write(b []byte) (int, error)
#[uprobe]
pub fn go_tls_write_enter(ctx: ProbeContext) -> u32 {
    go_data_call_starts(&ctx, data_shape::WRITE_BUF);
    0
}

/// func (c *Conn) serverHandshake(ctx context.Context) error, and clientHandshake: ciphertext
/// only; names the socket. `Read` and `Write` run the handshake when it was not run before: inside
/// them it is part of their call.
#[uprobe]
pub fn go_tls_other_enter(ctx: ProbeContext) -> u32 {
    let (_, tgid) = current_ids();
    let key = TlsKey { ssl: reg(&ctx, R14), tgid, _pad: 0 };
    // SAFETY: a map value read, copied at once.
    if unsafe { GO_TLS_CALLS.get(&key) }.is_some_and(|call| call.shape != data_shape::NONE) {
        return 0;
    }
    go_call_starts(&ctx, key, data_shape::NONE);
    0
}

/// Every RET instruction of `Read` and `Write`.
#[uprobe]
pub fn go_tls_return(ctx: ProbeContext) -> u32 {
    if go_call_returns::<true>(&ctx, false) {
        // A tail call never returns: this is the program's last action.
        h2_continue::walk_on(&ctx, h2_continue::Continuation::Uprobe);
    }
    0
}

/// `go_tls_return` without continuations, for the kernels `tls_exit_bounded` is for.
#[uprobe]
pub fn go_tls_return_bounded(ctx: ProbeContext) -> u32 {
    go_call_returns::<false>(&ctx, false);
    0
}

/// Every RET instruction of the handshake functions.
#[uprobe]
pub fn go_tls_other_return(ctx: ProbeContext) -> u32 {
    go_call_returns::<false>(&ctx, true);
    0
}

#[inline(always)]
fn go_data_call_starts(ctx: &ProbeContext, shape: u8) {
    let (_, tgid) = current_ids();
    go_call_starts(ctx, TlsKey { ssl: reg(ctx, R14), tgid, _pad: 0 }, shape);
}

/// A goroutine enters a call. The entry runs again when the function's prologue grows the stack
/// and restarts it: the same value is written again.
#[inline(always)]
fn go_call_starts(ctx: &ProbeContext, key: TlsKey, shape: u8) {
    let call = GoTlsCall { conn: reg(ctx, RAX), buf: reg(ctx, RBX), len: reg(ctx, RCX), shape, ..GoTlsCall::default() };
    let _ = GO_TLS_CALLS.insert(&key, &call, 0);
}

/// The Go TLS call the current thread's goroutine is inside, when a socket transfer it made ends
/// (`call`: the syscall, whose saved registers hold R14).
#[inline(always)]
pub fn call_in_progress(tgid: u32, call: &Call) -> Option<*mut GoTlsCall> {
    if GO_TLS_PROCESSES.get(0).copied().unwrap_or(0) == 0 {
        return None;
    }
    let g: u64 = btf_field(call.regs, config().regs_go_g_offset);
    GO_TLS_CALLS.get_ptr_mut(&TlsKey { ssl: g, tgid, _pad: 0 })
}

/// A nested transfer of thread `tid` moved ciphertext on `sk` for `call`; the first of a
/// `Write` sends its plaintext. True when that plaintext's walk is left for a continuation
/// (`CONTINUE`: the caller has them).
#[inline(always)]
pub fn go_transfer<const CONTINUE: bool>(
    state: &mut ThreadState,
    tid: u32,
    call: *mut GoTlsCall,
    sk: u64,
    read: bool,
    queued_ns: u64,
    now: u64,
) -> bool {
    // SAFETY: a map value pointer from `call_in_progress`, valid for this program run.
    let call = unsafe { &mut *call };
    call.sk = sk;
    call.arrival.transfer(read, queued_ns, now);
    if call.shape == data_shape::WRITE_BUF && call.sent == 0 && call.len > 0 {
        call.sent = 1;
        state.tls_buf = call.buf;
        state.tls_arrival = TlsArrival::default();
        let session = TlsKey { ssl: call.conn, tgid: state.tgid, _pad: 0 };
        return send_plaintext::<CONTINUE>(state, tid, call.shape, call.len, sk, &session);
    }
    false
}

/// A RET of a hooked function (`handshake`: of a handshake function). True when a `Read`'s
/// plaintext walk is left for a continuation (`CONTINUE`: the caller has them).
#[inline(always)]
fn go_call_returns<const CONTINUE: bool>(ctx: &ProbeContext, handshake: bool) -> bool {
    let (tid, tgid) = current_ids();
    let key = TlsKey { ssl: reg(ctx, R14), tgid, _pad: 0 };
    // SAFETY: a map value read, copied at once.
    let Some(call) = (unsafe { GO_TLS_CALLS.get(&key) }).copied() else {
        // Its entry ran before the uprobes were attached.
        return false;
    };
    if handshake && call.shape != data_shape::NONE {
        // The handshake a `Read` or `Write` ran first: their call goes on.
        return false;
    }
    let _ = GO_TLS_CALLS.remove(&key);
    let session = TlsKey { ssl: call.conn, tgid, _pad: 0 };
    remember_socket(&session, call.sk);
    // Both return (n int, err error): n in RAX.
    let n = reg(ctx, RAX) as i64;
    if call.shape == data_shape::NONE || call.sent != 0 || n <= 0 {
        return false;
    }
    let Some(state) = thread_state(tid) else { return false };
    state.tls_buf = call.buf;
    state.tls_arrival = call.arrival;
    send_plaintext::<CONTINUE>(state, tid, call.shape, n as u64, call.sk, &session)
}
