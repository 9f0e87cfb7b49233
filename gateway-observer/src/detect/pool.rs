//! `PoolSaturated`: a thread group (threads named alike, `rpc-pool-17` → `rpc-pool-*`) whose
//! threads are nearly all busy or blocked in work rather than idle waiting for work, or that grows
//! fast. A pool whose every thread is parked in a rate limiter's sleep serves nothing, at low CPU.
//!
//! Idle, for a pool thread, is a futex wait (a condition variable or park waiting for a task;
//! timed too, since pools whose extra threads time out — Java's keepAliveTime, ours — poll their
//! queue with a timeout) or a poll; busy is on CPU; blocked in work is a sleep, socket or pipe
//! I/O, another syscall, or disk.
//!
//! A JVM rate limiter's `Thread.sleep` is a timed futex wait like an idle worker's keep-alive
//! poll; what differs is how it ends: the sleep runs to its timeout, the poll is woken by the
//! thread that hands it work. The kernel counts a timed wait whose previous one timed out as
//! `futex_sleep`. An idle pool can time out too (Jetty's minimum threads poll with a 60 s idle
//! timeout, forever), so sleep counts as work only while the process has at least half as many
//! requests waiting (in flight for `sleep_pressure_age` or more) as the group has threads
//! asleep: each sleeping worker holds a request. A thread's first sleep, or one already open
//! when the observer attached, is still `futex_timed`: when the group's timed waits lately all
//! ended by their timeout (`timed_waits`), its `futex_timed` time is sleep too.
//!
//! An untimed wait (`futex`) is how a worker waits for a task, and also how it waits on a
//! `CompletableFuture.get()` or a lock; a timed one not yet known to run to its timeout
//! (`futex_timed`) is a keep-alive poll for a task, or a `Thread.sleep`. Both count as work when
//! work is waiting that an idle pool would have taken: requests of the process waited unread in
//! its sockets (queued behind the pool), while the group's own threads hold at least half as
//! many requests, read and unanswered for `sleep_pressure_age`, as it has threads in those
//! waits: a thread parked in the middle of a request is not waiting for work. This needs no
//! history, so a pool is named from the first sleeps of its fault, before any has timed out.
//! An event loop's requests are held by the loop, not by an idle pool beside it, and an async
//! server's workers, which hold requests while their tasks await, queue nothing unread.
//!
//! Saturation is judged over the last `confirm` (a second), which is itself the condition held
//! that long: the alert serves its pending time with it (`Finding::held_for`), so a pool is named
//! a second after it fills, while growth alone waits out the alert book's pending second. The
//! window gives the evidence's shares.
//! Event loops are left to `EventLoopBlocked`.

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use gateway_observer_common::reason;

pub use crate::state::thread_memory::RequestPressure;
use crate::state::{
    history::{History, WindowDelta},
    thread_memory::ThreadsNow,
    timed_waits::{self, TimedWaits},
};
use crate::{
    api::v1,
    clock::Tick,
    detect::{Config, finding::Finding},
    events::Block,
    reason::reason_label,
};

/// Off-CPU reasons that mean a pool thread is occupied by work.
const POOL_BLOCKING_REASONS: [u32; 6] =
    [reason::SLEEP, reason::POLL_OTHER, reason::SOCKET, reason::IO, reason::OTHER_SYSCALL, reason::DISK];
