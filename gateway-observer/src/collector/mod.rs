//! The collector owns the loaded probes and the state built from them. At each tick it brings
//! TARGETS in line with the target specs, folds every thread slot's cumulative totals into
//! monotonic per-label counters, frees the slots of threads that exited (so nothing leaks), and
//! renders the metrics (`metrics`). It is the only module that holds a `Probes`.

mod continued_walks;
mod findings;
mod h2_marks;
mod java_stacks;
mod jvm;
mod metrics;
mod quotas;
mod retention;
mod slots;
mod snapshot;
mod socket_records;
mod threads;
mod tls;

use crate::clock::Tick;
use slots::{BLOCKED, exit_name, thread_state_label, with_open_span};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    time::Instant,
};

use gateway_observer_common::{ThreadState, drop_index, reason};

use crate::{
    detect::{
        LoopStatus,
        busy::{MIN_ITERATIONS_BEFORE_OPEN, open_iteration},
        event_loop::BLOCKING_REASONS,
        finding::Finding,
        loop_threads::EventLoopConfig,
    },
    events::{Block, LongIteration, Record},
    host::procfs,
    probes::{ProbeError, Probes},
    state::{
        counters::{DeltaCounters, LabelTotals},
        histogram::Log2Histogram,
        history::ThreadInfo,
        jvm_pauses::JvmPauses,
        request_queues::RequestQueues,
        requests::RequestTracker,
        targets::{PortListeners, TargetSpec, resolve, waiting_specs},
        thread_counters::{Growth, Reading, ThreadCounters},
        thread_memory::{RequestPressure, ThreadMemory, ThreadsNow},
        threads::ThreadNames,
    },
};

/// Long blocks kept for the detectors; older ones are dropped first. Sized for several seconds
/// of a large pool's blocks (poll waits, the commonest, are not kept: no detector uses them).
const RECENT_BLOCKS: usize = 16384;
/// Frames of a blocking call's stack shown in evidence, innermost first: the kernel's, and the
/// deeper one unwound from userspace.
const STACK_FRAMES: usize = 12;
const LIVE_STACK_FRAMES: usize = 32;
/// Re-read thread names every this many ticks (young threads: every tick).
const NAME_REFRESH_TICKS: u64 = 30;
/// How often threads are checked for having gone without the exit hook seeing them.
const GONE_CHECK_TICKS: u64 = 10;
/// Count the kernel's followed connections every this many ticks.
const SOCKET_COUNT_TICKS: u64 = 10;

/// Which per-thread histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum HistKind {
    Runqueue,
    FutexWait,
    /// Event-loop iterations' on-CPU time.
    Iteration,
}

/// The histograms in the order of `thread_counters::Reading::hists`.
const HIST_KINDS: [HistKind; crate::state::thread_counters::HIST_KINDS] =
    [HistKind::Runqueue, HistKind::FutexWait, HistKind::Iteration];

