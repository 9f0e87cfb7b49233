//! The collector's state as Prometheus text: off-CPU time, event loops, pools, histograms,
//! requests, queues and the daemon's own health.

use std::collections::BTreeMap;

use gateway_observer_common::drop_index;

use super::{Collector, HistKind, monotonic_ns};
use crate::reason::reason_label;
use crate::sinks::prometheus::{Exposition, Log2Histogram};

impl Collector {
    /// The Prometheus text for everything collected so far.
    pub fn render_metrics(&self) -> String {
        let mut e = Exposition::default();
        let name = "gateway_observer_thread_offcpu_seconds_total";
        e.family(name, "counter", "Time threads spent off-CPU, by thread group and reason.");
        for ((process, group, reason), ns) in self.offcpu.totals() {
            let labels =
                [("process", process.as_str()), ("thread_group", group.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *ns as f64 / 1e9);
        }
        let name = "gateway_observer_event_loop_utilization";
        e.family(name, "gauge", "Busy and blocked share of an event loop's time over the detection window (0..1).");
        for status in &self.loops {
            let labels = [("process", status.thread.comm.as_str()), ("thread", status.thread.name.as_str())];
            e.sample(name, &labels, status.utilization);
        }
        let name = "gateway_observer_event_loop_blocked_seconds_total";
        e.family(name, "counter", "Time event loops spent off-CPU in work (not idling in poll), by reason.");
        for ((process, thread, reason), ns) in self.loop_blocked.totals() {
            let labels =
                [("process", process.as_str()), ("thread", thread.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *ns as f64 / 1e9);
        }
        let name = "gateway_observer_pool_threads";
        e.family(name, "gauge", "Threads per thread group by what they do now: running, runnable, blocked (in work), idle (waiting for work).");
        for ((process, group, state), count) in &self.thread_states {
            let labels = [("process", process.as_str()), ("thread_group", group.as_str()), ("state", *state)];
            e.sample(name, &labels, *count as f64);
        }
        let name = "gateway_observer_long_blocks_total";
        e.family(name, "counter", "Off-CPU waits longer than the block threshold, by thread group and reason.");
        for ((process, group, reason), count) in &self.long_blocks {
            let labels =
                [("process", process.as_str()), ("thread_group", group.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *count as f64);
        }
        for (kind, name, help) in [
            (
                HistKind::FutexWait,
                "gateway_observer_futex_wait_seconds",
                "Futex waits that blocked: from leaving the CPU to running again.",
            ),
            (
                HistKind::Runqueue,
                "gateway_observer_runqueue_latency_seconds",
                "Time runnable threads waited for a CPU.",
            ),
            (
                HistKind::Iteration,
                "gateway_observer_event_loop_iteration_seconds",
                "On-CPU time of event-loop iterations: from a poll's return to the next poll, less the time off the CPU meanwhile.",
            ),
        ] {
            e.family(name, "histogram", help);
            for (process, hist) in self.histograms_of(kind) {
                e.histogram(name, &[("process", process.as_str())], &hist);
            }
        }
        self.requests.render(&mut e, monotonic_ns());
        self.request_queues.render(&mut e);
        self.jvm.render(&mut e, self.detectors.jvm.config.threshold);
        let name = "gateway_observer_bpf_events_lost_total";
        e.family(name, "counter", "Ring-buffer events the kernel could not reserve room for, by ring (threads: blocks and lifecycle; sockets: connections and data).");
        e.sample(name, &[("ring", "threads")], self.drops[drop_index::RINGBUF as usize] as f64);
        e.sample(name, &[("ring", "sockets")], self.drops[drop_index::SOCKET_RINGBUF as usize] as f64);
        let name = "gateway_observer_bpf_map_full_total";
        e.family(
            name,
            "counter",
            "Threads, processes or connections not followed, or block stacks not kept, because a kernel map was full.",
        );
        e.sample(name, &[("map", "threads")], self.drops[drop_index::THREADS_FULL as usize] as f64);
        e.sample(name, &[("map", "targets")], self.drops[drop_index::TARGETS_FULL as usize] as f64);
        e.sample(name, &[("map", "sockets")], self.drops[drop_index::SOCKS_FULL as usize] as f64);
        e.sample(name, &[("map", "stacks")], self.drops[drop_index::STACKS_FULL as usize] as f64);
        let name = "gateway_observer_quota_refused_total";
        e.family(
            name,
            "counter",
            "Threads and connections of targets not followed because their process held its whole quota (max_threads_per_target, max_connections_per_target), and socket records dropped because their process had written its share of a congested socket ring.",
        );
        let threads_refused = self.drops[drop_index::THREADS_QUOTA as usize] + self.quota_refused_threads;
        e.sample(name, &[("kind", "threads")], threads_refused as f64);
        e.sample(name, &[("kind", "connections")], self.drops[drop_index::SOCKS_QUOTA as usize] as f64);
        e.sample(name, &[("kind", "ring_records")], self.drops[drop_index::RING_SHARE as usize] as f64);
        let name = "gateway_observer_bpf_missed_switches_total";
        e.family(name, "counter", "Switch-ins of target threads the sched_switch program did not see: closed late at the next syscall (closed_late) or lost (lost).");
        e.sample(name, &[("outcome", "closed_late")], self.drops[drop_index::MISSED_SWITCH_IN as usize] as f64);
        e.sample(name, &[("outcome", "lost")], self.drops[drop_index::LOST_SPAN as usize] as f64);
        let name = "gateway_observer_bpf_map_entries";
        e.family(name, "gauge", "Entries in use in the kernel maps (bounded; see bpf_map_full_total).");
        for (map, entries) in &self.map_entries {
            e.sample(name, &[("map", map)], *entries as f64);
        }
        let name = "gateway_observer_symbol_files_refused_total";
        e.family(name, "counter", "Files a target named for its stacks (ELF, perf map) that were not read, by reason.");
        for reason in crate::target_files::REASONS {
            let refused = self.symbolizer.refusals().get(reason).copied().unwrap_or(0)
                + self.live_stacks.refusals().get(reason).copied().unwrap_or(0);
            e.sample(name, &[("reason", reason)], refused as f64);
        }
        let name = "gateway_observer_live_stacks_total";
        e.family(
            name,
            "counter",
            "Alerted threads whose stack was taken from userspace, by outcome: unwound, running (on a CPU then), gone, denied (no ptrace access), error, dropped (the worker's queue was full).",
        );
        for outcome in crate::stacks::OUTCOMES {
            let n = self.live_stacks.outcomes().get(outcome).copied().unwrap_or(0);
            e.sample(name, &[("outcome", outcome)], n as f64);
        }
        let name = "gateway_observer_targets";
        e.family(name, "gauge", "Watched processes (attached) and target specs matching nothing yet (waiting).");
        let attached = self.map_entries.get("targets").copied().unwrap_or(0);
        e.sample(name, &[("state", "attached")], attached as f64);
        e.sample(name, &[("state", "waiting")], self.specs_waiting as f64);
        let name = "gateway_observer_http_connections_refused_total";
        e.family(
            name,
            "counter",
            "Connections to this listener closed at accept because its connection limit was reached.",
        );
        e.sample(name, &[], crate::sinks::http::REFUSED_CONNECTIONS.load(std::sync::atomic::Ordering::Relaxed) as f64);
        let name = "gateway_observer_collections_total";
        e.family(name, "counter", "Completed collection passes (one per interval).");
        e.sample(name, &[], self.collections as f64);
        let name = "gateway_observer_event_decode_errors_total";
        e.family(name, "counter", "Ring-buffer records that could not be decoded.");
        e.sample(name, &[("ring", "threads")], self.decode_errors as f64);
        e.sample(name, &[("ring", "sockets")], self.socket_decode_errors as f64);
        let stats = self.probes.program_stats();
        let name = "gateway_observer_bpf_program_run_seconds_total";
        e.family(name, "counter", "Kernel time spent in each program (needs kernel.bpf_stats_enabled=1).");
        for (program, run_time, _) in &stats {
            e.sample(name, &[("program", program)], run_time.as_secs_f64());
        }
        let name = "gateway_observer_bpf_program_runs_total";
        e.family(name, "counter", "Runs of each program (needs kernel.bpf_stats_enabled=1).");
        for (program, _, runs) in &stats {
            e.sample(name, &[("program", program)], *runs as f64);
        }
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
