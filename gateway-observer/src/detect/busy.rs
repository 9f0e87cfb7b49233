//! `EventLoopBusy`: an event loop stays on CPU without returning to its poll for longer than a
//! threshold (the kernel measures each iteration from a poll's return to the next poll, less the
//! time it waited for something in between — run-queue time counts as busy — and reports the
//! long ones). Meanwhile every other connection it
//! serves waits, just as when it blocks. An iteration still running (a loop spinning forever
//! never reaches its next poll) is measured at each tick from the thread's slot.

use std::time::Duration;

use super::loop_threads::EventLoopConfig;
use crate::{
    api::v1,
    clock::Tick,
    detect::{Config, finding::Finding},
    events::LongIteration,
    state::{history::History, thread_memory::ThreadsNow},
};

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
    /// An iteration is still running: the loop has not come back to poll yet.
    pub ongoing: bool,
    /// On-CPU time of that running iteration so far (0 when none): how long the loop has not
    /// come back, which the alert counts toward its pending time.
    pub ongoing_on_cpu_ns: u64,
    /// A long iteration ended in the last tick, or one is still running.
    pub active: bool,
}

/// Iterations a thread must have completed before an unfinished one is judged: an event loop
/// goes round many times, a worker that polled once (a connect timeout) and computes since is not
/// one.
pub const MIN_ITERATIONS_BEFORE_OPEN: u64 = 8;

/// The iteration a thread is in now, if it began at a poll's return (`iter_start_ns`, 0 when the
/// thread is in a poll or never polled): its length so far less the time off the CPU since
/// (`offcpu_total_ns` now, including an open span, minus `offcpu_base_ns` at its start).
pub fn open_iteration(
    tid: u32,
    tgid: u32,
    iter_start_ns: u64,
    offcpu_base_ns: u64,
    offcpu_total_ns: u64,
    now_ns: u64,
) -> Option<LongIteration> {
    if iter_start_ns == 0 || now_ns <= iter_start_ns {
        return None;
    }
    let iteration_ns = now_ns - iter_start_ns;
    let on_cpu_ns = iteration_ns.saturating_sub(offcpu_total_ns.wrapping_sub(offcpu_base_ns));
    Some(LongIteration { tid, tgid, on_cpu_ns, iteration_ns, timestamp_ns: now_ns, ongoing: true })
}

/// `EventLoopBusy` findings now: event loops with repeated long iterations in the window, or one
/// still running past `busy_stuck`.
pub fn detect(state: &ThreadsNow, config: &Config, tick: Tick) -> Vec<Finding> {
    let found = busy_loops(&state.memory.history, state.iterations, tick.at, tick.mono_ns, &config.event_loop);
    found.iter().map(|found| finding(found, &config.event_loop)).collect()
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The finding of a busy loop, with its evidence.
pub(crate) fn finding(found: &BusyLoop, config: &EventLoopConfig) -> Finding {
    let evidence = v1::EventLoopBusy {
        thread: found.thread.clone(),
        tid: found.tid,
        long_iterations: found.iterations,
        longest_on_cpu_seconds: secs(found.longest_on_cpu_ns),
        ongoing: found.ongoing,
        on_cpu_seconds_in_long_iterations: secs(found.total_on_cpu_ns),
        busy_iteration_threshold_seconds: config.busy_iteration.as_secs_f64(),
        window_seconds: found.window.as_secs_f64(),
        requests: None,
        refusals: None,
    };
    Finding {
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.thread.clone(),
        summary: found.summary(config),
        evidence: v1::Evidence::EventLoopBusy(evidence),
        active: found.active,
        held_for: Duration::from_nanos(found.ongoing_on_cpu_ns),
        stack_id: None,
    }
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
    let loops: std::collections::HashMap<u32, &crate::state::history::ThreadInfo> =
        super::loop_threads::event_loops(history, now, config).map(|t| (t.tid, t)).collect();
    let start = now_mono_ns.saturating_sub(u64::try_from(config.window.as_nanos()).unwrap_or(u64::MAX));
    let tick_ns = history.last_tick().map_or(0, |(_, length)| u64::try_from(length.as_nanos()).unwrap_or(u64::MAX));
    let tick_start = now_mono_ns.saturating_sub(tick_ns);
    let busy_ns = u64::try_from(config.busy_iteration.as_nanos()).unwrap_or(u64::MAX);
    let mut found: Vec<BusyLoop> = Vec::new();
    for it in iterations.iter().filter(|it| it.timestamp_ns >= start && it.on_cpu_ns >= busy_ns) {
        let recent = it.ongoing || it.timestamp_ns >= tick_start;
        if let Some(entry) = found.iter_mut().find(|b| b.tid == it.tid) {
            entry.iterations += 1;
            entry.longest_on_cpu_ns = entry.longest_on_cpu_ns.max(it.on_cpu_ns);
            entry.total_on_cpu_ns += it.on_cpu_ns;
            entry.ongoing |= it.ongoing;
            if it.ongoing {
                entry.ongoing_on_cpu_ns = entry.ongoing_on_cpu_ns.max(it.on_cpu_ns);
            }
            entry.active |= recent;
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
            ongoing: it.ongoing,
            ongoing_on_cpu_ns: if it.ongoing { it.on_cpu_ns } else { 0 },
            active: recent,
        });
    }
    // One long iteration (a garbage collection on the loop's thread) is a metric, not an incident:
    // repeated ones are, and so is one still running past `busy_stuck` (a loop that never returns).
    let stuck_ns = u64::try_from(config.busy_stuck.max(config.busy_iteration).as_nanos()).unwrap_or(u64::MAX);
    found.retain(|b| b.iterations >= config.busy_repeats || (b.ongoing && b.longest_on_cpu_ns >= stuck_ns));
    found.sort_by_key(|b| (b.pid, b.tid));
    found
}

