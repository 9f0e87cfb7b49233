//! What is learned about each event loop's idling, tick after tick, for `detect::untimed` to tell
//! an untimed futex wait that blocks a loop from one that is how its runtime idles: whether a loop
//! has been seen idling in poll alone for a few ticks (a poll-only loop: its short untimed waits
//! block it), whether a sibling loop has handed it work from a parked wait (it parks for work,
//! and so does its thread group), and the futex words it parked on then (its idle words). The
//! collector updates it in its state phase, before the detectors run; the detectors only read it.

use std::collections::{HashMap, HashSet};

use gateway_observer_common::reason;

use crate::events::Block;
use crate::state::history::{History, ThreadInfo};

/// Ticks idling in poll without untimed waits that make a thread a poll-only loop.
const POLL_ONLY_TICKS: u32 = 3;
/// A tick counts when at least this share of it was idle in poll...
const POLL_ONLY_MIN_POLL_SHARE: f64 = 0.10;
/// ...and at most this share in untimed futex waits (a JVM safepoint parks a running Java thread
/// for well under a millisecond).
const POLL_ONLY_MAX_UNTIMED_SHARE: f64 = 0.02;

/// Idle words kept per thread: a runtime worker parks on one word of its own (tokio's parker,
/// Go's `m.park`); a second slot keeps a word it moved to without dropping the first at once.
const IDLE_WORDS: usize = 2;

#[derive(Debug, Default, Clone, Copy)]
struct Baseline {
    poll_only_ticks: u32,
    parks_for_work: bool,
    /// Futex words a sibling loop woke it from, newest first; 0 is an empty slot.
    idle_words: [u64; IDLE_WORDS],
}

impl Baseline {
    fn learn_idle_word(&mut self, uaddr: u64) {
        if uaddr != 0 && !self.idle_words.contains(&uaddr) {
            self.idle_words.rotate_right(1);
            self.idle_words[0] = uaddr;
        }
    }
}

/// What is learned about each event loop's idling, tick after tick.
#[derive(Debug, Default)]
pub struct LoopBaselines {
    threads: HashMap<u32, Baseline>,
    /// (tgid, thread group) of loops seen parking for work.
    groups_parking: HashSet<(u32, String)>,
    /// Blocks up to this timestamp were learned from.
    learned_until_ns: u64,
}

impl LoopBaselines {
    /// Learns from the last tick of every event loop (`loops`, the event loops now, by tid) and
    /// from the blocks not seen yet.
    pub fn learn(&mut self, history: &History, loops: &HashMap<u32, &ThreadInfo>, blocks: &[Block]) {
        for &tid in loops.keys() {
            let Some(last) = history.last_delta(tid) else { continue };
            if last.share(&[reason::POLL]) >= POLL_ONLY_MIN_POLL_SHARE
                && last.share(&[reason::FUTEX]) <= POLL_ONLY_MAX_UNTIMED_SHARE
            {
                let baseline = self.threads.entry(tid).or_default();
                baseline.poll_only_ticks = baseline.poll_only_ticks.saturating_add(1);
            }
        }
        let mut newest = self.learned_until_ns;
        for block in blocks.iter().filter(|b| b.timestamp_ns > self.learned_until_ns && b.reason == reason::FUTEX) {
            newest = newest.max(block.timestamp_ns);
            if let Some(thread) = loops.get(&block.tid)
                && woken_by_sibling_loop(thread, block.waker_tid, loops)
            {
                let baseline = self.threads.entry(block.tid).or_default();
                baseline.parks_for_work = true;
                baseline.learn_idle_word(block.futex_uaddr);
                self.groups_parking.insert((thread.tgid, thread.group.clone()));
            }
        }
        self.learned_until_ns = newest;
    }

    /// Whether the thread's untimed waits too short to be reported one by one count as blocking:
    /// a poll-only loop, unless it or a loop of its group was seen parking for work. A tokio
    /// runtime's idle worker that keeps the I/O driver idles in epoll alone, tick after tick,
    /// while its siblings park on their condvars; once load comes it parks there too, for
    /// microseconds at a time: idling, like its siblings, not blocking.
    pub fn short_waits_block(&self, thread: &ThreadInfo) -> bool {
        !self.group_parks_for_work(thread)
            && self.threads.get(&thread.tid).is_some_and(|b| !b.parks_for_work && b.poll_only_ticks >= POLL_ONLY_TICKS)
    }