/// Off-CPU reasons that mean a pool thread waits for work.
const POOL_IDLE_REASONS: [u32; 3] = [reason::FUTEX, reason::FUTEX_TIMED, reason::POLL];
/// Timed waits that run to their timeout: work while requests wait, idle otherwise.
const POOL_SLEEP_REASON: u32 = reason::FUTEX_SLEEP;
/// Thread-seconds of a group's timed waits that must lately have timed out (decayed, most of
/// them) before its open ones are taken for sleeps.
const MIN_TIMEOUTS_FOR_A_SLEEPING_GROUP: f64 = 1.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolConfig {
    pub window: Duration,
    /// The recent stretch saturation is judged over.
    pub confirm: Duration,
    /// Groups smaller than this are not pools.
    pub min_threads: usize,
    /// Share of the group's thread time that is busy, blocked or waiting for a CPU.
    pub saturated_share: f64,
    /// Threads created in the window that, on their own, mean the pool is filling up.
    pub growth_threads: usize,
    /// How long an inbound request must have been in flight to count as waiting, for sleeping
    /// threads to count as busy with it.
    pub sleep_pressure_age: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(5),
            confirm: Duration::from_secs(1),
            min_threads: 4,
            saturated_share: 0.90,
            growth_threads: 16,
            sleep_pressure_age: Duration::from_millis(250),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SaturatedPool {
    pub pid: u32,
    pub comm: String,
    pub group: String,
    pub threads: usize,
    pub created_in_window: usize,
    pub window: Duration,
    /// Shares of the group's thread time (sum 1): on CPU, blocked in work, waiting for a CPU, idle.
    pub busy_share: f64,
    pub blocked_share: f64,
    pub runqueue_share: f64,
    pub idle_share: f64,
    /// Blocked seconds by reason.
    pub blocked_by_reason: Vec<(&'static str, f64)>,
    /// Inbound requests of the process in flight for `sleep_pressure_age` or more.
    pub waiting_requests: usize,
    /// Of them, those the group's own threads read and hold.
    pub held_requests: usize,
    /// Requests of the process that waited unread in its sockets lately (`queued_by_process`).
    pub queued_requests: usize,
    /// Futex words the group's long blocks waited on, with how many threads waited on each.
    pub hot_futexes: Vec<(u64, usize)>,
    /// CPU the group used, in cores (busy seconds / window).
    pub cpu_cores: f64,
    /// Saturated in the last tick too, or still growing in it.
    pub active: bool,
    /// Its threads' futex waits counted as work: they hold the requests they parked in.
    pub parked_in_requests: bool,
    /// How long the share shows the pool saturated: `confirm` when it was over the whole last
    /// `confirm` and the last tick, zero when only growth names it.
    pub saturated_for: Duration,
}

#[derive(Default)]
struct GroupTotals {
    pid: u32,
    comm: String,
    threads: usize,
    created: usize,
    tids: Vec<u32>,
    /// Requests its threads read and hold unanswered (see `RequestPressure::held`), and those of
    /// them held for all of `confirm`.
    held: usize,
    held_all_along: usize,
    /// The group's thread time over the window, the last `confirm`, and the last tick.
    window: Period,
    recent: Period,
    last: Period,
    /// How the group's timed waits ended lately.
    timed_waits: timed_waits::Outcomes,
}

/// A group's thread time over one stretch: its threads' summed lengths and off-CPU time by reason.
#[derive(Default)]
struct Period {
    elapsed_ns: u128,
    offcpu_ns: [u64; reason::COUNT as usize],
}

impl Period {
    fn add(&mut self, delta: &WindowDelta) {
        self.elapsed_ns += delta.elapsed.as_nanos();
        for (sum, ns) in self.offcpu_ns.iter_mut().zip(delta.offcpu_ns) {
            *sum += ns;
        }
    }

    /// Timed waits of a group taken to be asleep are sleeps.
    fn count_timed_waits_as_sleep(&mut self) {
        self.offcpu_ns[POOL_SLEEP_REASON as usize] += std::mem::take(&mut self.offcpu_ns[reason::FUTEX_TIMED as usize]);
    }

    /// Share of the stretch that was on CPU, blocked in work (sleeps and parked waits too,
    /// while requests make them work) or waiting for a CPU; 0 for an empty stretch.
    fn saturation(&self, threads: usize, held: usize, pressure: Pressure) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        let work = WaitsAsWork::of(threads, held, self.elapsed_ns, &self.offcpu_ns, pressure);
        saturated_ns(self.elapsed_ns, &self.offcpu_ns, work) / self.elapsed_ns as f64
    }
}

/// A process's requests that press on its groups.
#[derive(Debug, Clone, Copy, Default)]
struct Pressure {
    /// Inbound requests in flight for `sleep_pressure_age` or more.
    waiting: usize,
    /// Requests that waited unread in its sockets lately.
    queued: usize,
}

/// Which of a group's waits count as work over a stretch (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
struct WaitsAsWork {
    sleep: bool,
    /// Untimed and timed futex waits: the threads hold the requests they parked in.
    parked: bool,
}

impl WaitsAsWork {
    fn of(
        threads: usize,
        held: usize,
        elapsed_ns: u128,
        offcpu_ns: &[u64; reason::COUNT as usize],
        pressure: Pressure,
    ) -> Self {
        let sleep_ns = offcpu_ns[POOL_SLEEP_REASON as usize];
        let parked_ns = parked_ns(offcpu_ns) as u64;
        Self {
            sleep: holds_requests(threads, elapsed_ns, sleep_ns, pressure.waiting),
            parked: pressure.queued > 0 && holds_requests(threads, elapsed_ns, parked_ns, held),
        }
    }
}

/// What tells sleeping or waiting in work from idling, besides the threads' own time.
pub struct SleepSignals<'a> {
    pub requests: &'a RequestPressure,
    /// How each thread's timed waits ended lately.
    pub timed_waits: &'a TimedWaits,
}

