//! HotSpot's pause counters of every JVM target (`crate::host::hsperfdata`), as read at each
//! tick: what each pair of readings says happened between them, kept over the `JvmPause`
//! detector's window, and each JVM's totals since it was first read (for the metrics). The
//! collector records the readings in its state phase; `detect::jvm_pause` judges them.
//!
//! Between two readings the counters give the stop-the-world time and the safepoints begun; the
//! longest pause in between is at least that time over those safepoints, and at least each
//! collection whose last run ended in between (its own entry and exit ticks), never more than
//! the time. A pause is seen once it has ended (the JVM adds its time then).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

pub use crate::host::hsperfdata::{JvmCounters, counters::CollectorCounters};

/// Runs of one collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collections {
    pub collector: String,
    pub count: u64,
    pub ns: u64,
}

/// What the counters say happened between two readings.
#[derive(Debug, Clone)]
pub struct Interval {
    pub start: Instant,
    pub end: Instant,
    pub stopped_ns: u64,
    pub safepoints: u64,
    /// The longest pause the counters prove: it lasted at least this long.
    pub longest_ns: u64,
    pub collections: Vec<Collections>,
}

/// One JVM's readings: the last, and the intervals between readings in the window.
#[derive(Debug)]
pub struct Jvm {
    pub comm: String,
    pub last: JvmCounters,
    pub last_at: Instant,
    pub intervals: VecDeque<Interval>,
    /// Since the observer first read this JVM.
    totals: PauseTotals,
}

/// A JVM's pauses since the observer first read its counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PauseTotals {
    pub stopped_ns: u64,
    pub safepoints: u64,
    /// Readings whose interval held a pause of `threshold` or more.
    pub long_pauses: u64,
}

/// Every JVM target's readings over the window.
#[derive(Debug)]
pub struct JvmPauses {
    /// A pause at least this long counts in the totals' long pauses.
    long_pause: Duration,
    /// Intervals are kept this long.
    window: Duration,
    jvms: HashMap<u32, Jvm>,
}

impl JvmPauses {
    pub fn new(long_pause: Duration, window: Duration) -> Self {
        Self { long_pause, window, jvms: HashMap::new() }
    }

    /// Records a reading of process `pid`'s counters taken at `now`.
    pub fn record(&mut self, pid: u32, comm: &str, counters: JvmCounters, now: Instant) {
        let threshold_ns = u64::try_from(self.long_pause.as_nanos()).unwrap_or(u64::MAX);
        let window = self.window;
        let Some(jvm) = self.jvms.get_mut(&pid) else {
            let jvm = Jvm {
                comm: comm.to_owned(),
                last: counters,
                last_at: now,
                intervals: VecDeque::new(),
                totals: PauseTotals::default(),
            };
            self.jvms.insert(pid, jvm);
            return;
        };
        jvm.comm = comm.to_owned();
        if let Some(interval) = interval(&jvm.last, &counters, jvm.last_at, now) {
            jvm.totals.stopped_ns += interval.stopped_ns;
            jvm.totals.safepoints += interval.safepoints;
            if interval.longest_ns >= threshold_ns {
                jvm.totals.long_pauses += 1;
            }
            jvm.intervals.push_back(interval);
        } else {
            // Counters went back: another JVM under this pid. Its history starts now.
            jvm.intervals.clear();
        }
        jvm.last = counters;
        jvm.last_at = now;
        while jvm.intervals.front().is_some_and(|i| now.duration_since(i.end) > window) {
            jvm.intervals.pop_front();
        }
    }

    /// Forgets processes that are no longer targets or no longer have a file.
    pub fn retain(&mut self, read_now: &HashSet<u32>) {
        self.jvms.retain(|pid, _| read_now.contains(pid));
    }

    /// Every JVM read, by pid.
    pub fn jvms(&self) -> impl Iterator<Item = (u32, &Jvm)> {
        self.jvms.iter().map(|(pid, jvm)| (*pid, jvm))
    }

    /// Every JVM's totals since it was first read, with its comm.
    pub fn totals(&self) -> impl Iterator<Item = (u32, &str, PauseTotals)> {
        self.jvms.iter().map(|(pid, jvm)| (*pid, jvm.comm.as_str(), jvm.totals))
    }
}

/// The pauses between readings `before` and `after`, or None if a counter went back.
fn interval(before: &JvmCounters, after: &JvmCounters, start: Instant, end: Instant) -> Option<Interval> {
    let stopped_ticks = after.safepoint_ticks.checked_sub(before.safepoint_ticks)?;
    let safepoints = after.safepoints.checked_sub(before.safepoints)?;
    if after.frequency != before.frequency {
        return None;
    }
    let mut collections = Vec::new();
    let mut longest_collection_ns = 0;
    for (was, now) in before.collectors.iter().zip(&after.collectors) {
        // Counted as a run begins, timed as it ends: a run that spans a reading shows in both.
        let count = now.invocations.checked_sub(was.invocations)?;
        let ns = after.ns(now.time_ticks.checked_sub(was.time_ticks)?);
        if count > 0 || ns > 0 {
            collections.push(Collections { collector: now.name.clone(), count, ns });
        }
        if now.last_exit_ticks > was.last_exit_ticks && now.last_exit_ticks >= now.last_entry_ticks {
            longest_collection_ns = longest_collection_ns.max(after.ns(now.last_exit_ticks - now.last_entry_ticks));
        }
    }
    let stopped_ns = after.ns(stopped_ticks);
    // A safepoint is counted when it begins and timed when it ends: one that spans a reading is
    // counted in one interval and timed in the next, hence at least one.
    let mean_ns = stopped_ns / safepoints.max(1);
    Some(Interval {
        start,
        end,
        stopped_ns,
        safepoints,
        longest_ns: mean_ns.max(longest_collection_ns).min(stopped_ns),
        collections,
    })
}
