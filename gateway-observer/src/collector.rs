//! The collector owns the loaded probes and the state built from them. At each tick it brings
//! TARGETS in line with the target specs, folds the kernel's cumulative maps into monotonic
//! per-label totals, forgets what exited (in the kernel maps too, so nothing leaks), and renders
//! the metrics. It is the only module that holds a `Probes`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use gateway_observer_common::{HistKey, ThreadState, drop_index, hist_kind, reason};

use crate::{
    events::{Block, Record},
    probes::{ProbeError, Probes},
    procfs,
    reason::reason_label,
    sinks::prometheus::{Exposition, Log2Histogram},
    state::{
        counters::DeltaCounters,
        targets::{TargetSpec, host_processes, resolve},
        threads::ThreadNames,
    },
};

/// Long blocks kept for the API and alerts; older ones are dropped first.
const RECENT_BLOCKS: usize = 1024;
/// Re-read thread names every this many ticks.
const NAME_REFRESH_TICKS: u64 = 5;

/// (tid, reason): one cumulative kernel counter.
type OffcpuKey = (u32, u32);
type OffcpuLabel = (String, String, u32);
type HistLabel = (String, u16, u16);

pub struct Collector {
    probes: Probes,
    specs: Vec<TargetSpec>,
    names: ThreadNames,
    offcpu: DeltaCounters<OffcpuKey, OffcpuLabel>,
    hist_count: DeltaCounters<HistKey, HistLabel>,
    hist_sum: DeltaCounters<HistKey, (String, u16)>,
    recent_blocks: VecDeque<Block>,
    decode_errors: u64,
    drops: [u64; drop_index::COUNT as usize],
    map_entries: BTreeMap<&'static str, usize>,
    specs_waiting: usize,
    collections: u64,
}

impl Collector {
    pub fn new(probes: Probes, specs: Vec<TargetSpec>) -> Self {
        Self {
            probes,
            specs,
            names: ThreadNames::new(NAME_REFRESH_TICKS),
            offcpu: DeltaCounters::default(),
            hist_count: DeltaCounters::default(),
            hist_sum: DeltaCounters::default(),
            recent_blocks: VecDeque::new(),
            decode_errors: 0,
            drops: [0; drop_index::COUNT as usize],
            map_entries: BTreeMap::new(),
            specs_waiting: 0,
            collections: 0,
        }
    }

    pub fn probes_mut(&mut self) -> &mut Probes {
        &mut self.probes
    }

    pub fn handle_record(&mut self, record: Record) {
        match record {
            Record::Block(block) => {
                if self.recent_blocks.len() == RECENT_BLOCKS {
                    self.recent_blocks.pop_front();
                }
                self.recent_blocks.push_back(block);
            }
            // Both are in the maps already: exits are folded and forks followed at the next tick.
            Record::ThreadExit { .. } | Record::ProcessFork { .. } => {}
        }
    }

    pub fn count_decode_error(&mut self) {
        self.decode_errors += 1;
    }

    pub fn recent_blocks(&self) -> impl Iterator<Item = &Block> {
        self.recent_blocks.iter()
    }

    /// One collection pass.
    pub fn tick(&mut self) -> Result<(), ProbeError> {
        self.names.next_tick();
        let live_targets = self.sync_targets()?;
        let threads = self.probes.threads()?;
        self.fold_offcpu(&threads)?;
        self.fold_histograms(&live_targets)?;
        self.drops = self.probes.drops()?;
        self.map_entries = BTreeMap::from([
            ("targets", live_targets.len()),
            ("threads", threads.len()),
            ("hist", self.hist_count.tracked_keys()),
        ]);
        self.collections += 1;
        Ok(())
    }

    /// Adds processes the specs now select, and removes targets that exited. Returns the tgids
    /// in TARGETS afterwards.
    fn sync_targets(&mut self) -> Result<HashSet<u32>, ProbeError> {
        let wanted = resolve(&self.specs, &host_processes());
        self.specs_waiting = self
            .specs
            .iter()
            .filter(|spec| !wanted.iter().any(|(pid, root)| pid == root && spec_matches(spec, *pid)))
            .count();
        let current: HashMap<u32, u32> = self.probes.targets()?.into_iter().collect();
        for (&pid, &root) in &wanted {
            if !current.contains_key(&pid) {
                let parent = if pid == root { 0 } else { root };
                self.probes.add_target(pid, parent)?;
            }
        }
        let mut live: HashSet<u32> = wanted.keys().copied().collect();
        for (&tgid, _) in &current {
            if wanted.contains_key(&tgid) {
                continue;
            }
            // Forked by a target (the kernel added it) and still alive: keep following it.
            if procfs::exists(tgid) {
                live.insert(tgid);
            } else {
                self.probes.remove_target(tgid)?;
                self.names.forget_process(tgid);
            }
        }
        Ok(live)
    }

