//! Each followed thread's cumulative kernel counters as last read, so that a tick finds what grew
//! with one lookup per thread. Kept as one entry per (thread, counter, bucket) instead, they were
//! some twenty lookups per thread in tables of tens of thousands of keys, a cache miss each: with
//! 2,000 threads, the largest share of a tick.
//!
//! The rules are `DeltaCounters`'s: an off-CPU total read with its open span is an estimate that
//! never takes its label down; u32 counts wrap; a sum that went down belongs to a new thread.

use std::collections::HashMap;

use gateway_observer_common::{THREAD_HIST_BUCKETS, reason};

const REASONS: usize = reason::COUNT as usize;
/// Per-thread histograms (runqueue delay, futex wait, loop iteration).
pub const HIST_KINDS: usize = 3;

/// One thread's counters as the kernel has them now.
pub struct Reading<'a> {
    /// Off-CPU time by reason, with the span still open (`with_open_span`).
    pub offcpu_ns: &'a [u64; REASONS],
    pub long_blocks: &'a [u32; REASONS],
    pub hists: [&'a [u32; THREAD_HIST_BUCKETS]; HIST_KINDS],
    pub sums: [u64; HIST_KINDS],
}

/// What grew since the last reading of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    OffCpu {
        reason: u32,
        ns: u64,
    },
    LongBlocks {
        reason: u32,
        count: u64,
    },
    HistCount {
        kind: usize,
        bucket: usize,
        count: u64,
    },
    /// `delta` may be 0 the first time a thread is read: its sum's label exists from then on.
    HistSum {
        kind: usize,
        delta: u64,
    },
}

#[derive(Clone)]
struct Last {
    offcpu_ns: [u64; REASONS],
    long_blocks: [u32; REASONS],
    hists: [[u32; THREAD_HIST_BUCKETS]; HIST_KINDS],
    sums: [u64; HIST_KINDS],
}

impl Last {
    const ZERO: Last = Last {
        offcpu_ns: [0; REASONS],
        long_blocks: [0; REASONS],
        hists: [[0; THREAD_HIST_BUCKETS]; HIST_KINDS],
        sums: [0; HIST_KINDS],
    };
}

#[derive(Default)]
pub struct ThreadCounters {
    last: HashMap<u32, Box<Last>, foldhash::fast::RandomState>,
}

impl ThreadCounters {
    /// Reads thread `tid`'s counters and hands each growth since its last reading to `grew`.
    pub fn observe(&mut self, tid: u32, now: &Reading, mut grew: impl FnMut(Growth)) {
        let mut fresh = false;
        let last = self.last.entry(tid).or_insert_with(|| {
            fresh = true;
            Box::new(Last::ZERO)
        });
        for (reason, (last, &ns)) in (0..).zip(last.offcpu_ns.iter_mut().zip(now.offcpu_ns)) {
            // A reading below the last caught the kernel between closing a span and adding it.
            if ns > *last {
                grew(Growth::OffCpu { reason, ns: ns - *last });
                *last = ns;
            }
        }
        for (reason, (last, &count)) in (0..).zip(last.long_blocks.iter_mut().zip(now.long_blocks)) {
            if let Some(delta) = wrapping_growth(last, count) {
                grew(Growth::LongBlocks { reason, count: delta });
            }
        }
        for (kind, (last, now)) in last.hists.iter_mut().zip(now.hists).enumerate() {
            if last == now {
                continue; // most threads' histograms, most ticks: one comparison
            }
            for (bucket, (last, &count)) in last.iter_mut().zip(now).enumerate() {
                if let Some(delta) = wrapping_growth(last, count) {
                    grew(Growth::HistCount { kind, bucket, count: delta });
                }
            }
        }
        for (kind, (last, &sum)) in last.sums.iter_mut().zip(&now.sums).enumerate() {
            if fresh || sum != *last {
                // A sum below the last is a new thread's (the slot was reused): all of it is new.
                let delta = if sum >= *last { sum - *last } else { sum };
                grew(Growth::HistSum { kind, delta });
                *last = sum;
            }
        }
    }

