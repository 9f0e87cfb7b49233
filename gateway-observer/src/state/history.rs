//! Per-thread history of cumulative off-CPU totals, one sample per tick, so detectors can ask
//! "how much of the last 5 s did this thread spend in each reason".

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use gateway_observer_common::reason;

pub type ReasonTotals = [u64; reason::COUNT as usize];

/// Off-CPU reasons that mean an event loop is blocked in work (`event_loop::BLOCKING_REASONS`),
/// and that keep a known loop counted as one while it does not poll.
pub const LOOP_BLOCKING_REASONS: [u32; 8] = [
    reason::FUTEX_TIMED,
    reason::FUTEX_SLEEP,
    reason::POLL_OTHER,
    reason::SLEEP,
    reason::SOCKET,
    reason::IO,
    reason::OTHER_SYSCALL,
    reason::DISK,
];

/// What a thread did over a window: nanoseconds per reason, and the window's real length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowDelta {
    pub offcpu_ns: ReasonTotals,
    pub elapsed: Duration,
}

impl WindowDelta {
    pub fn ns(&self, code: u32) -> u64 {
        self.offcpu_ns.get(code as usize).copied().unwrap_or(0)
    }

    /// The share of the elapsed time spent in `reasons`.
    pub fn share(&self, reasons: &[u32]) -> f64 {
        let ns: u64 = reasons.iter().map(|r| self.ns(*r)).sum();
        ns as f64 / self.elapsed.as_nanos().max(1) as f64
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    /// The thread's distinct display name (`state::threads`: `name`, `name#2`…).
    pub name: String,
    /// Its thread group, from the kernel's name: threads named alike share it, whatever their
    /// distinct display names.
    pub group: String,
}

impl ThreadInfo {
    /// A thread whose kernel name is `name` (no distinct suffix): its group follows from it.
    pub fn new(tid: u32, tgid: u32, comm: String, name: String) -> Self {
        let group = crate::thread_group::thread_group(&name);
        Self { tid, tgid, comm, name, group }
    }
}

#[derive(Debug)]
struct Track {
    info: ThreadInfo,
    samples: VecDeque<(Instant, ReasonTotals)>,
    /// When this thread was last seen idling in poll/epoll/select: an event loop.
    last_polled: Option<Instant>,
    first_seen: Instant,
}

/// When a process was first recorded (threads already there then were not "created") and when
/// it started, if known (threads made while it starts up are not growth either).
#[derive(Debug, Clone, Copy)]
struct ProcessSeen {
    first_recorded: Instant,
    started: Option<Instant>,
}

/// Samples of every followed thread, kept for `keep`.
#[derive(Debug)]
pub struct History {
    keep: Duration,
    tracks: HashMap<u32, Track>,
    processes: HashMap<u32, ProcessSeen>,
    /// The two latest distinct instants anything was recorded at: the last tick.
    last_ticks: (Option<Instant>, Option<Instant>),
}

impl History {
    pub fn new(keep: Duration) -> Self {
        Self { keep, tracks: HashMap::new(), processes: HashMap::new(), last_ticks: (None, None) }
    }

    /// Notes when a process started (from /proc), so that threads it makes while starting up are
    /// not taken for growth, but threads a long-running process makes right after we attach are.
    pub fn note_process_start(&mut self, tgid: u32, started: Instant, now: Instant) {
        self.processes.entry(tgid).or_insert(ProcessSeen { first_recorded: now, started: None }).started =
            Some(started);
    }

    /// Whether the process was recorded already (its start is noted once, at its first record).
    pub fn knows_process(&self, tgid: u32) -> bool {
        self.processes.contains_key(&tgid)
    }

