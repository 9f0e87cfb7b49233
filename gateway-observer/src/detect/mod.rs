//! Detectors: pure functions of recorded per-thread state over time windows. They take no kernel
//! handle; the collector feeds them samples and long-block events, and hands what they find to
//! the alert book.

pub mod busy;
pub mod event_loop;
pub mod evidence;
#[cfg(test)]
pub(crate) mod evidence_golden;
pub mod finding;
pub mod findings;
pub mod jvm_pause;
pub mod pool;
pub mod queueing;
pub mod stalled;
pub mod timed_waits;
pub mod untimed;
pub mod upstream;

use std::time::{Duration, Instant};

use crate::state::history::{History, ReasonTotals, ThreadInfo};
use event_loop::{BlockedLoop, EventLoopConfig, blocked_loops};
use gateway_observer_common::reason;
use pool::{PoolConfig, SaturatedPool, saturated_pools};

use crate::events::Block;

/// Idle reasons of an event loop: waiting for work in epoll/poll, or parked (untimed futex).
const IDLE_REASONS: [u32; 2] = [reason::POLL, reason::FUTEX];

/// What the detectors keep between ticks.
#[derive(Debug)]
pub struct Detectors {
    pub event_loop: EventLoopConfig,
    pub pool: PoolConfig,
    pub upstream: upstream::UpstreamConfig,
    pub queueing: queueing::QueueingConfig,
    pub stalled: stalled::StalledConfig,
    pub jvm: jvm_pause::JvmPauses,
    history: History,
    baselines: untimed::LoopBaselines,
    timed_waits: timed_waits::TimedWaits,
    /// Untimed loop blocks up to this timestamp were counted (`new_untimed_blocks`).
    untimed_counted_until_ns: u64,
}

/// One event loop's state over the last window, for metrics and the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopStatus {
    pub thread: ThreadInfo,
    /// Busy + blocked share of the window (1 - idle share): a better load signal than CPU.
    pub utilization: f64,
}

/// How long each thread's samples are kept: the longest window a detector asks a delta over,
/// and two ticks to spare. (A loop's memory of having polled is one instant, not samples: 16k
/// threads' samples for its 60 s took about 190 MB.)
fn history_kept(event_loop: &EventLoopConfig, pool: &PoolConfig) -> Duration {
    event_loop.window.max(pool.window).max(pool.confirm) + Duration::from_secs(2)
}