    /// Folds each thread's cumulative off-CPU totals into its (process, group, reason) counters,
    /// then deletes the entries of threads that exited (their last totals are in now).
    fn fold_offcpu(&mut self, threads: &HashMap<u32, ThreadState>) -> Result<(), ProbeError> {
        for (&tid, state) in threads {
            let process = self.names.process(state.tgid).to_owned();
            let group = self.names.thread(tid, state.tgid).group.clone();
            for (code, &ns) in (0..reason::COUNT).zip(state.offcpu_ns.iter()) {
                if ns > 0 {
                    self.offcpu.observe((tid, code), ns, (process.clone(), group.clone(), code));
                }
            }
            // An exit the hook saw, or a thread gone without it (exited before it was followed).
            if state.exited != 0 || !procfs::exists(tid) {
                for code in 0..reason::COUNT {
                    self.offcpu.forget(&(tid, code));
                }
                self.names.forget_thread(tid);
                self.probes.remove_thread(tid)?;
            }
        }
        Ok(())
    }

    fn fold_histograms(&mut self, live_targets: &HashSet<u32>) -> Result<(), ProbeError> {
        let mut gone = Vec::new();
        for (key, value) in self.probes.histograms()? {
            let process = self.names.process(key.tgid).to_owned();
            self.hist_count.observe(key, value.count, (process.clone(), key.kind, key.bucket));
            self.hist_sum.observe(key, value.sum_ns, (process, key.kind));
            if !live_targets.contains(&key.tgid) {
                gone.push(key);
            }
        }
        for key in &gone {
            self.hist_count.forget(key);
            self.hist_sum.forget(key);
        }
        self.probes.remove_histograms(&gone)
    }

    /// The Prometheus text for everything collected so far.
    pub fn render_metrics(&self) -> String {
        let mut e = Exposition::default();
        let name = "gateway_observer_thread_offcpu_seconds_total";
        e.family(name, "counter", "Time threads spent off-CPU, by thread group and reason.");
        for ((process, group, reason), ns) in self.offcpu.totals() {
            let labels = [("process", process.as_str()), ("thread_group", group.as_str()), ("reason", reason_label(*reason))];
            e.sample(name, &labels, *ns as f64 / 1e9);
        }
        for (kind, name, help) in [
            (hist_kind::FUTEX_WAIT, "gateway_observer_futex_wait_seconds", "Duration of futex wait syscalls."),
            (hist_kind::RUNQUEUE, "gateway_observer_runqueue_latency_seconds", "Time runnable threads waited for a CPU."),
        ] {
            e.family(name, "histogram", help);
            for (process, hist) in self.histograms_of(kind) {
                e.histogram(name, &[("process", process.as_str())], &hist);
            }
        }
        let name = "gateway_observer_bpf_events_lost_total";
        e.family(name, "counter", "Ring-buffer events the kernel could not reserve room for.");
        e.sample(name, &[], self.drops[drop_index::RINGBUF as usize] as f64);
        let name = "gateway_observer_bpf_map_full_total";
        e.family(name, "counter", "Kernel updates refused because a map was full.");
        for (map, index) in [
            ("threads", drop_index::THREADS_MAP_FULL),
            ("hist", drop_index::HIST_MAP_FULL),
            ("targets", drop_index::TARGETS_MAP_FULL),
        ] {
            e.sample(name, &[("map", map)], self.drops[index as usize] as f64);
        }
        let name = "gateway_observer_bpf_map_entries";
        e.family(name, "gauge", "Entries in the kernel maps (bounded; see bpf_map_full_total).");
        for (map, entries) in &self.map_entries {
            e.sample(name, &[("map", map)], *entries as f64);
        }
        let name = "gateway_observer_targets";
        e.family(name, "gauge", "Watched processes (attached) and target specs matching nothing yet (waiting).");
        let attached = self.map_entries.get("targets").copied().unwrap_or(0);
        e.sample(name, &[("state", "attached")], attached as f64);
        e.sample(name, &[("state", "waiting")], self.specs_waiting as f64);
        let name = "gateway_observer_collections_total";
        e.family(name, "counter", "Completed collection passes (one per interval).");
        e.sample(name, &[], self.collections as f64);
        let name = "gateway_observer_event_decode_errors_total";
        e.family(name, "counter", "Ring-buffer records that could not be decoded.");
        e.sample(name, &[], self.decode_errors as f64);
        let name = "gateway_observer_bpf_program_run_seconds_total";
        e.family(name, "counter", "Kernel time spent in each program (needs kernel.bpf_stats_enabled=1).");
        let stats = self.probes.program_stats();
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

    fn histograms_of(&self, kind: u16) -> BTreeMap<String, Log2Histogram> {
        let mut out: BTreeMap<String, Log2Histogram> = BTreeMap::new();
        for ((process, k, bucket), count) in self.hist_count.totals() {
            if *k == kind {
                out.entry(process.clone()).or_default().add(usize::from(*bucket), *count);
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

fn spec_matches(spec: &TargetSpec, pid: u32) -> bool {
    match spec {
        TargetSpec::Pid(p) => *p == pid,
        TargetSpec::Comm(comm) => procfs::comm(pid).as_deref() == Some(comm.as_str()),
    }
}