impl BusyLoop {
    pub fn summary(&self, config: &EventLoopConfig) -> String {
        if self.ongoing {
            return format!(
                "event loop on CPU {} ms so far without returning to poll (still running; {} iterations > {} ms in the last {:.0}s)",
                self.longest_on_cpu_ns / 1_000_000,
                self.iterations,
                config.busy_iteration.as_millis(),
                self.window.as_secs_f64()
            );
        }
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
    use crate::state::history::ThreadInfo;

    fn iteration(tid: u32, on_cpu_ms: u64, at_ns: u64) -> LongIteration {
        LongIteration {
            tid,
            tgid: 9,
            on_cpu_ns: on_cpu_ms * 1_000_000,
            iteration_ns: on_cpu_ms * 1_000_000,
            timestamp_ns: at_ns,
            ongoing: false,
        }
    }

    #[test]
    fn an_iteration_still_running_is_measured_less_its_waits() {
        // Began at 1 s with 5 s off-CPU behind it; now 3 s, 0.5 s more off-CPU since: 1.5 s on CPU.
        let it = open_iteration(4, 9, 1_000_000_000, 5_000_000_000, 5_500_000_000, 3_000_000_000).expect("open");
        assert_eq!((it.on_cpu_ns, it.iteration_ns, it.ongoing), (1_500_000_000, 2_000_000_000, true));
        assert_eq!(open_iteration(4, 9, 0, 0, 0, 3_000_000_000), None, "in a poll, or never polled");
    }

    #[test]
    fn long_iterations_in_the_window_name_the_loop() {
        let mut h = History::new(Duration::from_secs(60));
        let info = ThreadInfo::new(4, 9, "node".into(), "node".into());
        let t0 = Instant::now();
        let mut polled = [0; reason::COUNT as usize];
        h.record(t0, info.clone(), polled);
        polled[reason::POLL as usize] = 1_000;
        h.record(t0 + Duration::from_secs(1), info, polled);
        let at = t0 + Duration::from_secs(1);
        let now = 10_000_000_000;
        let its = [
            iteration(4, 250, now - 1_000_000_000),
            iteration(4, 120, now - 2_000_000_000),
            iteration(4, 300, now - 9_000_000_000),
        ];
        let found = busy_loops(&h, &its, at, now, &EventLoopConfig::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].iterations, 2, "the one 9 s ago is outside the 5 s window");
        assert_eq!(found[0].longest_on_cpu_ns, 250_000_000);
        assert!(found[0].summary(&EventLoopConfig::default()).starts_with("event loop on CPU 250 ms"));
        assert!(!found[0].ongoing);
        let spinning = LongIteration { ongoing: true, ..iteration(4, 2_000, now) };
        let found = busy_loops(&h, std::slice::from_ref(&spinning), at, now, &EventLoopConfig::default());
        assert!(found[0].ongoing && found[0].longest_on_cpu_ns == 2_000_000_000, "{found:?}");
        assert!(found[0].active, "still running");
        assert_eq!(found[0].ongoing_on_cpu_ns, 2_000_000_000, "the loop has not come back for 2 s");
        let found = busy_loops(&h, &[its[0].clone(), spinning], at, now, &EventLoopConfig::default());
        assert!(found[0].ongoing && found[0].longest_on_cpu_ns == 2_000_000_000, "{found:?}");
        assert!(found[0].summary(&EventLoopConfig::default()).contains("still running"));
        assert_eq!(found[0].ongoing_on_cpu_ns, 2_000_000_000, "the running iteration, not the longest");
        assert!(busy_loops(&h, &[], at, now, &EventLoopConfig::default()).is_empty());
        // One GC-length iteration is a metric, not an incident; so is one still running briefly.
        assert!(busy_loops(&h, &its[..1], at, now, &EventLoopConfig::default()).is_empty());
        let brief = LongIteration { ongoing: true, ..iteration(4, 300, now) };
        assert!(busy_loops(&h, &[brief], at, now, &EventLoopConfig::default()).is_empty());
        let excluded = EventLoopConfig { exclude: vec!["node".into()], ..EventLoopConfig::default() };
        assert!(busy_loops(&h, &its, at, now, &excluded).is_empty(), "excluded by name");
    }
}
