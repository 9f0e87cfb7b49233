//! HTTP/2 connections first seen mid-way. The kernel never saw their preface, so it does not
//! walk their frame headers past each transfer's head; userspace tells HTTP/2 from their frames
//! and names them in `H2_MARKS`, and the connection's next transfer takes the mark. Every other
//! transfer pays one array read: `H2_MARKS_PENDING` is 0 while userspace has no mark out.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap},
};
use gateway_observer_common::{H2_NEXT_UNKNOWN, MAX_H2_MARKS, SockState};

/// Socket (`struct sock` address) → 1, written by userspace, removed by the transfer that takes it.
#[map]
pub static H2_MARKS: HashMap<u64, u8> = HashMap::with_max_entries(MAX_H2_MARKS, 0);

/// `[0]`: nonzero while marks userspace wrote may still wait in `H2_MARKS`.
#[map]
pub static H2_MARKS_PENDING: Array<u32> = Array::with_max_entries(1, 0);

/// A transfer on `sock` (`key`), not known to speak HTTP/2: takes userspace's mark if there is
/// one, so that this transfer and the next are walked. Where the next frame header is, is not
/// known: the walk starts at the transfer's first byte and userspace keeps only what its own
/// walk agrees with.
#[inline(always)]
pub fn take_h2_mark(key: u64, sock: &mut SockState) {
    if H2_MARKS_PENDING.get(0).is_none_or(|pending| *pending == 0) {
        return;
    }
    // SAFETY: a map value read, valid for this program run.
    if unsafe { H2_MARKS.get(&key) }.is_none() {
        return;
    }
    let _ = H2_MARKS.remove(&key);
    sock.h2 = 1;
    sock.h2_next = [H2_NEXT_UNKNOWN; 2];
}