/// `PoolSaturated` findings now: thread groups (event loops left out) nearly all busy or blocked
/// in work over `confirm`, or growing fast.
pub fn detect(state: &ThreadsNow, config: &Config, tick: Tick) -> Vec<Finding> {
    let memory = state.memory;
    let signals = SleepSignals { requests: state.requests, timed_waits: &memory.timed_waits };
    let found = saturated_pools(
        &memory.history,
        state.blocks,
        tick.at,
        tick.mono_ns,
        &config.pool,
        &config.event_loop,
        &signals,
    );
    found.iter().map(finding).collect()
}

/// The finding of a saturated pool, with its evidence; the tick adds where its threads wait.
pub(crate) fn finding(found: &SaturatedPool) -> Finding {
    let hot_futexes = found
        .hot_futexes
        .iter()
        .map(|(addr, waiters)| v1::HotFutex { word: crate::opaque::futex_word(*addr), waiters: *waiters });
    let evidence = v1::PoolSaturated {
        thread_group: found.group.clone(),
        threads: found.threads,
        created_in_window: found.created_in_window,
        window_seconds: found.window.as_secs_f64(),
        busy_share: found.busy_share,
        blocked_share: found.blocked_share,
        runqueue_share: found.runqueue_share,
        idle_share: found.idle_share,
        blocked_seconds_by_reason: found.blocked_by_reason.iter().map(|(reason, s)| ((*reason).into(), *s)).collect(),
        hot_futexes: hot_futexes.collect(),
        cpu_cores: found.cpu_cores,
        waiting_requests: found.waiting_requests,
        held_requests: found.held_requests,
        queued_requests: found.queued_requests,
        refusals: None,
        waiting_at: None,
        java_stack_unavailable: None,
        requests: None,
    };
    Finding {
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.group.clone(),
        summary: found.summary(),
        evidence: v1::Evidence::PoolSaturated(evidence),
        active: found.active,
        held_for: found.saturated_for,
        stack_id: None,
    }
}

/// Saturated pools now. `now_mono_ns` is CLOCK_MONOTONIC, the clock of `blocks`.
pub fn saturated_pools(
    history: &History,
    blocks: &[Block],
    now: Instant,
    now_mono_ns: u64,
    config: &PoolConfig,
    loops: &super::loop_threads::EventLoopConfig,
    signals: &SleepSignals,
) -> Vec<SaturatedPool> {
    let SleepSignals { requests, timed_waits } = signals;
    let loop_tids: std::collections::HashSet<u32> =
        super::loop_threads::event_loops(history, now, loops).map(|t| t.tid).collect();
    let mut groups: BTreeMap<(u32, &str), GroupTotals> = BTreeMap::new();
    for thread in history.threads() {
        if loop_tids.contains(&thread.tid) {
            continue;
        }
        let totals = groups.entry((thread.tgid, thread.group.as_str())).or_default();
        totals.pid = thread.tgid;
        totals.comm.clone_from(&thread.comm);
        totals.threads += 1;
        totals.tids.push(thread.tid);
        totals.held += requests.held.get(&thread.tid).copied().unwrap_or(0);
        totals.held_all_along += requests.held_all_along.get(&thread.tid).copied().unwrap_or(0);
        if let Some(at) = history.created_at(thread.tid, config.window) {
            totals.created += usize::from(now.duration_since(at) <= config.window);
        }
        totals.timed_waits.add(timed_waits.of(thread.tid));
        if let Some(recent) = history.delta(thread.tid, config.confirm) {
            totals.recent.add(&recent);
        }
        if let Some(last) = history.last_delta(thread.tid) {
            totals.last.add(&last);
        }
        if let Some(window) = history.delta(thread.tid, config.window) {
            totals.window.add(&window);
        }
    }
    let window_start_ns = now_mono_ns.saturating_sub(u64::try_from(config.window.as_nanos()).unwrap_or(u64::MAX));
    groups
        .into_iter()
        .filter_map(|((pid, group), t)| {
            let of = |requests: &HashMap<u32, usize>| requests.get(&pid).copied().unwrap_or(0);
            let queued = of(&requests.queued);
            let pressure = Pressure { waiting: of(&requests.waiting), queued };
            let all_along = Pressure { waiting: of(&requests.waiting_all_along), queued };
            judge(group.to_owned(), t, blocks, window_start_ns, config, (pressure, all_along))
        })
        .collect()
}

