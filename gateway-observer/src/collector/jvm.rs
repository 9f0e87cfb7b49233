//! The collector's JVM side: at each tick, the HotSpot counters of every target that has an
//! hsperfdata file go to the state the `JvmPause` detector judges, and their totals to the metrics.

use std::collections::HashSet;

use crate::{
    host::hsperfdata::JvmFiles,
    sinks::{families, prometheus::Exposition},
    state::counters::DeltaCounters,
    state::thread_memory::ThreadMemory,
    state::threads::ThreadNames,
};

#[derive(Debug, Default)]
pub struct JvmWatch {
    files: JvmFiles,
    /// pid → process comm: stop-the-world time, safepoints and long pauses since first read.
    stopped_ns: DeltaCounters<u32, String>,
    safepoints: DeltaCounters<u32, String>,
    long_pauses: DeltaCounters<u32, String>,
    pids: HashSet<u32>,
}

impl JvmWatch {
    /// Reads the counters of the JVMs among `targets` (at collection `tick`) into the detector.
    pub fn tick(
        &mut self,
        targets: &HashSet<u32>,
        tick: u64,
        now: std::time::Instant,
        names: &mut ThreadNames,
        memory: &mut ThreadMemory,
    ) {
        for (pid, counters) in self.files.read(targets, tick) {
            memory.jvm.record(pid, names.process(pid), counters, now);
        }
        memory.jvm.retain(targets);
        let mut seen = HashSet::new();
        for (pid, comm, totals) in memory.jvm.totals() {
            seen.insert(pid);
            self.stopped_ns.observe(pid, totals.stopped_ns, comm.to_owned());
            self.safepoints.observe(pid, totals.safepoints, comm.to_owned());
            self.long_pauses.observe(pid, totals.long_pauses, comm.to_owned());
        }
        for gone in self.pids.difference(&seen) {
            self.stopped_ns.forget(gone);
            self.safepoints.forget(gone);
            self.long_pauses.forget(gone);
        }
        self.pids = seen;
    }

    /// Whether `pid` is a HotSpot JVM (it has an hsperfdata file), as of the last tick.
    pub fn is_jvm(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }

    /// Drops the series of processes `live` no longer names.
    pub fn retain_processes(&mut self, live: impl Fn(&str) -> bool) {
        for counters in [&mut self.stopped_ns, &mut self.safepoints, &mut self.long_pauses] {
            counters.retain_labels(|process| live(process));
        }
    }

    pub fn render(&self, e: &mut Exposition) {
        let name = &families::JVM_PAUSE_SECONDS;
        e.family(name);
        for (process, ns) in self.stopped_ns.totals() {
            e.sample(name, &[("process", process.as_str())], *ns as f64 / 1e9);
        }
        let name = &families::JVM_PAUSES;
        e.family(name);
        for (process, count) in self.safepoints.totals() {
            e.sample(name, &[("process", process.as_str())], *count as f64);
        }
        let name = &families::JVM_LONG_PAUSES;
        e.family(name);
        for (process, count) in self.long_pauses.totals() {
            e.sample(name, &[("process", process.as_str())], *count as f64);
        }
        let name = &families::JVM_COUNTER_READ_ERRORS;
        e.family(name);
        e.sample(name, &[], self.files.read_errors as f64);
    }
}