    /// Forgets a thread that is gone; a tid reused later starts from zero.
    pub fn forget(&mut self, tid: u32) {
        self.last.remove(&tid);
        crate::heap::shrink_sparse_map(&mut self.last);
    }

    pub fn threads(&self) -> usize {
        self.last.len()
    }
}

/// The growth of a wrapping u32 counter (read every second, it cannot wrap twice in between). A
/// reading of 0 is skipped, as the kernel's count of a new thread before its first event.
fn wrapping_growth(last: &mut u32, now: u32) -> Option<u64> {
    if now == 0 || now == *last {
        return None;
    }
    let delta = now.wrapping_sub(*last);
    *last = now;
    Some(u64::from(delta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(now: &Last) -> Reading<'_> {
        Reading {
            offcpu_ns: &now.offcpu_ns,
            long_blocks: &now.long_blocks,
            hists: [&now.hists[0], &now.hists[1], &now.hists[2]],
            sums: now.sums,
        }
    }

    fn growths(c: &mut ThreadCounters, tid: u32, now: &Last) -> Vec<Growth> {
        let mut out = Vec::new();
        c.observe(tid, &reading(now), |g| out.push(g));
        out
    }

    #[test]
    fn a_new_thread_counts_all_it_has_and_every_sum_once() {
        let mut c = ThreadCounters::default();
        let mut now = Last::ZERO;
        now.offcpu_ns[2] = 500;
        now.hists[1][7] = 3;
        now.sums[1] = 900;
        let first = growths(&mut c, 1, &now);
        assert_eq!(
            first,
            vec![
                Growth::OffCpu { reason: 2, ns: 500 },
                Growth::HistCount { kind: 1, bucket: 7, count: 3 },
                Growth::HistSum { kind: 0, delta: 0 },
                Growth::HistSum { kind: 1, delta: 900 },
                Growth::HistSum { kind: 2, delta: 0 },
            ]
        );
        assert_eq!(growths(&mut c, 1, &now), vec![], "nothing grew");
    }

    #[test]
    fn an_estimate_that_reads_low_adds_nothing_and_is_not_remembered() {
        let mut c = ThreadCounters::default();
        let mut now = Last::ZERO;
        now.offcpu_ns[0] = 100; // closed 60 + open span 40 so far
        growths(&mut c, 1, &now);
        now.offcpu_ns[0] = 90; // read between the span's close and its add
        assert_eq!(growths(&mut c, 1, &now), vec![]);
        now.offcpu_ns[0] = 130;
        assert_eq!(growths(&mut c, 1, &now), vec![Growth::OffCpu { reason: 0, ns: 30 }]);
    }

    #[test]
    fn wrapping_counts_keep_counting() {
        let mut c = ThreadCounters::default();
        let mut now = Last::ZERO;
        now.long_blocks[4] = u32::MAX - 5;
        now.hists[0][3] = u32::MAX;
        growths(&mut c, 1, &now);
        now.long_blocks[4] = 4;
        now.hists[0][3] = 2;
        assert_eq!(
            growths(&mut c, 1, &now),
            vec![Growth::LongBlocks { reason: 4, count: 10 }, Growth::HistCount { kind: 0, bucket: 3, count: 3 }]
        );
    }

    #[test]
    fn a_sum_that_went_down_is_new_and_a_forgotten_tid_starts_from_zero() {
        let mut c = ThreadCounters::default();
        let mut now = Last::ZERO;
        now.sums[2] = 100;
        growths(&mut c, 1, &now);
        now.sums[2] = 10;
        assert_eq!(growths(&mut c, 1, &now), vec![Growth::HistSum { kind: 2, delta: 10 }]);
        c.forget(1);
        assert_eq!(c.threads(), 0);
        now.offcpu_ns[1] = 7;
        let again = growths(&mut c, 1, &now);
        assert!(again.contains(&Growth::OffCpu { reason: 1, ns: 7 }), "{again:?}");
        assert!(again.contains(&Growth::HistSum { kind: 2, delta: 10 }), "{again:?}");
    }
}
