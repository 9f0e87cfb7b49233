//! Forgetting what is gone. Counters are kept per label (a process's comm, a thread group, an
//! event loop's name, a peer) so that they never go down while what they name lives; once it is
//! gone for `GONE_SERIES_KEEP` its series leave `/metrics` (Prometheus reads the disappearance
//! as staleness, and a later process of the same name as a counter reset). Without this, a host
//! that restarts its gateways or runs short-lived targets gathers their series for the daemon's
//! whole life. Stacks captured in the kernel's STACKS map are deleted the same way once no block
//! has named them for `STACK_KEEP`: the map never frees an entry by itself, and a full one keeps
//! every later stack out. What the daemon freed is given back to the system every
//! `heap::TRIM_EVERY`, so that its resident memory falls after a burst of connections or threads.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

use super::Collector;
use crate::{
    heap::Trimmer,
    probes::ProbeError,
    state::liveness::{GONE_SERIES_KEEP, Liveness},
};

/// A stack no block has named for this long is deleted from STACKS (evidence symbolizes the
/// stacks of the blocks in the detection window, 5 s).
pub const STACK_KEEP: Duration = Duration::from_secs(30);

/// Long blocks and iterations are kept for twice the longest detector window (a window ending now
/// reaches one window back), and at least this long: past that they are no detector's evidence,
/// and a burst's thousands of blocks would otherwise stay resident (3 MiB for a minute after
/// 2,000 napping threads left, `bench churn`).
const MIN_EVIDENCE_KEEP: Duration = Duration::from_secs(20);

/// Drops the entries of a time-ordered queue older than `oldest_ns`; the queue gives its room
/// back once a quarter full.
fn drop_older<T>(queue: &mut VecDeque<T>, oldest_ns: u64, at_ns: impl Fn(&T) -> u64) {
    while queue.front().is_some_and(|entry| at_ns(entry) < oldest_ns) {
        queue.pop_front();
    }
    crate::heap::shrink_sparse_queue(queue);
}

pub(super) struct Retention {
    processes: Liveness<String>,
    groups: Liveness<(String, String)>,
    loop_threads: Liveness<(String, String)>,
    peers: Liveness<(String, String)>,
    /// Stack id → when a block last named it.
    stacks: HashMap<u32, Instant>,
    trimmer: Trimmer,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            processes: Liveness::new(GONE_SERIES_KEEP),
            groups: Liveness::new(GONE_SERIES_KEEP),
            loop_threads: Liveness::new(GONE_SERIES_KEEP),
            peers: Liveness::new(GONE_SERIES_KEEP),
            stacks: HashMap::new(),
            trimmer: Trimmer::new(Instant::now()),
        }
    }
}

impl Retention {
    /// A block named `stack_id` at `now`.
    pub(super) fn note_stack(&mut self, stack_id: u32, now: Instant) {
        self.stacks.insert(stack_id, now);
    }

    /// Stacks no block has named for `STACK_KEEP`, forgotten here.
    fn stale_stacks(&mut self, now: Instant) -> Vec<u32> {
        let stale: Vec<u32> = self
            .stacks
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) >= STACK_KEEP)
            .map(|(id, _)| *id)
            .collect();
        for id in &stale {
            self.stacks.remove(id);
        }
        stale
    }
}

