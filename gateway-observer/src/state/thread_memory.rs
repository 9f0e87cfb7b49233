//! What the thread detectors (`detect::{event_loop, busy, pool, jvm_pause}`) judge, kept between
//! ticks: each thread's history of off-CPU totals, what was learned about each event loop's
//! idling, how each thread's timed waits ended lately, and the JVMs' pause counters. The collector
//! updates it in its state phase; at each tick the detectors read it, with the tick's long blocks,
//! long iterations and request pressure, through [`ThreadsNow`], and change nothing.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{
    events::{Block, LongIteration},
    state::{
        history::{History, ReasonTotals, ThreadInfo},
        jvm_pauses::JvmPauses,
        loop_baselines::LoopBaselines,
        timed_waits::TimedWaits,
    },
};

/// What the thread detectors keep between ticks.
#[derive(Debug)]
pub struct ThreadMemory {
    pub history: History,
    pub baselines: LoopBaselines,
    pub timed_waits: TimedWaits,
    pub jvm: JvmPauses,
    /// Untimed loop blocks up to this timestamp were counted into the loops' blocked time.
    pub untimed_counted_until_ns: u64,
}

impl ThreadMemory {
    /// Samples are kept `history_kept`; JVM pause intervals as `jvm` says.
    pub fn new(history_kept: Duration, jvm: JvmPauses) -> Self {
        Self {
            history: History::new(history_kept),
            baselines: LoopBaselines::default(),
            timed_waits: TimedWaits::default(),
            jvm,
            untimed_counted_until_ns: 0,
        }
    }

    pub fn record(&mut self, now: Instant, info: ThreadInfo, totals: ReasonTotals) {
        self.history.record(now, info, totals);
    }

    /// A thread's total time (ns) in timed futex waits that timed out and that were woken.
    pub fn note_timed_waits(&mut self, tid: u32, timeouts: u64, wakes: u64, now: Instant) {
        self.timed_waits.note(tid, timeouts, wakes, now);
    }

    /// Notes when a process started (see `History::note_process_start`), the first time it is
    /// seen: `age` (how long ago it started, read from /proc) is asked only then.
    pub fn note_process(&mut self, tgid: u32, age: impl FnOnce() -> Option<Duration>, now: Instant) {
        if self.history.knows_process(tgid) {
            return;
        }
        if let Some(started) = age().and_then(|age| now.checked_sub(age)) {
            self.history.note_process_start(tgid, started, now);
        }
    }

    /// Followed threads of process `tgid` in thread group `group`.
    pub fn group_threads(&self, tgid: u32, group: &str) -> Vec<u32> {
        self.history.threads().filter(|t| t.tgid == tgid && t.group == group).map(|t| t.tid).collect()
    }

    /// See `History::keep_as_loop`.
    pub fn keep_as_loop(&mut self, tid: u32, now: Instant, loop_memory: Duration) {
        self.history.keep_as_loop(tid, now, loop_memory);
    }

    pub fn forget(&mut self, tid: u32) {
        self.history.forget(tid);
        self.baselines.forget(tid);
        self.timed_waits.forget(tid);
        self.history.retain_processes();
        let history = &self.history;
        self.baselines.retain_processes(|tgid| history.knows_process(tgid));
    }
}

/// What the process's requests say about its threads' waits, as the collector gathers them
/// each tick for `PoolSaturated`.
#[derive(Debug, Default, Clone)]
pub struct RequestPressure {
    /// Per process, inbound requests in flight for `sleep_pressure_age` or more.
    pub waiting: HashMap<u32, usize>,
    /// The same per thread that read them.
    pub held: HashMap<u32, usize>,
    /// Per process, requests that waited unread in its sockets lately.
    pub queued: HashMap<u32, usize>,
    /// `waiting` and `held` counting only requests in flight for all of `confirm`: a share
    /// reached with these dates the saturation back over the whole stretch.
    pub waiting_all_along: HashMap<u32, usize>,
    pub held_all_along: HashMap<u32, usize>,
}

/// What the thread detectors judge at one tick.
#[derive(Debug, Clone, Copy)]
pub struct ThreadsNow<'a> {
    pub memory: &'a ThreadMemory,
    /// Long blocks (past the kernel's block threshold), oldest first.
    pub blocks: &'a [Block],
    /// Long event-loop iterations, those that ended and those still running.
    pub iterations: &'a [LongIteration],
    pub requests: &'a RequestPressure,
}