/// Whether a group's threads spending `wait_ns` of `elapsed_ns` in one kind of wait are busy
/// with `requests`: at least half as many requests as threads in that wait (each holds one).
fn holds_requests(threads: usize, elapsed_ns: u128, wait_ns: u64, requests: usize) -> bool {
    if elapsed_ns == 0 || wait_ns == 0 {
        return false;
    }
    let in_wait = threads as f64 * wait_ns as f64 / elapsed_ns as f64;
    requests as f64 * 2.0 >= in_wait.max(1.0)
}

fn judge(
    group: String,
    t: GroupTotals,
    blocks: &[Block],
    window_start_ns: u64,
    config: &PoolConfig,
    (pressure, all_along): (Pressure, Pressure),
) -> Option<SaturatedPool> {
    let mut t = t;
    if t.timed_waits.asleep(MIN_TIMEOUTS_FOR_A_SLEEPING_GROUP) {
        for period in [&mut t.window, &mut t.recent, &mut t.last] {
            period.count_timed_waits_as_sleep();
        }
    }
    let growing = t.created >= config.growth_threads;
    let elapsed_ns = t.window.elapsed_ns;
    if t.threads < config.min_threads || (elapsed_ns == 0 && !growing) {
        return None;
    }
    let total = (elapsed_ns as f64).max(1.0);
    let ns = |r: u32| t.window.offcpu_ns[r as usize] as f64;
    let work = WaitsAsWork::of(t.threads, t.held, elapsed_ns, &t.window.offcpu_ns, pressure);
    let sleep = ns(POOL_SLEEP_REASON);
    let sleep_work = if work.sleep { sleep } else { 0.0 };
    let parked_work = if work.parked { parked_ns(&t.window.offcpu_ns) } else { 0.0 };
    let idle: f64 = POOL_IDLE_REASONS.iter().map(|r| ns(*r)).sum::<f64>() + sleep - sleep_work - parked_work;
    let blocked: f64 = POOL_BLOCKING_REASONS.iter().map(|r| ns(*r)).sum::<f64>() + sleep_work + parked_work;
    let runqueue = ns(reason::RUNQUEUE);
    let busy = (total - t.window.offcpu_ns.iter().map(|v| *v as f64).sum::<f64>()).max(0.0);
    // Without history (only new threads) there is no share to speak of: all zero, idle whole.
    let share = |ns: f64| if elapsed_ns == 0 { 0.0 } else { ns / total };
    // Judge the share only on enough history (half of `confirm` per thread on average); before
    // that, only growth can tell, and the shares are evidence.
    let enough_history = t.recent.elapsed_ns * 2 >= config.confirm.as_nanos() * t.threads as u128;
    let saturated_recently =
        enough_history && t.recent.saturation(t.threads, t.held, pressure) >= config.saturated_share;
    if !(growing || saturated_recently) {
        return None;
    }
    let saturated_last_tick = t.last.saturation(t.threads, t.held, pressure) >= config.saturated_share;
    // Dated only by requests in flight all along: waits the stretch began with, before the
    // requests that make them work arrived, were idle.
    let saturated_all_along =
        saturated_recently && t.recent.saturation(t.threads, t.held_all_along, all_along) >= config.saturated_share;
    // Growth is judged over the window and is recent by itself: a pool that filled in half a
    // second and stays full is still an incident after it stopped growing.
    let active = saturated_last_tick || growing;
    let mut hot: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for b in
        blocks.iter().filter(|b| b.timestamp_ns >= window_start_ns && b.futex_uaddr != 0 && t.tids.contains(&b.tid))
    {
        let waiters = hot.entry(b.futex_uaddr).or_default();
        if !waiters.contains(&b.tid) {
            waiters.push(b.tid);
        }
    }
    let mut hot_futexes: Vec<(u64, usize)> = hot.into_iter().map(|(a, w)| (a, w.len())).collect();
    hot_futexes.sort_by_key(|f| std::cmp::Reverse(f.1));
    hot_futexes.truncate(3);
    Some(SaturatedPool {
        pid: t.pid,
        comm: t.comm,
        group,
        threads: t.threads,
        created_in_window: t.created,
        window: config.window,
        busy_share: share(busy),
        blocked_share: share(blocked),
        runqueue_share: share(runqueue),
        idle_share: if elapsed_ns == 0 { 1.0 } else { share(idle) },
        blocked_by_reason: POOL_BLOCKING_REASONS
            .iter()
            .chain(&[POOL_SLEEP_REASON, reason::FUTEX_TIMED])
            .chain(work.parked.then_some(&reason::FUTEX))
            .filter(|r| ns(**r) > 0.0)
            .map(|r| (reason_label(*r), ns(*r) / 1e9))
            .collect(),
        waiting_requests: pressure.waiting,
        held_requests: t.held,
        queued_requests: pressure.queued,
        hot_futexes,
        cpu_cores: if elapsed_ns == 0 { 0.0 } else { busy / 1e9 / config.window.as_secs_f64() },
        active,
        parked_in_requests: work.parked,
        saturated_for: if saturated_last_tick && saturated_all_along { config.confirm } else { Duration::ZERO },
    })
}