impl Detectors {
    pub fn new(event_loop: EventLoopConfig) -> Self {
        let pool = PoolConfig::default();
        Self {
            history: History::new(history_kept(&event_loop, &pool)),
            event_loop,
            pool,
            upstream: upstream::UpstreamConfig::default(),
            queueing: queueing::QueueingConfig::default(),
            stalled: stalled::StalledConfig::default(),
            jvm: jvm_pause::JvmPauses::default(),
            baselines: untimed::LoopBaselines::default(),
            timed_waits: timed_waits::TimedWaits::default(),
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
    pub fn note_process(&mut self, tgid: u32, age: impl FnOnce() -> Option<std::time::Duration>, now: Instant) {
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
    pub fn keep_as_loop(&mut self, tid: u32, now: Instant) {
        self.history.keep_as_loop(tid, now, self.event_loop.loop_memory);
    }

    pub fn forget(&mut self, tid: u32) {
        self.history.forget(tid);
        self.baselines.forget(tid);
        self.timed_waits.forget(tid);
        self.history.retain_processes();
        let history = &self.history;
        self.baselines.retain_processes(|tgid| history.knows_process(tgid));
    }

    /// Learns how each loop idles from the tick just recorded, then judges them.
    pub fn blocked_loops(&mut self, blocks: &[Block], now: Instant, now_mono_ns: u64) -> Vec<BlockedLoop> {
        self.baselines.learn(&self.history, blocks, now, &self.event_loop);
        blocked_loops(&self.history, blocks, now, now_mono_ns, &self.event_loop, &self.baselines)
    }

    /// Long untimed waits of event loops judged blocking that ended since the last call, as
    /// (tid, wait ns). Call after `blocked_loops`, which learns what they are judged by.
    pub fn new_untimed_blocks(&mut self, blocks: &[Block], now: Instant) -> Vec<(u32, u64)> {
        let since = self.untimed_counted_until_ns;
        let found = event_loop::untimed_blocks(&self.history, blocks, now, since, &self.event_loop, &self.baselines);
        self.untimed_counted_until_ns = blocks.iter().map(|b| b.timestamp_ns).fold(since, u64::max);
        found
    }

    pub fn busy_loops(
        &self,
        iterations: &[crate::events::LongIteration],
        now: Instant,
        now_mono_ns: u64,
    ) -> Vec<busy::BusyLoop> {
        busy::busy_loops(&self.history, iterations, now, now_mono_ns, &self.event_loop)
    }

    /// `requests`: what the process's requests say about its threads' waits, but the timed
    /// waits' outcomes, which the detectors keep themselves.
    pub fn saturated_pools(
        &self,
        blocks: &[Block],
        now: Instant,
        now_mono_ns: u64,
        requests: &pool::RequestPressure,
    ) -> Vec<SaturatedPool> {
        let signals = pool::SleepSignals { requests, timed_waits: &self.timed_waits };
        saturated_pools(&self.history, blocks, now, now_mono_ns, &self.pool, &self.event_loop, &signals)
    }

    /// JVMs pausing now, each with how the kernel saw its pauses in the window: HotSpot's VM
    /// thread ending untimed waits among `blocks` (`untimed::pause_releases`).
    pub fn jvm_pauses(&self, blocks: &[Block], now: Instant, now_mono_ns: u64) -> Vec<jvm_pause::PausedJvm> {
        let window_ns = u64::try_from(self.jvm.config.window.as_nanos()).unwrap_or(u64::MAX);
        let since = now_mono_ns.saturating_sub(window_ns);
        // Threads stopped at a safepoint wait for its end untimed. A timer that expires while a
        // thread of the process runs is reported as woken by it: timed waits would add noise.
        let untimed = blocks.iter().filter(|b| b.reason == reason::FUTEX);
        let releases =
            untimed::pause_releases(untimed, |tgid, tid| self.history.thread(tgid, tid).map(|t| t.name.as_str()));
        self.jvm.paused(now, |pid| {
            let mine = releases.iter().filter(|r| r.tgid == pid && r.blocks.iter().any(|b| b.timestamp_ns >= since));
            mine.fold(jvm_pause::KernelView::default(), |view, r| jvm_pause::KernelView {
                releases: view.releases + 1,
                most_threads_released: view.most_threads_released.max(r.threads()),
            })
        })
    }

    /// Every event loop with its utilization over the window.
    pub fn loops(&self, now: Instant) -> Vec<LoopStatus> {
        let mut loops: Vec<LoopStatus> = event_loop::event_loops(&self.history, now, &self.event_loop)
            .filter_map(|thread| {
                let delta = self.history.delta(thread.tid, self.event_loop.window)?;
                let idle: u64 = IDLE_REASONS.iter().map(|r| delta.ns(*r)).sum();
                let utilization = 1.0 - (idle as f64 / delta.elapsed.as_nanos().max(1) as f64).min(1.0);
                Some(LoopStatus { thread: thread.clone(), utilization })
            })
            .collect();
        loops.sort_by_key(|a| (a.thread.tgid, a.thread.tid));
        loops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_the_longest_window_and_not_the_loop_memory() {
        let (event_loop, pool) = (EventLoopConfig::default(), PoolConfig::default());
        let kept = history_kept(&event_loop, &pool);
        for window in [event_loop.window, pool.window, pool.confirm] {
            assert!(kept > window, "a {window:?} delta needs a sample before it");
        }
        assert!(kept < event_loop.loop_memory, "samples are not kept for the 60 s loop memory");
        let mut history = History::new(kept);
        let start = Instant::now();
        for second in 0..120 {
            let info = ThreadInfo::new(7, 1, "gw".into(), "gw-worker-1".into());
            history.record(
                start + Duration::from_secs(second),
                info,
                [0; gateway_observer_common::reason::COUNT as usize],
            );
        }
        let delta = history.delta(7, pool.window).expect("a window's delta");
        assert_eq!(delta.elapsed, pool.window);
        assert!(history.delta(7, Duration::from_secs(30)).unwrap().elapsed <= kept, "older samples are gone");
    }
}
