//! `EventLoopBusy`: an event loop stays on CPU without returning to its poll for longer than a
//! threshold (the kernel measures each iteration from a poll's return to the next poll, less the
//! time it waited for something in between — run-queue time counts as busy — and reports the
//! long ones). Meanwhile every other connection it
//! serves waits, just as when it blocks.

use std::time::Duration;

use super::{event_loop::EventLoopConfig, history::History};
use crate::events::LongIteration;

#[derive(Debug, Clone, PartialEq)]
pub struct BusyLoop {
    pub pid: u32,
    pub comm: String,
    pub thread: String,
    pub tid: u32,
    /// Long iterations in the window.
    pub iterations: u32,
    pub longest_on_cpu_ns: u64,
    pub total_on_cpu_ns: u64,
    pub window: Duration,
}

/// Event loops with long on-CPU iterations in the last window. `now_mono_ns` is the clock of the
/// iteration events (CLOCK_MONOTONIC).
pub fn busy_loops(
    history: &History,
    iterations: &[LongIteration],
    now: std::time::Instant,
    now_mono_ns: u64,
    config: &EventLoopConfig,
) -> Vec<BusyLoop> {
    // Only event loops (a worker doing a blocking poll between two long computations is not one,
    // and `exclude` must hold).
    let loops: std::collections::HashMap<u32, &super::history::ThreadInfo> =
        history.event_loops(now, config).map(|t| (t.tid, t)).collect();
    let start = now_mono_ns.saturating_sub(u64::try_from(config.window.as_nanos()).unwrap_or(u64::MAX));
    let busy_ns = u64::try_from(config.busy_iteration.as_nanos()).unwrap_or(u64::MAX);
    let mut found: Vec<BusyLoop> = Vec::new();
    for it in iterations.iter().filter(|it| it.timestamp_ns >= start && it.on_cpu_ns >= busy_ns) {
        if let Some(entry) = found.iter_mut().find(|b| b.tid == it.tid) {
            entry.iterations += 1;
            entry.longest_on_cpu_ns = entry.longest_on_cpu_ns.max(it.on_cpu_ns);
            entry.total_on_cpu_ns += it.on_cpu_ns;
            continue;
        }
        let Some(info) = loops.get(&it.tid) else { continue };
        found.push(BusyLoop {
            pid: info.tgid,
            comm: info.comm.clone(),
            thread: info.name.clone(),
            tid: it.tid,
            iterations: 1,
            longest_on_cpu_ns: it.on_cpu_ns,
            total_on_cpu_ns: it.on_cpu_ns,
            window: config.window,
        });
    }
    found.sort_by_key(|b| (b.pid, b.tid));
    found
}

impl BusyLoop {
    pub fn summary(&self, config: &EventLoopConfig) -> String {
        format!(
            "event loop on CPU {} ms without returning to poll ({} iterations > {} ms in the last {:.0}s)",
            self.longest_on_cpu_ns / 1_000_000,
            self.iterations,
            config.busy_iteration.as_millis(),
            self.window.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use gateway_observer_common::reason;

    use super::*;
    use crate::detect::history::ThreadInfo;

    fn iteration(tid: u32, on_cpu_ms: u64, at_ns: u64) -> LongIteration {
        LongIteration { tid, tgid: 9, on_cpu_ns: on_cpu_ms * 1_000_000, iteration_ns: on_cpu_ms * 1_000_000, timestamp_ns: at_ns }
    }

    #[test]
    fn long_iterations_in_the_window_name_the_loop() {
        let mut h = History::new(Duration::from_secs(60));
        let info = ThreadInfo { tid: 4, tgid: 9, comm: "node".into(), name: "node".into() };
        let t0 = Instant::now();
        let mut polled = [0; reason::COUNT as usize];
        h.record(t0, info.clone(), polled);
        polled[reason::POLL as usize] = 1_000;
        h.record(t0 + Duration::from_secs(1), info, polled);
        let at = t0 + Duration::from_secs(1);
        let now = 10_000_000_000;
        let its = [iteration(4, 250, now - 1_000_000_000), iteration(4, 120, now - 2_000_000_000), iteration(4, 300, now - 9_000_000_000)];
        let found = busy_loops(&h, &its, at, now, &EventLoopConfig::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].iterations, 2, "the one 9 s ago is outside the 5 s window");
        assert_eq!(found[0].longest_on_cpu_ns, 250_000_000);
        assert!(found[0].summary(&EventLoopConfig::default()).starts_with("event loop on CPU 250 ms"));
        assert!(busy_loops(&h, &[], at, now, &EventLoopConfig::default()).is_empty());
        let excluded = EventLoopConfig { exclude: vec!["node".into()], ..EventLoopConfig::default() };
        assert!(busy_loops(&h, &its, at, now, &excluded).is_empty(), "excluded by name");
    }
}