pub struct Collector {
    probes: Probes,
    specs: Vec<TargetSpec>,
    names: ThreadNames,
    /// Each thread's kernel counters as last read, whose growth goes into the totals below.
    thread_counters: ThreadCounters,
    /// Off-CPU time by (process, thread group, reason).
    offcpu: LabelTotals<(String, String, u32)>,
    /// Per-thread histograms by (process, kind, bucket).
    hist_count: LabelTotals<(String, HistKind, usize)>,
    /// Their sums by (process, kind).
    hist_sum: LabelTotals<(String, HistKind)>,
    recent_blocks: VecDeque<Block>,
    symbolizer: crate::symbolize::Symbolizer,
    /// Stacks of alerted threads blocked now, unwound off the tick thread (issue 17).
    live_stacks: crate::stacks::LiveStacks,
    /// Threads per (process, thread group, state) at the last tick.
    thread_states: BTreeMap<(String, String, &'static str), usize>,
    /// Threads off the CPU in work (not waiting for it) at the last tick.
    blocked_in_work: HashSet<u32>,
    /// Long event-loop iterations, newest last (bounded like the blocks).
    recent_iterations: VecDeque<LongIteration>,
    /// Event loops found busy at the last tick.
    busy_loops: Vec<Finding>,
    /// Iterations still running past the busy threshold, as of this tick.
    open_iterations: Vec<LongIteration>,
    /// The THREADS slots copied at the start of a tick, its room kept for the next.
    slot_copies: Vec<(u32, ThreadState)>,
    /// Off-CPU waits past the block threshold, counted per thread by the kernel, by (process,
    /// thread group, reason).
    long_blocks: LabelTotals<(String, String, u32)>,
    /// What the kernel was told to send one by one (`BLOCK_DETAIL`: tid → `block_detail::*`).
    block_detail: HashMap<u32, u8>,
    block_detail_full_warned: bool,
    decode_errors: u64,
    drops: [u64; drop_index::COUNT as usize],
    map_entries: BTreeMap<&'static str, usize>,
    specs_waiting: usize,
    collections: u64,
    /// How long each collection pass took: one that outlasts the interval delays the next.
    collection_time: Log2Histogram,
    /// The time of the last tick (see [`Tick`]).
    tick: Tick,
    /// Every detector's configuration, and what they judge that is kept between ticks.
    detect: crate::detect::Config,
    memory: ThreadMemory,
    /// Event loops and their utilization, as of the last tick.
    loops: Vec<LoopStatus>,
    /// Event loops found blocked at the last tick.
    blocked_loops: Vec<Finding>,
    /// Thread pools found saturated at the last tick.
    saturated_pools: Vec<Finding>,
    /// JVM targets' HotSpot counters, and the JVMs found pausing at the last tick.
    jvm: jvm::JvmWatch,
    paused_jvms: Vec<Finding>,
    /// Thread dumps of JVM targets for the Java frames of their alerts.
    java_stacks: java_stacks::JavaStacks,
    /// (tid, reason) → (process, thread, reason): blocked time of event loops.
    loop_blocked: DeltaCounters<(u32, u32), (String, String, u32)>,
    /// Per loop thread, its untimed waits judged blocking so far (ns).
    untimed_loop_ns: HashMap<u32, u64>,
    /// HTTP requests from the socket ring buffer.
    requests: RequestTracker,
    /// Ports in the kernel's LISTEN_PORTS, and the targets they were read for.
    listen_ports: BTreeSet<u64>,
    listen_ports_of: HashSet<u32>,
    socket_decode_errors: u64,
    /// Socket records the kernel had lost at the last drain.
    socket_losses_seen: u64,
    /// HTTP/2 connections first seen mid-way, named to the kernel for it to walk their frames.
    h2_marks: h2_marks::H2Marks,
    /// Walked records waiting for the rest of their HTTP/2 walk.
    continued_walks: continued_walks::ContinuedWalks,
    /// Per target: CPU seconds used and when, at the last tick; and the cores used since.
    cpu_seen: HashMap<u32, (Instant, f64)>,
    cpu_cores: HashMap<u32, f64>,
    /// Requests waiting in targets' sockets, as of the last tick.
    request_queues: RequestQueues,
    /// Processes listening on the ports of `port=` specs (refreshed every few seconds).
    port_listeners: PortListeners,
    host_scan: crate::state::host_scan::HostScan,
    /// What lived lately (series of what is gone are dropped) and the stacks blocks named.
    retention: retention::Retention,
    /// Each target's parent (0: a spec selected it), and its entry as last written: its budgets.
    target_parents: HashMap<u32, u32>,
    budgets: HashMap<u32, gateway_observer_common::TargetInfo>,
    /// Records each target may write into the congested socket ring per drain, as last set.
    ring_share: Option<u64>,
    /// Threads of targets found running when added that their quota left unfollowed.
    quota_refused_threads: u64,
    /// Targets' TLS libraries, hooked per process.
    /// Targets' TLS libraries, hooked once `tls_plaintext` enabled it.
    tls: tls::TlsWatch,
}

impl Collector {
    pub fn new(probes: Probes, specs: Vec<TargetSpec>, event_loop: EventLoopConfig) -> Self {
        let detect = crate::detect::Config::new(event_loop);
        let memory = ThreadMemory::new(detect.history_kept(), JvmPauses::new(detect.jvm.threshold, detect.jvm.window));
        Self {
            probes,
            specs,
            names: ThreadNames::new(NAME_REFRESH_TICKS),
            thread_counters: ThreadCounters::default(),
            offcpu: LabelTotals::default(),
            hist_count: LabelTotals::default(),
            hist_sum: LabelTotals::default(),
            recent_blocks: VecDeque::new(),
            recent_iterations: VecDeque::new(),
            thread_states: BTreeMap::new(),
            blocked_in_work: HashSet::new(),
            symbolizer: crate::symbolize::Symbolizer::default(),
            live_stacks: crate::stacks::LiveStacks::new(),
            busy_loops: Vec::new(),
            open_iterations: Vec::new(),
            slot_copies: Vec::new(),
            long_blocks: LabelTotals::default(),
            block_detail: HashMap::new(),
            block_detail_full_warned: false,
            decode_errors: 0,
            drops: [0; drop_index::COUNT as usize],
            map_entries: BTreeMap::new(),
            specs_waiting: 0,
            collections: 0,
            collection_time: Log2Histogram::default(),
            tick: Tick::now(),
            detect,
            memory,
            loops: Vec::new(),
            blocked_loops: Vec::new(),
            saturated_pools: Vec::new(),
            jvm: jvm::JvmWatch::default(),
            paused_jvms: Vec::new(),
            java_stacks: java_stacks::JavaStacks::default(),
            loop_blocked: DeltaCounters::default(),
            untimed_loop_ns: HashMap::new(),
            requests: RequestTracker::default(),
            listen_ports: BTreeSet::new(),
            listen_ports_of: HashSet::new(),
            socket_decode_errors: 0,
            socket_losses_seen: 0,
            h2_marks: h2_marks::H2Marks::default(),
            continued_walks: continued_walks::ContinuedWalks::default(),
            cpu_seen: HashMap::new(),
            cpu_cores: HashMap::new(),
            request_queues: RequestQueues::default(),
            port_listeners: PortListeners::default(),
            host_scan: Default::default(),
            retention: retention::Retention::default(),
            target_parents: HashMap::new(),
            budgets: HashMap::new(),
            ring_share: None,
            quota_refused_threads: 0,
            tls: tls::TlsWatch::default(),
        }
    }

