//! `JvmPause`: a JVM stops every Java thread at once (a safepoint: a stop-the-world collection or
//! another VM operation) for `threshold` or more, again and again. Loops and pools stop with it,
//! but nothing of theirs is at fault, so this is its own kind and the others leave it alone
//! (`super::untimed` sees the pause in the kernel: one thread releasing many together).
//!
//! Source: HotSpot's own counters (`crate::host::hsperfdata`), read at each tick by the collector and
//! passed in. Between two readings they give the stop-the-world time and the safepoints begun;
//! the longest pause in between is at least that time over those safepoints, and at least each
//! collection whose last run ended in between (its own entry and exit ticks), never more than the
//! time. A pause is seen once it has ended (the JVM adds its time then).
//!
//! Ongoing: a long pause ended in the last tick. A JVM that keeps pausing (a full GC every few
//! seconds) is found at each pause, and the window (10 s) keeps the finding, inactive, between
//! them, so its alert goes pending at the first pause and fires at the next one a second or more
//! later; it resolves `resolve_after` after the last. One pause alone is a transient that has
//! ended: its alert stays pending and is dropped once the window forgets it (a JVM's cold start,
//! one slow young collection).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use gateway_observer_common::reason;

pub use crate::state::jvm_pauses::{Collections, JvmPauses, PauseTotals};
use crate::{
    api::v1,
    clock::Tick,
    detect::{Config, finding::Finding, untimed},
    state::{jvm_pauses::Interval, thread_memory::ThreadsNow},
};

#[derive(Debug, Clone, PartialEq)]
pub struct JvmPauseConfig {
    /// A pause at least this long is a long pause.
    pub threshold: Duration,
    /// Long pauses are remembered this long.
    pub window: Duration,
}

impl Default for JvmPauseConfig {
    fn default() -> Self {
        Self { threshold: Duration::from_millis(100), window: Duration::from_secs(10) }
    }
}

/// How the kernel saw a process's pauses in the window: HotSpot's VM thread releasing threads
/// from untimed waits (`super::untimed::pause_releases`), as it does at each safepoint's end. A
/// corroboration, not a measure: only waits past the kernel's block threshold are reported, and a
/// wait's length is not the pause's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelView {
    /// Releases by the VM thread (threads woken within 2 ms of each other are one).
    pub releases: usize,
    pub most_threads_released: usize,
}

/// A JVM that paused `threshold` or more in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct PausedJvm {
    pub pid: u32,
    pub comm: String,
    /// The stretch of time the readings in the window cover.
    pub window: Duration,
    pub long_pauses: usize,
    pub longest_ns: u64,
    pub stopped_ns: u64,
    pub safepoints: u64,
    pub collections: Vec<Collections>,
    pub last_cause: Option<String>,
    pub kernel: KernelView,
    /// A long pause ended in the last tick.
    pub active: bool,
}

/// JVMs pausing now, each with how the kernel saw its pauses in the window: HotSpot's VM thread
/// ending untimed waits among the blocks (`untimed::pause_releases`).
pub fn detect(state: &ThreadsNow, config: &Config, tick: Tick) -> Vec<Finding> {
    let history = &state.memory.history;
    let window_ns = u64::try_from(config.jvm.window.as_nanos()).unwrap_or(u64::MAX);
    let since = tick.mono_ns.saturating_sub(window_ns);
    // Threads stopped at a safepoint wait for its end untimed. A timer that expires while a
    // thread of the process runs is reported as woken by it: timed waits would add noise.
    let untimed = state.blocks.iter().filter(|b| b.reason == reason::FUTEX);
    let releases = untimed::pause_releases(untimed, |tgid, tid| history.thread(tgid, tid).map(|t| t.name.as_str()));
    let found = paused(&state.memory.jvm, &config.jvm, tick.at, |pid| {
        let mine = releases.iter().filter(|r| r.tgid == pid && r.blocks.iter().any(|b| b.timestamp_ns >= since));
        mine.fold(KernelView::default(), |view, r| KernelView {
            releases: view.releases + 1,
            most_threads_released: view.most_threads_released.max(r.threads()),
        })
    });
    found.iter().map(|found| finding(found, &config.jvm)).collect()
}