/// Thread time in futex waits, untimed and timed (not yet known to be sleeps).
fn parked_ns(offcpu_ns: &[u64; reason::COUNT as usize]) -> f64 {
    (offcpu_ns[reason::FUTEX as usize] + offcpu_ns[reason::FUTEX_TIMED as usize]) as f64
}

/// Thread time over `elapsed_ns` that was on CPU, blocked in work (sleeps and parked waits
/// too, as `work` says) or waiting for a CPU.
fn saturated_ns(elapsed_ns: u128, offcpu_ns: &[u64; reason::COUNT as usize], work: WaitsAsWork) -> f64 {
    let ns = |r: u32| offcpu_ns[r as usize] as f64;
    let busy = (elapsed_ns as f64 - offcpu_ns.iter().map(|v| *v as f64).sum::<f64>()).max(0.0);
    let sleep = if work.sleep { ns(POOL_SLEEP_REASON) } else { 0.0 };
    let parked = if work.parked { parked_ns(offcpu_ns) } else { 0.0 };
    busy + POOL_BLOCKING_REASONS.iter().map(|r| ns(*r)).sum::<f64>() + ns(reason::RUNQUEUE) + sleep + parked
}

impl SaturatedPool {
    /// "pool rpc-pool-* saturated: 64 threads (+54 in 5.0s), 97% busy or blocked (mostly
    /// futex_sleep), 0.03 CPU, 80 requests waiting"
    pub fn summary(&self) -> String {
        // futex_timed is listed for evidence but reads as idle for a pool, unless its threads
        // parked in requests they hold (see the module doc).
        let on_cpu = ("on CPU", self.cpu_cores * self.window.as_secs_f64());
        let main = self
            .blocked_by_reason
            .iter()
            .filter(|(r, _)| self.parked_in_requests || *r != "futex_timed")
            .chain(std::iter::once(&on_cpu))
            .filter(|(_, secs)| *secs > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or("idle", |(r, _)| r);
        let mut waiting = match self.waiting_requests {
            0 => String::new(),
            n => format!(", {n} requests waiting"),
        };
        if self.queued_requests > 0 {
            waiting.push_str(&format!(", {} waited unread in its sockets", self.queued_requests));
        }
        format!(
            "pool {} saturated: {} threads (+{} in {:.1}s), {:.0}% busy or blocked (mostly {}), {:.2} CPU{}",
            self.group,
            self.threads,
            self.created_in_window,
            self.window.as_secs_f64(),
            (1.0 - self.idle_share) * 100.0,
            main,
            self.cpu_cores,
            waiting
        )
    }
}

#[cfg(test)]
mod tests;