    /// Records one thread's cumulative totals at `now`.
    pub fn record(&mut self, now: Instant, info: ThreadInfo, totals: ReasonTotals) {
        let keep = self.keep;
        if self.last_ticks.1 != Some(now) {
            self.last_ticks = (self.last_ticks.1, Some(now));
        }
        self.processes.entry(info.tgid).or_insert(ProcessSeen { first_recorded: now, started: None });
        let track = self.tracks.entry(info.tid).or_insert_with(|| Track {
            info: info.clone(),
            samples: VecDeque::new(),
            last_polled: None,
            first_seen: now,
        });
        if track.info.tgid != info.tgid {
            // A reused tid: a different thread.
            track.samples.clear();
            track.last_polled = None;
            track.first_seen = now;
        }
        if let Some((_, previous)) = track.samples.back() {
            let grew = |r: u32| totals[r as usize] > previous[r as usize];
            // Polled: an event loop. A known loop that is blocked in work instead stays one: a
            // loop stuck in one call for minutes must not stop being judged as a loop.
            let stuck = track.last_polled.is_some() && LOOP_BLOCKING_REASONS.iter().any(|r| grew(*r));
            if grew(reason::POLL) || stuck {
                track.last_polled = Some(now);
            }
        }
        track.info = info;
        track.samples.push_back((now, totals));
        while track.samples.front().is_some_and(|(t, _)| now.duration_since(*t) > keep) {
            track.samples.pop_front();
        }
    }

    /// An event loop (polled within `memory`) that is on CPU in a long iteration stays one, like
    /// one stuck in a call: a loop spinning for minutes must not stop being judged as a loop. A
    /// thread that polled once long ago and computes since is not made one.
    pub fn keep_as_loop(&mut self, tid: u32, now: Instant, memory: Duration) {
        if let Some(track) = self.tracks.get_mut(&tid)
            && track.last_polled.is_some_and(|p| now.duration_since(p) <= memory)
        {
            track.last_polled = Some(now);
        }
    }

    /// Forgets a thread that exited.
    pub fn forget(&mut self, tid: u32) {
        self.tracks.remove(&tid);
        crate::heap::shrink_sparse_map(&mut self.tracks);
    }

    /// The last tick: (its start, its length), from the two latest instants anything was recorded.
    pub fn last_tick(&self) -> Option<(Instant, Duration)> {
        match self.last_ticks {
            (Some(start), Some(end)) => Some((start, end.duration_since(start))),
            _ => None,
        }
    }

    /// The thread's totals over the last tick: what it did since the previous one. A condition is
    /// ongoing when it shows here, not only in the window.
    pub fn last_delta(&self, tid: u32) -> Option<WindowDelta> {
        let track = self.tracks.get(&tid)?;
        let mut samples = track.samples.iter().rev();
        let (newest_at, newest) = samples.next()?;
        let (oldest_at, oldest) = samples.next()?;
        Some(difference(newest, oldest, newest_at.duration_since(*oldest_at)))
    }

    /// Totals over (about) the last `window`: from the oldest sample inside it to the newest.
    pub fn delta(&self, tid: u32, window: Duration) -> Option<WindowDelta> {
        let track = self.tracks.get(&tid)?;
        let (newest_at, newest) = track.samples.back()?;
        // From the newest back: a window of seconds is a few samples of the minutes kept.
        let (oldest_at, oldest) =
            track.samples.iter().rev().take_while(|(t, _)| newest_at.duration_since(*t) <= window).last()?;
        let elapsed = newest_at.duration_since(*oldest_at);
        if elapsed.is_zero() {
            return None;
        }
        Some(difference(newest, oldest, elapsed))
    }

    /// Every followed thread, and whether it idled in poll/epoll/select within `memory`: what
    /// tells the detectors which threads are event loops.
    pub fn threads_polled(&self, now: Instant, memory: Duration) -> impl Iterator<Item = (&ThreadInfo, bool)> {
        self.tracks.values().map(move |t| (&t.info, t.last_polled.is_some_and(|p| now.duration_since(p) <= memory)))
    }

    /// A followed thread of process `tgid`.
    pub fn thread(&self, tgid: u32, tid: u32) -> Option<&ThreadInfo> {
        self.tracks.get(&tid).map(|t| &t.info).filter(|info| info.tgid == tgid)
    }

    pub fn threads(&self) -> impl Iterator<Item = &ThreadInfo> {
        self.tracks.values().map(|t| &t.info)
    }

    /// When the thread appeared, if it is growth: it was not there when its process was first
    /// recorded, and it appeared more than `settle` after the process started (threads made
    /// while a process starts up are not growth). A process whose start is unknown settles from
    /// its first record. A process already running when observation began grows from the next
    /// tick on: an observer attached during an incident sees the pool fill.
    pub fn created_at(&self, tid: u32, settle: Duration) -> Option<Instant> {
        let track = self.tracks.get(&tid)?;
        let process = self.processes.get(&track.info.tgid)?;
        let settled = process.started.unwrap_or(process.first_recorded) + settle;
        (track.first_seen > process.first_recorded && track.first_seen > settled).then_some(track.first_seen)
    }

