//! Giving freed heap back to the system. glibc's allocator keeps what the daemon frees inside
//! its arenas for reuse, so memory once needed (the kernel's BTF parsed at start, the state of
//! 10,000 connections that have since closed) would stay resident for the daemon's whole life.

use std::time::{Duration, Instant};

/// How often freed heap is given back: `malloc_trim` walks the arenas (a few hundred µs on the
/// daemon's heap), and what it frees builds up over seconds, not ticks.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Returns the allocator's free pages to the system (resident memory falls; nothing in use moves).
pub fn give_back_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases memory that is free; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Gives freed heap back at most once per `TRIM_EVERY`.
#[derive(Debug)]
pub struct Trimmer {
    last: Instant,
}

impl Trimmer {
    pub fn new(now: Instant) -> Self {
        Self { last: now }
    }

    /// Trims if `TRIM_EVERY` has passed since the last trim; returns whether it did.
    pub fn maybe_trim(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last) < TRIM_EVERY {
            return false;
        }
        self.last = now;
        give_back_freed();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_per_period() {
        let t0 = Instant::now();
        let mut trimmer = Trimmer::new(t0);
        assert!(!trimmer.maybe_trim(t0 + Duration::from_secs(9)));
        assert!(trimmer.maybe_trim(t0 + TRIM_EVERY));
        assert!(!trimmer.maybe_trim(t0 + TRIM_EVERY + Duration::from_secs(1)));
        assert!(trimmer.maybe_trim(t0 + TRIM_EVERY * 2));
    }

    #[cfg(target_env = "gnu")]
    #[test]
    fn freed_heap_leaves_resident_memory() {
        // Many small blocks (below the mmap threshold, so they live in the arena), then all but
        // the last freed: without a trim glibc keeps their pages, since the last block pins the
        // top of the heap.
        let rss = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            status
                .lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let mut blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 2048]).collect();
        let pinned = blocks.pop();
        let held = rss();
        drop(blocks);
        give_back_freed();
        let after = rss();
        drop(pinned);
        // 40 MB were freed: at least 20 MB of it must leave (test threads share the process, so
        // its RSS moves by a few MB on its own).
        assert!(held.saturating_sub(after) >= 20_000, "RssAnon {held} kB -> {after} kB after the trim");
    }
}