    /// Requests whose bytes wait unread this long are queued (RequestQueueing).
    pub fn set_request_queueing_threshold(&mut self, threshold: std::time::Duration) {
        self.detect.queueing.threshold = threshold;
    }

    /// Whether alerts on JVMs may take thread dumps for their Java frames (`[jvm] thread_dumps`).
    pub fn set_thread_dumps(&mut self, enabled: bool) {
        self.java_stacks.set_enabled(enabled);
    }

    /// When in-flight requests count as stalled (RequestsStalled).
    pub fn set_requests_stalled(&mut self, config: crate::detect::stalled::StalledConfig) {
        self.detect.stalled = config;
    }

    pub fn handle_record(&mut self, record: Record) {
        match record {
            Record::Block(block) => {
                if self.recent_blocks.len() == RECENT_BLOCKS {
                    self.recent_blocks.pop_front();
                }
                self.recent_blocks.push_back(block);
            }
            Record::BlockStack { tid, stack_id, .. } => {
                self.retention.note_stack(stack_id, Instant::now());
                if let Some(block) = self.recent_blocks.iter_mut().rev().find(|b| b.tid == tid) {
                    block.stack_id = Some(stack_id);
                }
            }
            Record::LongIteration(iteration) => {
                if self.recent_iterations.len() == RECENT_BLOCKS {
                    self.recent_iterations.pop_front();
                }
                self.recent_iterations.push_back(iteration);
            }
            // Both are in the maps already: exits are folded and forks followed at the next tick.
            Record::ThreadExit { .. } | Record::ProcessFork { .. } => {}
        }
    }

    /// Hooks targets' TLS libraries from the next tick on, with uprobes from `opener` (never
    /// called: none is hooked).
    pub fn enable_tls_plaintext(&mut self, opener: crate::uprobe_opener::UprobeOpener) {
        self.tls.enable(opener);
    }

    pub fn count_decode_error(&mut self) {
        self.decode_errors += 1;
    }

    /// One collection pass, timed.
    pub fn tick(&mut self) -> Result<(), ProbeError> {
        let started = Instant::now();
        let collected = self.collect();
        self.collection_time.observe(started.elapsed().as_nanos() as u64);
        collected
    }

