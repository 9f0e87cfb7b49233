//! Per-thread history of cumulative off-CPU totals, one sample per tick, so detectors can ask
//! "how much of the last 5 s did this thread spend in each reason".

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use gateway_observer_common::reason;

pub type ReasonTotals = [u64; reason::COUNT as usize];

/// Off-CPU reasons that keep a known event loop counted as one while it does not poll.
const STUCK_REASONS: [u32; 6] =
    [reason::FUTEX_TIMED, reason::SLEEP, reason::SOCKET, reason::IO, reason::OTHER_SYSCALL, reason::DISK];

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    pub name: String,
}

#[derive(Debug)]
struct Track {
    info: ThreadInfo,
    samples: VecDeque<(Instant, ReasonTotals)>,
    /// When this thread was last seen idling in poll/epoll/select: an event loop.
    last_polled: Option<Instant>,
    first_seen: Instant,
}

/// Samples of every followed thread, kept for `keep`.
#[derive(Debug)]
pub struct History {
    keep: Duration,
    tracks: HashMap<u32, Track>,
    /// When each process was first recorded: threads already there then were not "created".
    processes_first_seen: HashMap<u32, Instant>,
}

impl History {
    pub fn new(keep: Duration) -> Self {
        Self { keep, tracks: HashMap::new(), processes_first_seen: HashMap::new() }
    }

    /// Records one thread's cumulative totals at `now`.
    pub fn record(&mut self, now: Instant, info: ThreadInfo, totals: ReasonTotals) {
        let keep = self.keep;
        self.processes_first_seen.entry(info.tgid).or_insert(now);
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
            let stuck = track.last_polled.is_some() && STUCK_REASONS.iter().any(|r| grew(*r));
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
    }

    /// Totals over (about) the last `window`: from the oldest sample inside it to the newest.
    pub fn delta(&self, tid: u32, window: Duration) -> Option<WindowDelta> {
        let track = self.tracks.get(&tid)?;
        let (newest_at, newest) = track.samples.back()?;
        let (oldest_at, oldest) = track.samples.iter().find(|(t, _)| newest_at.duration_since(*t) <= window)?;
        let elapsed = newest_at.duration_since(*oldest_at);
        if elapsed.is_zero() {
            return None;
        }
        let mut offcpu_ns = [0; reason::COUNT as usize];
        for (slot, (new, old)) in offcpu_ns.iter_mut().zip(newest.iter().zip(oldest.iter())) {
            *slot = new.saturating_sub(*old);
        }
        Some(WindowDelta { offcpu_ns, elapsed })
    }

    /// The event loops: threads that idled in poll/epoll/select within the config's memory, or
    /// that the config names as loops (and that it does not exclude).
    pub fn event_loops<'a>(
        &'a self,
        now: Instant,
        config: &'a super::event_loop::EventLoopConfig,
    ) -> impl Iterator<Item = &'a ThreadInfo> {
        self.tracks
            .values()
            .filter(move |t| {
                let polled = t.last_polled.is_some_and(|p| now.duration_since(p) <= config.loop_memory);
                config.is_event_loop(&t.info.name, polled)
            })
            .map(|t| &t.info)
    }

    pub fn threads(&self) -> impl Iterator<Item = &ThreadInfo> {
        self.tracks.values().map(|t| &t.info)
    }

    /// When the thread appeared, if it appeared more than `settle` after its process was first
    /// recorded: threads there when observation began, or made while a process starts, are not
    /// growth.
    pub fn created_at(&self, tid: u32, settle: Duration) -> Option<Instant> {
        let track = self.tracks.get(&tid)?;
        let process_seen = self.processes_first_seen.get(&track.info.tgid)?;
        (track.first_seen > *process_seen + settle).then_some(track.first_seen)
    }

    /// Forgets processes none of whose threads is recorded any more (a reused pid starts anew).
    pub fn retain_processes(&mut self) {
        let live: std::collections::HashSet<u32> = self.tracks.values().map(|t| t.info.tgid).collect();
        self.processes_first_seen.retain(|tgid, _| live.contains(tgid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(tid: u32) -> ThreadInfo {
        ThreadInfo { tid, tgid: 1, comm: "gw".into(), name: format!("loop-{tid}") }
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
        let config = crate::detect::event_loop::EventLoopConfig::default();
        assert_eq!(h.event_loops(now, &config).count(), 1);
    }

    #[test]
    fn a_thread_that_never_polls_is_not_an_event_loop_and_old_samples_go() {
        let start = Instant::now();
        let mut h = History::new(Duration::from_secs(3));
        for second in 0..10u64 {
            h.record(start + Duration::from_secs(second), info(8), totals(0, second));
        }
        let config = crate::detect::event_loop::EventLoopConfig::default();
        assert_eq!(h.event_loops(start + Duration::from_secs(9), &config).count(), 0);
        let d = h.delta(8, Duration::from_secs(60)).expect("delta");
        assert_eq!(d.elapsed, Duration::from_secs(3), "only `keep` of history is kept");
        h.forget(8);
        assert!(h.delta(8, Duration::from_secs(5)).is_none());
    }
}
