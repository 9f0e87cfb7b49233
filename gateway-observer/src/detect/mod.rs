//! Detectors: pure functions of recorded state over time windows, one file per alert kind, each
//! with one entry point `detect(state, &Config, Tick) -> Vec<Finding>` (the request detectors
//! take the facts the request tracker gathers). They take no kernel handle, read no clock and
//! keep nothing between ticks: what they remember lives in `state/` (`state::thread_memory`),
//! which the collector updates before it runs them and hands their findings to the alert book.

pub mod busy;
pub mod event_loop;
#[cfg(test)]
pub(crate) mod evidence_golden;
pub mod finding;
pub mod jvm_pause;
pub mod loop_threads;
pub mod pool;
pub mod queueing;
pub mod stalled;
pub mod untimed;
pub mod upstream;

use std::time::{Duration, Instant};

use gateway_observer_common::reason;
use loop_threads::EventLoopConfig;
use pool::PoolConfig;

use crate::state::history::{History, ThreadInfo};

/// Idle reasons of an event loop: waiting for work in epoll/poll, or parked (untimed futex).
const IDLE_REASONS: [u32; 2] = [reason::POLL, reason::FUTEX];

/// Every detector's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub event_loop: EventLoopConfig,
    pub pool: PoolConfig,
    pub upstream: upstream::UpstreamConfig,
    pub queueing: queueing::QueueingConfig,
    pub stalled: stalled::StalledConfig,
    pub jvm: jvm_pause::JvmPauseConfig,
}

impl Config {
    pub fn new(event_loop: EventLoopConfig) -> Self {
        Self {
            event_loop,
            pool: PoolConfig::default(),
            upstream: upstream::UpstreamConfig::default(),
            queueing: queueing::QueueingConfig::default(),
            stalled: stalled::StalledConfig::default(),
            jvm: jvm_pause::JvmPauseConfig::default(),
        }
    }

    /// How long each thread's samples are kept: the longest window a detector asks a delta over,
    /// and two ticks to spare. (A loop's memory of having polled is one instant, not samples: 16k
    /// threads' samples for its 60 s took about 190 MB.)
    pub fn history_kept(&self) -> Duration {
        history_kept(&self.event_loop, &self.pool)
    }
}

fn history_kept(event_loop: &EventLoopConfig, pool: &PoolConfig) -> Duration {
    event_loop.window.max(pool.window).max(pool.confirm) + Duration::from_secs(2)
}

/// One event loop's state over the last window, for metrics and the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopStatus {
    pub thread: ThreadInfo,
    /// Busy + blocked share of the window (1 - idle share): a better load signal than CPU.
    pub utilization: f64,
}

/// Every event loop with its utilization over the window.
pub fn loop_statuses(history: &History, config: &EventLoopConfig, now: Instant) -> Vec<LoopStatus> {
    let mut loops: Vec<LoopStatus> = loop_threads::event_loops(history, now, config)
        .filter_map(|thread| {
            let delta = history.delta(thread.tid, config.window)?;
            let idle: u64 = IDLE_REASONS.iter().map(|r| delta.ns(*r)).sum();
            let utilization = 1.0 - (idle as f64 / delta.elapsed.as_nanos().max(1) as f64).min(1.0);
            Some(LoopStatus { thread: thread.clone(), utilization })
        })
        .collect();
    loops.sort_by_key(|a| (a.thread.tgid, a.thread.tid));
    loops
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