    fn collect(&mut self) -> Result<(), ProbeError> {
        self.names.next_tick();
        let live_targets = self.sync_targets()?;
        self.tls.sync(&mut self.probes, &live_targets, self.collections);
        self.sync_listen_ports(&live_targets)?;
        let mut threads = std::mem::take(&mut self.slot_copies);
        self.probes.threads_into(&mut threads);
        self.drop_orphan_slots(&mut threads)?;
        let followed = threads.len();
        let threads_held =
            crate::probes::quotas::held_per_process(threads.iter().filter(|(_, s)| s.exited == 0).map(|(_, s)| s.tgid));
        self.tick = Tick::now();
        let Tick { at: now, mono_ns: now_mono } = self.tick;
        let mut owners = live_targets.clone();
        let mut latest = HashMap::new();
        self.thread_states.clear();
        self.blocked_in_work.clear();
        self.open_iterations.clear();
        for (slot, state) in &threads {
            owners.insert(state.tgid);
            latest.insert(state.tid, state.offcpu_ns);
            self.fold_thread(*slot, state, now, now_mono)?;
        }
        self.slot_copies = threads;
        self.names.retain_processes(&owners);
        self.requests.retain_processes(&owners);
        self.measure_cpu(&live_targets, now);
        self.jvm.tick(&live_targets, self.collections, now, &mut self.names, &mut self.memory);
        self.requests.expire(now_mono);
        self.requests.settle_h2(now_mono);
        self.h2_marks.expire(&mut self.probes, now);
        let window = u64::try_from(self.detect.event_loop.window.as_nanos()).unwrap_or(u64::MAX);
        let threshold = u64::try_from(self.detect.queueing.threshold.as_nanos()).unwrap_or(u64::MAX);
        self.request_queues.gather(&mut self.requests, &self.probes, now_mono, window, threshold)?;
        self.renew_budgets(&threads_held)?;
        self.run_detectors(now, &latest);
        self.sync_block_detail()?;
        self.forget_gone(now, now_mono)?;
        self.drops = self.probes.drops()?;
        // Counting SOCKS takes a syscall per entry: not every tick.
        let sockets = if self.collections.is_multiple_of(SOCKET_COUNT_TICKS) {
            self.probes.socket_count()?
        } else {
            self.map_entries.get("sockets").copied().unwrap_or(0)
        };
        self.map_entries =
            BTreeMap::from([("targets", live_targets.len()), ("threads", followed), ("sockets", sockets)]);
        self.collections += 1;
        Ok(())
    }

    /// Adds processes the specs now select, and removes targets that exited. Returns the tgids
    /// in TARGETS afterwards.
    fn sync_targets(&mut self) -> Result<HashSet<u32>, ProbeError> {
        self.port_listeners.refresh(&self.specs, Instant::now());
        let processes = self.host_scan.processes(&self.specs, &self.port_listeners);
        let wanted = resolve(&self.specs, &processes);
        self.specs_waiting = waiting_specs(&self.specs, &processes);
        let current: HashMap<u32, u32> = self.probes.targets()?.into_iter().collect();
        self.target_parents.clone_from(&current);
        // Dead targets go first, so that a full TARGETS map frees room before anything is added.
        let mut live: HashSet<u32> = HashSet::new();
        for &tgid in current.keys() {
            if wanted.contains_key(&tgid) || procfs::exists(tgid) {
                // Wanted, or forked by a target (the kernel added it) and still alive.
                live.insert(tgid);
            } else {
                // Its name stays until its threads' last totals are folded (end of tick).
                self.probes.remove_target(tgid)?;
            }
        }
        for (&pid, &root) in &wanted {
            if current.contains_key(&pid) {
                continue;
            }
            let parent = if pid == root { 0 } else { root };
            // One process that cannot be added (a full map, gone meanwhile) must not stop the
            // collection of every other: it is retried at the next tick.
            match self.probes.add_target(pid, parent) {
                Ok(refused) => {
                    live.insert(pid);
                    self.target_parents.insert(pid, parent);
                    if refused > 0 {
                        self.quota_refused_threads += refused as u64;
                        tracing::warn!(
                            pid,
                            refused,
                            "threads of a new target left unfollowed: its thread quota is spent (max_threads_per_target)"
                        );
                    }
                }
                Err(err) => tracing::warn!(pid, error = %err, "cannot follow a target process yet"),
            }
        }
        Ok(live)
    }

    /// Adds the loops' untimed waits judged blocking since the last tick to their blocked time
    /// (reason `futex`): the totals cannot tell them from idle parking. After the baselines
    /// learned from this tick (`learn_loops`), which they are judged by.
    fn count_untimed_loop_blocks(&mut self, blocks: &[Block], now: Instant) {
        let since = self.memory.untimed_counted_until_ns;
        let memory = &self.memory;
        let found = crate::detect::event_loop::untimed_blocks(
            &memory.history,
            blocks,
            now,
            since,
            &self.detect.event_loop,
            &memory.baselines,
        );
        self.memory.untimed_counted_until_ns = blocks.iter().map(|b| b.timestamp_ns).fold(since, u64::max);
        for (tid, ns) in found {
            let Some(status) = self.loops.iter().find(|l| l.thread.tid == tid) else { continue };
            let total = self.untimed_loop_ns.entry(tid).or_insert(0);
            *total += ns;
            let label = (status.thread.comm.clone(), status.thread.name.clone(), reason::FUTEX);
            self.loop_blocked.observe((tid, reason::FUTEX), *total, label);
        }
    }