/// JVMs with a long pause in the window; `kernel` gives each process's kernel view.
pub fn paused(
    jvms: &JvmPauses,
    config: &JvmPauseConfig,
    now: Instant,
    kernel: impl Fn(u32) -> KernelView,
) -> Vec<PausedJvm> {
    let threshold_ns = u64::try_from(config.threshold.as_nanos()).unwrap_or(u64::MAX);
    let mut found: Vec<PausedJvm> = jvms
        .jvms()
        .filter_map(|(pid, jvm)| {
            let long: Vec<&Interval> = jvm.intervals.iter().filter(|i| i.longest_ns >= threshold_ns).collect();
            let first = jvm.intervals.front()?;
            let newest = long.last()?;
            let mut collections: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
            for c in jvm.intervals.iter().flat_map(|i| &i.collections) {
                let entry = collections.entry(c.collector.as_str()).or_default();
                entry.0 += c.count;
                entry.1 += c.ns;
            }
            Some(PausedJvm {
                pid,
                comm: jvm.comm.clone(),
                window: jvm.last_at.duration_since(first.start),
                long_pauses: long.len(),
                longest_ns: long.iter().map(|i| i.longest_ns).max().unwrap_or(0),
                stopped_ns: jvm.intervals.iter().map(|i| i.stopped_ns).sum(),
                safepoints: jvm.intervals.iter().map(|i| i.safepoints).sum(),
                collections: collections
                    .into_iter()
                    .map(|(name, (count, ns))| Collections { collector: name.to_owned(), count, ns })
                    .collect(),
                last_cause: jvm.last.last_cause.clone(),
                kernel: kernel(pid),
                active: newest.end == now,
            })
        })
        .collect();
    found.sort_by_key(|f| f.pid);
    found
}