    /// Whether `uaddr` is a futex word the thread parked on idle, woken by a sibling loop: a
    /// wait there is its runtime's idle park whoever ends it (a pool thread finishing a job the
    /// worker's task awaits wakes it there too), never a lock or a result it blocks on.
    pub fn idles_on(&self, tid: u32, uaddr: u64) -> bool {
        uaddr != 0 && self.threads.get(&tid).is_some_and(|b| b.idle_words.contains(&uaddr))
    }

    /// Whether loops of this thread's group have been seen parking for work.
    pub fn group_parks_for_work(&self, thread: &ThreadInfo) -> bool {
        self.groups_parking.contains(&(thread.tgid, thread.group.clone()))
    }

    pub fn forget(&mut self, tid: u32) {
        self.threads.remove(&tid);
        crate::heap::shrink_sparse_map(&mut self.threads);
    }

    /// Keeps only the groups of processes still followed.
    pub fn retain_processes(&mut self, alive: impl Fn(u32) -> bool) {
        self.groups_parking.retain(|(tgid, _)| alive(*tgid));
    }

    /// As if `tid` had been seen idling in poll alone for enough ticks.
    #[cfg(test)]
    pub(crate) fn seen_polling_alone(&mut self, tid: u32) {
        self.threads.entry(tid).or_default().poll_only_ticks = POLL_ONLY_TICKS;
    }

    /// What `learn` records once a sibling loop woke `thread`.
    #[cfg(test)]
    pub(crate) fn seen_parking_for_work(&mut self, thread: &ThreadInfo) {
        self.threads.entry(thread.tid).or_default().parks_for_work = true;
        self.groups_parking.insert((thread.tgid, thread.group.clone()));
    }

    #[cfg(test)]
    pub(crate) fn knows_a_group_parking(&self) -> bool {
        !self.groups_parking.is_empty()
    }
}

/// Whether `waker` is another event loop (among `loops`) of `thread`'s process and thread group:
/// one loop handing another work.
pub fn woken_by_sibling_loop(thread: &ThreadInfo, waker: u32, loops: &HashMap<u32, &ThreadInfo>) -> bool {
    loops.get(&waker).is_some_and(|w| w.tid != thread.tid && w.tgid == thread.tgid && w.group == thread.group)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn info(tid: u32, name: &str) -> ThreadInfo {
        ThreadInfo::new(tid, 100, "java".into(), name.into())
    }

    /// A 50 ms untimed futex wait of `tid` (process 100) ended by `waker` at `at_ns`.
    pub(crate) fn untimed(tid: u32, waker: u32, at_ns: u64) -> Block {
        Block {
            tid,
            tgid: 100,
            reason: reason::FUTEX,
            syscall_nr: Some(202),
            waker_tid: waker,
            wait_ns: 50_000_000,
            runqueue_ns: 0,
            futex_uaddr: 0x10,
            timestamp_ns: at_ns,
            stack_id: None,
        }
    }

    #[test]
    fn short_waits_block_only_in_a_loop_seen_idling_in_poll_alone() {
        let t0 = Instant::now();
        let mut history = History::new(Duration::from_secs(60));
        let mut baselines = LoopBaselines::default();
        let mut totals = [0u64; reason::COUNT as usize];
        let threads = [info(1, "nioEventLoopGro"), info(2, "tokio-runtime-w"), info(3, "tokio-runtime-w")];
        // All three idle in poll: the event loops.
        let loops: HashMap<u32, &ThreadInfo> = threads.iter().map(|t| (t.tid, t)).collect();
        for s in 0..=4u64 {
            totals[reason::POLL as usize] += 600_000_000;
            for thread in &threads {
                history.record(t0 + Duration::from_secs(s), thread.clone(), totals);
            }
            baselines.learn(&history, &loops, &[]);
        }
        assert!(baselines.short_waits_block(&threads[0]), "idled in poll alone for four ticks");
        assert!(baselines.short_waits_block(&threads[2]));
        // A worker handed work by a sibling parks for work: its short waits are idling too, and
        // so are its group's (the worker that kept the I/O driver, idling in poll alone); a
        // loop of another group keeps its baseline.
        baselines.learn(&history, &loops, &[untimed(2, 3, 10)]);
        assert!(!baselines.short_waits_block(&threads[1]));
        assert!(!baselines.short_waits_block(&threads[2]), "a sibling parks for work");
        assert!(baselines.short_waits_block(&threads[0]), "another group");
        baselines.forget(1);
        assert!(!baselines.short_waits_block(&threads[0]));
    }
}