impl Collector {
    /// Once a tick, after every thread is folded: notes what lives now (the processes and thread
    /// groups of live threads, the event loops, the peers of open connections), drops the series
    /// of what has not lived for `GONE_SERIES_KEEP`, blocks too old to be evidence, stale stacks
    /// from STACKS, and gives freed heap back.
    pub(super) fn forget_gone(&mut self, now: Instant, now_mono: u64) -> Result<(), ProbeError> {
        let oldest = now_mono.saturating_sub(self.evidence_keep_ns());
        drop_older(&mut self.recent_blocks, oldest, |block| block.timestamp_ns);
        drop_older(&mut self.recent_iterations, oldest, |iteration| iteration.timestamp_ns);
        let r = &mut self.retention;
        for (process, group, _) in self.thread_states.keys() {
            r.groups.note((process.clone(), group.clone()), now);
        }
        for process in self.thread_states.keys().map(|(p, _, _)| p).collect::<HashSet<_>>() {
            r.processes.note(process.clone(), now);
        }
        for status in &self.loops {
            r.loop_threads.note((status.thread.comm.clone(), status.thread.name.clone()), now);
        }
        // Series of what was never seen alive at a tick (a thread or process that lived and died
        // in between, or while the daemon was stopped) start their keep time now.
        for (process, group, _) in self.offcpu.totals().keys().chain(self.long_blocks.totals().keys()) {
            r.groups.note_if_new((process.clone(), group.clone()), now);
        }
        for (process, thread, _) in self.loop_blocked.totals().keys() {
            r.loop_threads.note_if_new((process.clone(), thread.clone()), now);
        }
        for process in self.hist_sum.totals().keys().map(|(p, _)| p.as_str()).chain(self.requests.series_processes()) {
            r.processes.note_if_new(process.to_string(), now);
        }
        if self.requests.has_retransmits() {
            for (process, peer) in self.requests.peer_labels() {
                r.peers.note((process.to_owned(), peer.to_owned()), now);
            }
        }
        for live in [&mut r.groups, &mut r.loop_threads, &mut r.peers] {
            live.expire(now);
        }
        r.processes.expire(now);
        let group_live = |p: &String, g: &String| r.groups.is_live(&(p.clone(), g.clone()));
        self.offcpu.retain_labels(|(p, g, _)| group_live(p, g));
        self.long_blocks.retain_labels(|(p, g, _)| group_live(p, g));
        self.loop_blocked.retain_labels(|(p, t, _)| r.loop_threads.is_live(&(p.clone(), t.clone())));
        self.hist_count.retain_labels(|(p, _, _)| r.processes.is_live(p.as_str()));
        self.hist_sum.retain_labels(|(p, _)| r.processes.is_live(p.as_str()));
        self.jvm.retain_processes(|p| r.processes.is_live(p));
        self.requests.retain_series(
            |p| r.processes.is_live(p),
            |p, peer| r.processes.is_live(p) && r.peers.is_live(&(p.to_owned(), peer.to_owned())),
        );
        for stack_id in r.stale_stacks(now) {
            self.probes.remove_stack(stack_id)?;
        }
        // A gone gateway's parsed binary (3 MiB of names for the reference gateway) is not kept.
        self.symbolizer.forget_unused(now, STACK_KEEP);
        r.trimmer.maybe_trim(now);
        Ok(())
    }
}

impl Collector {
    /// How long blocks and iterations stay evidence: twice the longest window a detector judges.
    fn evidence_keep_ns(&self) -> u64 {
        let d = &self.detect;
        let longest = d.event_loop.window.max(d.pool.window).max(d.jvm.window);
        u64::try_from((longest * 2).max(MIN_EVIDENCE_KEEP).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_entries_leave_and_their_room_is_given_back() {
        let mut queue: VecDeque<u64> = (0..20_000).collect();
        drop_older(&mut queue, 19_990, |at| *at);
        assert_eq!(queue.iter().copied().collect::<Vec<_>>(), (19_990..20_000).collect::<Vec<_>>());
        assert!(queue.capacity() <= 1024, "room for {} kept for 10 entries", queue.capacity());
        drop_older(&mut queue, 0, |at| *at);
        assert_eq!(queue.len(), 10, "nothing older than the oldest kept");
    }

    #[test]
    fn stacks_not_named_for_a_while_are_stale() {
        let t0 = Instant::now();
        let mut r = Retention::default();
        r.note_stack(7, t0);
        r.note_stack(9, t0);
        r.note_stack(9, t0 + Duration::from_secs(20));
        assert!(r.stale_stacks(t0 + Duration::from_secs(29)).is_empty());
        assert_eq!(r.stale_stacks(t0 + STACK_KEEP), [7]);
        assert_eq!(r.stale_stacks(t0 + STACK_KEEP + Duration::from_secs(1)), Vec::<u32>::new(), "7 is forgotten");
        assert_eq!(r.stale_stacks(t0 + Duration::from_secs(50)), [9]);
    }
}