impl PausedJvm {
    /// "JVM stopped 3 times for 100 ms or more in the last 10.0s (longest at least 252 ms, 0.76s
    /// stopped in all; last GC cause: System.gc())".
    pub fn summary(&self, config: &JvmPauseConfig) -> String {
        let cause = self.last_cause.as_deref().map(|c| format!("; last GC cause: {c}")).unwrap_or_default();
        format!(
            "JVM stopped all its threads {} time(s) for {} ms or more in the last {:.1}s (longest at least {} ms, {:.2}s stopped in all{cause})",
            self.long_pauses,
            config.threshold.as_millis(),
            self.window.as_secs_f64(),
            self.longest_ns / 1_000_000,
            self.stopped_ns as f64 / 1e9,
        )
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The finding of a paused JVM, with its evidence.
pub(crate) fn finding(found: &PausedJvm, config: &JvmPauseConfig) -> Finding {
    let collections = found.collections.iter().map(|c| v1::GcCollections {
        collector: c.collector.clone(),
        count: c.count,
        seconds: secs(c.ns),
    });
    let evidence = v1::JvmPause {
        source: "hsperfdata".into(),
        threshold_seconds: config.threshold.as_secs_f64(),
        window_seconds: found.window.as_secs_f64(),
        long_pauses: found.long_pauses,
        longest_pause_seconds: secs(found.longest_ns),
        stopped_seconds: secs(found.stopped_ns),
        stopped_share: found.stopped_ns as f64 / found.window.as_nanos().max(1) as f64,
        safepoints: found.safepoints,
        collections: collections.collect(),
        last_gc_cause: found.last_cause.clone(),
        kernel: v1::PauseReleases {
            vm_thread_releases: found.kernel.releases,
            most_threads_released_together: found.kernel.most_threads_released,
        },
        requests: None,
        refusals: None,
    };
    Finding {
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.comm.clone(),
        summary: found.summary(config),
        evidence: v1::Evidence::JvmPause(evidence),
        active: found.active,
        held_for: std::time::Duration::ZERO,
        stack_id: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::state::jvm_pauses::{CollectorCounters, JvmCounters};

    const MS: u64 = 1_000_000;

    /// A JVM with a nanosecond clock, one young and one full collector.
    #[derive(Clone)]
    struct Fake {
        counters: JvmCounters,
    }

    impl Fake {
        fn new() -> Self {
            let collector = |name: &str| CollectorCounters {
                name: name.into(),
                invocations: 0,
                time_ticks: 0,
                last_entry_ticks: 0,
                last_exit_ticks: 0,
            };
            Self {
                counters: JvmCounters {
                    frequency: 1_000_000_000,
                    safepoints: 10,
                    safepoint_ticks: 50 * MS,
                    collectors: vec![collector("young"), collector("full")],
                    last_cause: None,
                },
            }
        }

        /// A safepoint of `ms`, a full collection of `gc_ms` inside it if not zero, ending at `at_ms`.
        fn pause(&mut self, ms: u64, gc_ms: u64, at_ms: u64) {
            self.counters.safepoints += 1;
            self.counters.safepoint_ticks += ms * MS;
            if gc_ms > 0 {
                let full = &mut self.counters.collectors[1];
                full.invocations += 1;
                full.time_ticks += gc_ms * MS;
                full.last_entry_ticks = (at_ms - gc_ms) * MS;
                full.last_exit_ticks = at_ms * MS;
                self.counters.last_cause = Some("System.gc()".into());
            }
        }
    }

    /// JVM 7, read at second 0, then at the seconds `read` is given.
    struct Run {
        t0: Instant,
        jvm: Fake,
        pauses: JvmPauses,
    }

    impl Run {
        fn new() -> Self {
            let config = JvmPauseConfig::default();
            let pauses = JvmPauses::new(config.threshold, config.window);
            let mut run = Run { t0: Instant::now(), jvm: Fake::new(), pauses };
            run.pauses.record(7, "java", run.jvm.counters.clone(), run.t0);
            run
        }

        fn at(&self, s: u64) -> Instant {
            self.t0 + Duration::from_secs(s)
        }

        /// Reads JVM 7 at second `s`; what is found then.
        fn read(&mut self, s: u64) -> Vec<PausedJvm> {
            self.pauses.record(7, "java", self.jvm.counters.clone(), self.at(s));
            paused(&self.pauses, &JvmPauseConfig::default(), self.at(s), |_| KernelView::default())
        }
    }

    #[test]
    fn a_full_gc_every_two_seconds_is_found_at_each_pause_and_kept_between() {
        let mut run = Run::new();
        let mut active = Vec::new();
        for s in 1..=8u64 {
            // Short safepoints every second; a 260 ms one with a 240 ms full GC every other.
            run.jvm.pause(2, 0, s * 1000 - 500);
            if s % 2 == 0 {
                run.jvm.pause(260, 240, s * 1000 - 100);
            }
            active.push(run.read(s).first().map(|f| f.active));
        }
        assert_eq!(
            active,
            [None, Some(true), Some(false), Some(true), Some(false), Some(true), Some(false), Some(true)]
        );
        let found = &paused(&run.pauses, &JvmPauseConfig::default(), run.at(8), |_| KernelView::default())[0];
        assert_eq!(found.long_pauses, 4);
        // Two safepoints in each pausing second: 262 ms over 2 is 131, the full GC 240: at least 240.
        assert_eq!(found.longest_ns, 240 * MS);
        assert_eq!(found.stopped_ns, (8 * 2 + 4 * 260) * MS);
        assert_eq!(found.safepoints, 12);
        assert_eq!(found.collections, [Collections { collector: "full".into(), count: 4, ns: 960 * MS }]);
        assert_eq!(found.window, Duration::from_secs(8));
        assert_eq!(found.last_cause.as_deref(), Some("System.gc()"));
        let summary = found.summary(&JvmPauseConfig::default());
        assert!(
            summary.starts_with(
                "JVM stopped all its threads 4 time(s) for 100 ms or more in the last 8.0s (longest at least 240 ms, 1.06s"
            ),
            "{summary}"
        );
    }

    #[test]
    fn one_safepoint_in_a_tick_is_measured_whole_and_short_ones_are_nothing() {
        let mut run = Run::new();
        run.jvm.pause(130, 0, 700);
        assert_eq!(run.read(1)[0].longest_ns, 130 * MS, "a VM operation, not a GC: its safepoint's time");
        // Twenty 9 ms safepoints in a second: 180 ms stopped, but no pause of 100 ms.
        let mut run = Run::new();
        for i in 0..20 {
            run.jvm.pause(9, 0, 10 + i * 40);
        }
        assert!(run.read(1).is_empty());
    }

    #[test]
    fn a_pause_counted_in_one_tick_and_timed_in_the_next_is_one_pause() {
        let mut run = Run::new();
        // Read while a 300 ms safepoint is under way, a 280 ms full GC in it: begun (counted),
        // not yet timed.
        run.jvm.counters.safepoints += 1;
        let full = &mut run.jvm.counters.collectors[1];
        full.invocations += 1;
        full.last_entry_ticks = 900 * MS;
        assert!(run.read(1).is_empty());
        run.jvm.counters.safepoint_ticks += 300 * MS;
        let full = &mut run.jvm.counters.collectors[1];
        full.time_ticks += 280 * MS;
        full.last_exit_ticks = 1180 * MS;
        let found = run.read(2);
        assert_eq!((found[0].long_pauses, found[0].longest_ns, found[0].active), (1, 300 * MS, true));
        assert_eq!(found[0].collections, [Collections { collector: "full".into(), count: 1, ns: 280 * MS }]);
    }

    #[test]
    fn an_isolated_pause_is_remembered_inactive_then_forgotten() {
        let mut run = Run::new();
        run.jvm.pause(400, 380, 500);
        assert!(run.read(1)[0].active);
        for s in 2..=11 {
            let found = run.read(s);
            assert!(found.iter().all(|f| !f.active), "second {s}");
            assert_eq!(found.len(), 1, "the window remembers it at second {s}");
        }
        assert!(run.read(12).is_empty());
        assert_eq!(run.pauses.totals().next().map(|(_, _, t)| t.long_pauses), Some(1));
    }

    #[test]
    fn a_new_jvm_under_the_same_pid_starts_afresh_and_gone_ones_are_forgotten() {
        let mut run = Run::new();
        run.jvm.pause(400, 380, 500);
        assert_eq!(run.read(1).len(), 1);
        run.jvm = Fake::new();
        assert!(run.read(2).is_empty());
        run.pauses.retain(&HashSet::new());
        assert_eq!(run.pauses.totals().count(), 0);
    }
}