    /// Forgets processes none of whose threads is recorded any more (a reused pid starts anew).
    pub fn retain_processes(&mut self) {
        let live: std::collections::HashSet<u32> = self.tracks.values().map(|t| t.info.tgid).collect();
        self.processes.retain(|tgid, _| live.contains(tgid));
    }
}

fn difference(newest: &ReasonTotals, oldest: &ReasonTotals, elapsed: Duration) -> WindowDelta {
    let mut offcpu_ns = [0; reason::COUNT as usize];
    for (slot, (new, old)) in offcpu_ns.iter_mut().zip(newest.iter().zip(oldest.iter())) {
        *slot = new.saturating_sub(*old);
    }
    WindowDelta { offcpu_ns, elapsed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(tid: u32) -> ThreadInfo {
        ThreadInfo::new(tid, 1, "gw".into(), format!("loop-{tid}"))
    }

    fn totals(poll: u64, futex_timed: u64) -> ReasonTotals {
        let mut t = [0; reason::COUNT as usize];
        t[reason::POLL as usize] = poll;
        t[reason::FUTEX_TIMED as usize] = futex_timed;
        t
    }

    #[test]
    fn window_delta_and_event_loop_marking() {
        let start = Instant::now();
        let mut h = History::new(Duration::from_secs(60));
        for second in 0..10u64 {
            let at = start + Duration::from_secs(second);
            // Polls 0.5 s a second; from second 6 on also blocks 0.4 s a second in a timed futex.
            let blocked = second.saturating_sub(5) * 400_000_000;
            h.record(at, info(7), totals(second * 500_000_000, blocked));
        }
        let d = h.delta(7, Duration::from_secs(5)).expect("delta");
        assert_eq!(d.elapsed, Duration::from_secs(5));
        assert_eq!(d.ns(reason::POLL), 2_500_000_000);
        assert_eq!(d.ns(reason::FUTEX_TIMED), 1_600_000_000);
        let now = start + Duration::from_secs(9);
        let polled = |now| h.threads_polled(now, Duration::from_secs(60)).filter(|(_, polled)| *polled).count();
        assert_eq!(polled(now), 1);
    }

    #[test]
    fn a_thread_that_never_polls_is_not_an_event_loop_and_old_samples_go() {
        let start = Instant::now();
        let mut h = History::new(Duration::from_secs(3));
        for second in 0..10u64 {
            h.record(start + Duration::from_secs(second), info(8), totals(0, second));
        }
        let polled = h.threads_polled(start + Duration::from_secs(9), Duration::from_secs(60));
        assert_eq!(polled.filter(|(_, polled)| *polled).count(), 0);
        let d = h.delta(8, Duration::from_secs(60)).expect("delta");
        assert_eq!(d.elapsed, Duration::from_secs(3), "only `keep` of history is kept");
        h.forget(8);
        assert!(h.delta(8, Duration::from_secs(5)).is_none());
    }

    #[test]
    fn threads_a_running_process_makes_after_attach_are_growth_but_not_those_of_its_start_up() {
        let settle = Duration::from_secs(5);
        let t0 = Instant::now() + Duration::from_secs(3600);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let thread = |tid: u32, tgid: u32| ThreadInfo::new(tid, tgid, "java".into(), format!("rpc-{tid}"));
        let mut h = History::new(Duration::from_secs(60));
        // Process 1 has run for an hour when we attach; process 2 starts as we attach.
        h.note_process_start(1, t0 - Duration::from_secs(3600), at(0));
        h.note_process_start(2, at(0), at(0));
        for tid in [10, 20] {
            h.record(at(0), thread(tid, tid / 10), totals(0, 0));
        }
        for tid in [11, 21] {
            h.record(at(1), thread(tid, tid / 10), totals(0, 0));
        }
        assert_eq!(h.created_at(10, settle), None, "there when we attached");
        assert_eq!(h.created_at(11, settle), Some(at(1)), "made a second after we attached: growth");
        assert_eq!(h.created_at(21, settle), None, "made while its process starts up");
        h.record(at(7), thread(22, 2), totals(0, 0));
        assert_eq!(h.created_at(22, settle), Some(at(7)));
        assert_eq!(h.last_tick(), Some((at(1), Duration::from_secs(6))));
        assert_eq!(h.last_delta(10), None, "one sample only");
    }
}
