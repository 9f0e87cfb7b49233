//! The collector's state as Prometheus text: off-CPU time, event loops, pools, histograms,
//! requests, queues and the daemon's own health.

use std::collections::BTreeMap;

use gateway_observer_common::drop_index;

use super::{Collector, HistKind};
use crate::reason::reason_label;
use crate::sinks::{
    families,
    prometheus::{Exposition, Log2Histogram},
};

impl Collector {
    /// The Prometheus text for everything collected so far.
    pub fn render_metrics(&self) -> String {
        let mut e = Exposition::default();
        let name = &families::THREAD_OFFCPU_SECONDS;
        e.family(name);
        for ((process, group, reason), ns) in self.offcpu.totals() {
            let labels =
                [("process", process.as_str()), ("thread_group", group.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *ns as f64 / 1e9);
        }
        let name = &families::EVENT_LOOP_UTILIZATION;
        e.family(name);
        for status in &self.loops {
            let labels = [("process", status.thread.comm.as_str()), ("thread", status.thread.name.as_str())];
            e.sample(name, &labels, status.utilization);
        }
        let name = &families::EVENT_LOOP_BLOCKED_SECONDS;
        e.family(name);
        for ((process, thread, reason), ns) in self.loop_blocked.totals() {
            let labels =
                [("process", process.as_str()), ("thread", thread.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *ns as f64 / 1e9);
        }
        let name = &families::POOL_THREADS;
        e.family(name);
        for ((process, group, state), count) in &self.thread_states {
            let labels = [("process", process.as_str()), ("thread_group", group.as_str()), ("state", *state)];
            e.sample(name, &labels, *count as f64);
        }
        let name = &families::LONG_BLOCKS;
        e.family(name);
        for ((process, group, reason), count) in self.long_blocks.totals() {
            let labels =
                [("process", process.as_str()), ("thread_group", group.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *count as f64);
        }
        for (kind, name) in [
            (HistKind::FutexWait, &families::FUTEX_WAIT_SECONDS),
            (HistKind::Runqueue, &families::RUNQUEUE_LATENCY_SECONDS),
            (HistKind::Iteration, &families::EVENT_LOOP_ITERATION_SECONDS),
        ] {
            e.family(name);
            for (process, hist) in self.histograms_of(kind) {
                e.histogram(name, &[("process", process.as_str())], &hist);
            }
        }
        crate::sinks::request_metrics::render_requests(&self.requests, &mut e, self.tick.mono_ns);
        crate::sinks::request_metrics::render_request_queues(&self.request_queues, &mut e);
        self.jvm.render(&mut e);
        let name = &families::BPF_EVENTS_LOST;
        e.family(name);
        e.sample(name, &[("ring", "threads")], self.drops[drop_index::RINGBUF as usize] as f64);
        e.sample(name, &[("ring", "sockets")], self.drops[drop_index::SOCKET_RINGBUF as usize] as f64);
        let name = &families::BPF_MAP_FULL;
        e.family(name);
        e.sample(name, &[("map", "threads")], self.drops[drop_index::THREADS_FULL as usize] as f64);
        e.sample(name, &[("map", "targets")], self.drops[drop_index::TARGETS_FULL as usize] as f64);
        e.sample(name, &[("map", "sockets")], self.drops[drop_index::SOCKS_FULL as usize] as f64);
        e.sample(name, &[("map", "stacks")], self.drops[drop_index::STACKS_FULL as usize] as f64);
        let name = &families::QUOTA_REFUSED;
        e.family(name);
        let threads_refused = self.drops[drop_index::THREADS_QUOTA as usize] + self.quota_refused_threads;
        e.sample(name, &[("kind", "threads")], threads_refused as f64);
        e.sample(name, &[("kind", "connections")], self.drops[drop_index::SOCKS_QUOTA as usize] as f64);
        e.sample(name, &[("kind", "ring_records")], self.drops[drop_index::RING_SHARE as usize] as f64);
        // Plaintext with no socket: the kernel's, and session-keyed plaintext userspace could not tie.
        let unattributed = self.drops[drop_index::TLS_UNATTRIBUTED as usize] + self.requests.counts.tls_unresolved;
        self.tls.render(&mut e, unattributed);
        let name = &families::BPF_MISSED_SWITCHES;
        e.family(name);
        e.sample(name, &[("outcome", "closed_late")], self.drops[drop_index::MISSED_SWITCH_IN as usize] as f64);
        e.sample(name, &[("outcome", "lost")], self.drops[drop_index::LOST_SPAN as usize] as f64);
        let name = &families::BPF_MAP_ENTRIES;
        e.family(name);
        for (map, entries) in &self.map_entries {
            e.sample(name, &[("map", map)], *entries as f64);
        }
        let name = &families::SYMBOL_FILES_REFUSED;
        e.family(name);
        for reason in crate::host::target_files::REASONS {
            let refused = self.symbolizer.refusals().get(reason).copied().unwrap_or(0)
                + self.live_stacks.refusals().get(reason).copied().unwrap_or(0);
            e.sample(name, &[("reason", reason)], refused as f64);
        }
        let name = &families::LIVE_STACKS;
        e.family(name);
        for outcome in crate::stacks::OUTCOMES {
            let n = self.live_stacks.outcomes().get(outcome).copied().unwrap_or(0);
            e.sample(name, &[("outcome", outcome)], n as f64);
        }
        let name = &families::TARGETS;
        e.family(name);
        let attached = self.map_entries.get("targets").copied().unwrap_or(0);
        e.sample(name, &[("state", "attached")], attached as f64);
        e.sample(name, &[("state", "waiting")], self.specs_waiting as f64);
        let name = &families::HTTP_CONNECTIONS_REFUSED;
        e.family(name);
        e.sample(name, &[], crate::sinks::http::REFUSED_CONNECTIONS.load(std::sync::atomic::Ordering::Relaxed) as f64);
        let name = &families::COLLECTIONS;
        e.family(name);
        e.sample(name, &[], self.collections as f64);
        let name = &families::COLLECTION_DURATION;
        e.family(name);
        e.histogram(name, &[], &self.collection_time);
        let name = &families::EVENT_DECODE_ERRORS;
        e.family(name);
        e.sample(name, &[("ring", "threads")], self.decode_errors as f64);
        e.sample(name, &[("ring", "sockets")], self.socket_decode_errors as f64);
        let name = &families::HTTP2_WALKS_CUT_SHORT;
        e.family(name);
        e.sample(name, &[], self.continued_walks.incomplete as f64);
        let stats = self.probes.program_stats();
        let name = &families::BPF_PROGRAM_RUN_SECONDS;
        e.family(name);
        for (program, run_time, _) in &stats {
            e.sample(name, &[("program", program)], run_time.as_secs_f64());
        }
        let name = &families::BPF_PROGRAM_RUNS;
        e.family(name);
        for (program, _, runs) in &stats {
            e.sample(name, &[("program", program)], *runs as f64);
        }
        render_self_usage(&mut e, &crate::host::self_usage::SelfUsage::read());
        e.finish()
    }

    fn histograms_of(&self, kind: HistKind) -> BTreeMap<String, Log2Histogram> {
        let mut out: BTreeMap<String, Log2Histogram> = BTreeMap::new();
        for ((process, k, bucket), count) in self.hist_count.totals() {
            if *k == kind {
                out.entry(process.clone()).or_default().add(*bucket, *count);
            }
        }
        for ((process, k), sum) in self.hist_sum.totals() {
            if *k == kind {
                out.entry(process.clone()).or_default().sum_ns += sum;
            }
        }
        out
    }
}

/// The daemon's own cost (`process_*`, as every exporter reports it) and its heap.
fn render_self_usage(e: &mut Exposition, usage: &crate::host::self_usage::SelfUsage) {
    for (family, value) in [
        (&families::PROCESS_CPU_SECONDS, usage.cpu_seconds),
        (&families::PROCESS_RESIDENT_MEMORY_BYTES, usage.resident_bytes as f64),
        (&families::PROCESS_VIRTUAL_MEMORY_BYTES, usage.virtual_bytes as f64),
        (&families::PROCESS_OPEN_FDS, usage.open_fds as f64),
        (&families::PROCESS_MAX_FDS, usage.max_fds as f64),
        (&families::PROCESS_START_TIME_SECONDS, usage.start_time_seconds),
    ] {
        e.family(family).sample(family, &[], value);
    }
    if let Some((in_use, free)) = usage.heap {
        let name = &families::HEAP_BYTES;
        e.family(name).sample(name, &[("state", "in_use")], in_use as f64).sample(
            name,
            &[("state", "free")],
            free as f64,
        );
    }
}