    /// State phase of the event loops: learns how each loop idles from the tick just recorded
    /// and the long blocks not seen yet, before the detectors judge them.
    fn learn_loops(&mut self, blocks: &[Block], now: Instant) {
        let memory = &mut self.memory;
        let loops = crate::detect::loop_threads::event_loops(&memory.history, now, &self.detect.event_loop)
            .map(|t| (t.tid, t))
            .collect();
        memory.baselines.learn(&memory.history, &loops, blocks);
    }

    /// Event loops, their utilization and blocked time, and what each thread detector finds now.
    fn run_detectors(&mut self, now: Instant, latest: &HashMap<u32, [u64; reason::COUNT as usize]>) {
        self.loops = crate::detect::loop_statuses(&self.memory.history, &self.detect.event_loop, now);
        for status in &self.loops {
            let Some(totals) = latest.get(&status.thread.tid) else { continue };
            for code in BLOCKING_REASONS {
                let label = (status.thread.comm.clone(), status.thread.name.clone(), code);
                self.loop_blocked.observe((status.thread.tid, code), totals[code as usize], label);
            }
        }
        // Borrowed in place rather than copied (16k blocks a tick when many threads nap).
        let mut blocks = std::mem::take(&mut self.recent_blocks);
        let recent: &[Block] = blocks.make_contiguous();
        let tick = self.tick;
        let now_mono = tick.mono_ns;
        self.learn_loops(recent, now);
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let (min_age, all_along) = (ns(self.detect.pool.sleep_pressure_age), ns(self.detect.pool.confirm));
        let pressure = RequestPressure {
            waiting: self.requests.waiting_inbound(now_mono, min_age),
            held: self.requests.waiting_inbound_by_thread(now_mono, min_age),
            queued: crate::detect::queueing::queued_by_process(&self.request_queues.last),
            waiting_all_along: self.requests.waiting_inbound(now_mono, all_along),
            held_all_along: self.requests.waiting_inbound_by_thread(now_mono, all_along),
        };
        let iterations: Vec<LongIteration> =
            self.recent_iterations.iter().chain(&self.open_iterations).cloned().collect();
        let state = ThreadsNow { memory: &self.memory, blocks: recent, iterations: &iterations, requests: &pressure };
        let config = &self.detect;
        self.blocked_loops = crate::detect::event_loop::detect(&state, config, tick);
        self.saturated_pools = crate::detect::pool::detect(&state, config, tick);
        self.busy_loops = crate::detect::busy::detect(&state, config, tick);
        self.paused_jvms = crate::detect::jvm_pause::detect(&state, config, tick);
        self.count_untimed_loop_blocks(recent, now);
        self.recent_blocks = blocks;
    }

    /// Tells the kernel which long blocks the blocked-loop detector needs one by one now (every
    /// thread's are counted anyway).
    fn sync_block_detail(&mut self) -> Result<(), ProbeError> {
        let loops = self.loops.iter().map(|status| &status.thread);
        let mut wanted = crate::detect::untimed::block_detail(loops, self.memory.history.threads());
        if wanted != self.block_detail {
            let refused = self.probes.set_block_detail(&self.block_detail, &wanted)?;
            if !refused.is_empty() && !self.block_detail_full_warned {
                self.block_detail_full_warned = true;
                tracing::warn!(
                    refused = refused.len(),
                    "more event loops than BLOCK_DETAIL holds: their long blocks are only counted"
                );
            }
            // Retried at the next tick, once room may have come back.
            for tid in refused {
                wanted.remove(&tid);
            }
            self.block_detail = wanted;
        }
        Ok(())
    }

    /// Cores each target used since the last tick (user + system, from /proc).
    fn measure_cpu(&mut self, targets: &HashSet<u32>, now: Instant) {
        self.cpu_seen.retain(|pid, _| targets.contains(pid));
        self.cpu_cores.retain(|pid, _| targets.contains(pid));
        for &pid in targets {
            let Some(seconds) = procfs::cpu_seconds(pid) else { continue };
            if let Some((then, before)) = self.cpu_seen.insert(pid, (now, seconds)) {
                let wall = now.duration_since(then).as_secs_f64();
                if wall > 0.0 {
                    self.cpu_cores.insert(pid, (seconds - before).max(0.0) / wall);
                }
            }
        }
    }
}
