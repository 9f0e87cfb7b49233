//! The clock kernel events are stamped with, read from userspace, and the one time a tick runs at.

use std::time::Instant;

/// CLOCK_MONOTONIC, the clock of kernel event timestamps (bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// When a tick runs, read once: every phase and detector of the tick, and the findings, snapshot
/// and metrics made from it, see the same now (ages computed at different reads of the clock
/// disagree by however long the phases between took).
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub at: Instant,
    /// CLOCK_MONOTONIC at the same moment, to compare with kernel timestamps.
    pub mono_ns: u64,
}

impl Tick {
    pub fn now() -> Self {
        Self { at: Instant::now(), mono_ns: monotonic_ns() }
    }
}
