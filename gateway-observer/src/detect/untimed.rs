//! Untimed futex waits in event loops: blocking, or how the runtime idles?
//!
//! tokio, Go and libuv workers idle in untimed futex waits, woken by a sibling worker when work
//! comes; a Netty, JDK selector, asyncio or Node loop idles only in epoll/poll/select, so an
//! untimed wait there is a `future.get()`, a `join()`, Reactor's `block()`, a contended
//! `synchronized` or lock: blocking. No per-runtime configuration tells them apart; three signals
//! do, each available at once or after a few healthy seconds:
//! - who woke a long wait (the kernel reports the waker of every wait past the block threshold):
//!   a sibling loop (same process, same thread group, itself a loop) handing over work means the
//!   waiter was idle, and marks the thread, and its group, as ones that park for work for good;
//!   in such a group, a wake by any sibling is a hand-over too (Go's Ms all poll at times, and
//!   the one waking a parked M may not have polled lately), and so it is for a loop not yet seen
//!   idling in poll alone (an observer that just attached to Go); any other waker (a Redis client's I/O
//!   thread, the thread that held the lock, a timer thread) means it was blocked on that thread's
//!   work. This needs no history: an observer attached mid-incident sees it at the first long
//!   wait;
//! - the futex word: a worker parks idle on a word of its own (tokio's parker, Go's `m.park`),
//!   learned from waits a sibling loop ended. A wait on that word is idling whoever ends it: a
//!   tokio worker whose task awaits a job on a thread pool is woken there by the pool thread
//!   that finishes the job. A lock, a `join()` or a `future.get()` waits on another word;
//! - a stop-the-world pause: a wait HotSpot's `VM Thread` ended (it ends every safepoint and
//!   stop-the-world collection, releasing the threads it stopped) is a pause, not a loop's block,
//!   and so is a wait the pause covered nearly all of, whoever ended it (a worker the pause
//!   stopped, releasing a lock the loop waited on).
//!   The waker is the real one (`sched_waking` runs in its context), so how many threads one
//!   waker released at once says nothing: a Redis client's I/O loop answering the calls of every
//!   gateway loop at once (all waiting on one slow Redis) releases them within microseconds,
//!   and that fan-out is the incident itself;
//! - a baseline for short waits (under the block threshold, so without a waker): a thread seen
//!   idling in poll for several ticks with no untimed waits is a poll-only loop, and its short
//!   untimed waits count as blocking (a fast Redis call inside the loop). Until it has been seen
//!   that way, or once it or a loop of its group has parked for work, they do not (a tokio
//!   worker that kept the I/O driver while idle polls alone, but its group parks for work).

use std::collections::{HashMap, HashSet};

use gateway_observer_common::block_detail;

use crate::events::Block;
use crate::state::{
    history::ThreadInfo,
    loop_baselines::{LoopBaselines, woken_by_sibling_loop},
};

/// Threads the VM thread released within this long of each other were stopped by one pause.
const PAUSE_RELEASE_SPREAD_NS: u64 = 2_000_000;

/// What a long untimed wait of an event loop was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UntimedWait {
    /// Idle: a sibling loop handed it work.
    Idle,
    /// Blocked on another thread's work.
    Blocking,
    /// Stopped with the rest of its process (a JVM safepoint or GC).
    Pause,
}

/// What a long untimed wait of `thread`, an event loop, was; `loops` are the event loops now and
/// `paused` the blocks that ended in a stop-the-world pause (`paused_blocks`). `group_of`
/// names the thread group of a thread of the process (tgid, tid), if it is followed.
pub fn classify<'a>(
    thread: &ThreadInfo,
    block: &Block,
    loops: &HashMap<u32, &ThreadInfo>,
    paused: &HashSet<(u32, u64)>,
    baselines: &LoopBaselines,
    group_of: impl Fn(u32, u32) -> Option<&'a str>,
) -> UntimedWait {
    let woken_by_sibling =
        || block.waker_tid != thread.tid && group_of(thread.tgid, block.waker_tid) == Some(thread.group.as_str());
    if paused.contains(&(block.tid, block.timestamp_ns)) {
        UntimedWait::Pause
    } else if baselines.idles_on(thread.tid, block.futex_uaddr)
        || woken_by_sibling_loop(thread, block.waker_tid, loops)
        || (woken_by_sibling() && !baselines.short_waits_block(thread))
    {
        UntimedWait::Idle
    } else {
        UntimedWait::Blocking
    }
}

/// HotSpot's thread that runs every safepoint and stop-the-world collection: what it wakes was
/// stopped with the rest of the JVM, even when it stopped only one thread.
const HOTSPOT_VM_THREAD: &str = "VM Thread";

/// Its name, or the distinct one a second JVM's gets (`VM Thread#2`, see `state::threads`).
fn is_hotspot_vm_thread(name: &str) -> bool {
    name.strip_prefix(HOTSPOT_VM_THREAD).is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
}

/// The long blocks the blocked-loop detector needs one by one, as tid → `block_detail::*`: each
/// event loop's own (`loops`), and those HotSpot's VM thread ends in a process with loops (its
/// pause releases, which tell a pause from a loop's block). `threads` are every followed thread.
pub fn block_detail<'a>(
    loops: impl IntoIterator<Item = &'a ThreadInfo>,
    threads: impl IntoIterator<Item = &'a ThreadInfo>,
) -> HashMap<u32, u8> {
    let mut detail = HashMap::new();
    let mut with_loops = HashSet::new();
    for thread in loops {
        detail.insert(thread.tid, block_detail::LOOP);
        with_loops.insert(thread.tgid);
    }
    if !with_loops.is_empty() {
        for thread in threads {
            if with_loops.contains(&thread.tgid) && is_hotspot_vm_thread(&thread.name) {
                detail.entry(thread.tid).or_insert(block_detail::PAUSE_WAKER);
            }
        }
    }
    detail
}

/// Threads of one process that its VM thread released together: a stop-the-world pause ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseRelease<'a> {
    pub tgid: u32,
    pub waker_tid: u32,
    /// The waits it ended, oldest end first.
    pub blocks: Vec<&'a Block>,
}

impl PauseRelease<'_> {
    pub fn threads(&self) -> usize {
        self.blocks.iter().map(|b| b.tid).collect::<HashSet<u32>>().len()
    }
}

/// Releases that ended a stop-the-world pause: HotSpot's VM thread of the same process ending
/// waits, those within `PAUSE_RELEASE_SPREAD_NS` of each other as one release. `name_of` names
/// a thread of a process (tgid, tid) if it is followed.
///
/// No other waker ends a pause, however many threads it releases at once: the kernel reports
/// the real waker, and one that wakes several threads together is handing them results (a Redis
/// client's I/O loop completing every loop's call when the slow reply comes in, a server in
/// another process answering several blocking calls, a dispatcher handing work to idle workers).
pub fn pause_releases<'a, 'n>(
    blocks: impl IntoIterator<Item = &'a Block>,
    name_of: impl Fn(u32, u32) -> Option<&'n str>,
) -> Vec<PauseRelease<'a>> {
    let mut by_waker: HashMap<(u32, u32), Vec<&Block>> = HashMap::new();
    for block in blocks.into_iter().filter(|b| b.waker_tid != 0) {
        by_waker.entry((block.tgid, block.waker_tid)).or_default().push(block);
    }
    let mut releases = Vec::new();
    for ((tgid, waker_tid), mut released) in by_waker {
        if !name_of(tgid, waker_tid).is_some_and(is_hotspot_vm_thread) {
            continue;
        }
        released.sort_by_key(|b| b.timestamp_ns);
        let mut start = 0;
        while start < released.len() {
            let first = released[start].timestamp_ns;
            let end = released[start..]
                .iter()
                .position(|b| b.timestamp_ns > first + PAUSE_RELEASE_SPREAD_NS)
                .map_or(released.len(), |n| start + n);
            releases.push(PauseRelease { tgid, waker_tid, blocks: released[start..end].to_vec() });
            start = end;
        }
    }
    releases
}

/// How much of a wait may lie outside a pause for the wait to be the pause's: less than the
/// shortest block the loop detector names on its own (50 ms), so nothing it would have named
/// is hidden.
const OUTSIDE_PAUSE_SLACK_NS: u64 = 20_000_000;

/// Blocks (as (tid, end timestamp)) of a pause (`pause_releases`): those the VM thread ended,
/// stopped with the rest of their process whatever each thread was doing; and those a pause
/// covered all but `OUTSIDE_PAUSE_SLACK_NS` of, whoever ended them. A loop waiting on a lock a
/// worker holds is woken by that worker, after the pause that stopped the worker too: its wait
/// was the pause, not the loop's block.
pub fn paused_blocks<'a, 'n>(
    blocks: impl IntoIterator<Item = &'a Block>,
    name_of: impl Fn(u32, u32) -> Option<&'n str>,
) -> HashSet<(u32, u64)> {
    let blocks: Vec<&Block> = blocks.into_iter().collect();
    let releases = pause_releases(blocks.iter().copied(), name_of);
    let mut paused: HashSet<(u32, u64)> =
        releases.iter().flat_map(|r| r.blocks.iter().map(|b| (b.tid, b.timestamp_ns))).collect();
    for release in &releases {
        let Some(span) = release.span() else { continue };
        for b in blocks.iter().filter(|b| b.tgid == release.tgid) {
            let start = b.timestamp_ns.saturating_sub(b.wait_ns);
            let before = span.start.saturating_sub(start);
            let after = b.timestamp_ns.saturating_sub(span.end);
            let overlaps = start < span.end && b.timestamp_ns > span.start;
            if overlaps && before.saturating_add(after) <= OUTSIDE_PAUSE_SLACK_NS {
                paused.insert((b.tid, b.timestamp_ns));
            }
        }
    }
    paused
}

/// When a pause ran, as far as its release shows: it ended when the VM thread released the first
/// thread, and lasted about as long as the released threads waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseSpan {
    pub start: u64,
    pub end: u64,
}

impl PauseRelease<'_> {
    /// The pause's span, from the median wait of the threads released (the lower one of an even
    /// count): most were stopped at its start, but the VM thread also wakes threads that had
    /// idled for seconds (a service or compiler thread), and taking the longest wait would
    /// stretch a 1 ms safepoint over every loop block of those seconds. A release of one thread
    /// says nothing reliable about how long the pause was: no span.
    pub fn span(&self) -> Option<PauseSpan> {
        if self.threads() < 2 {
            return None;
        }
        let end = self.blocks.first()?.timestamp_ns;
        let mut waits: Vec<u64> = self.blocks.iter().map(|b| b.wait_ns).collect();
        waits.sort_unstable();
        let median = waits[(waits.len() - 1) / 2];
        Some(PauseSpan { start: end.saturating_sub(median), end })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{detect::loop_threads::EventLoopConfig, state::history::History};

    fn info(tid: u32, name: &str) -> ThreadInfo {
        ThreadInfo::new(tid, 100, "java".into(), name.into())
    }

    use crate::state::loop_baselines::tests::untimed;

    /// An untimed wait of `tid` from `start_ms` to `end_ms`, ended by `waker`.
    fn wait(tid: u32, waker: u32, start_ms: u64, end_ms: u64) -> Block {
        Block { wait_ns: (end_ms - start_ms) * 1_000_000, ..untimed(tid, waker, end_ms * 1_000_000) }
    }

    fn loops(threads: &[ThreadInfo]) -> HashMap<u32, &ThreadInfo> {
        threads.iter().map(|t| (t.tid, t)).collect()
    }

    #[test]
    fn a_wait_ended_by_a_sibling_loop_is_idle_and_by_another_thread_blocking() {
        let threads = [info(1, "tokio-runtime-w"), info(2, "tokio-runtime-w"), info(3, "lettuce-epollEv")];
        let loops = loops(&threads);
        let none = HashSet::new();
        let fresh = LoopBaselines::default();
        let name_of = |_, tid| match tid {
            77 => Some("tokio-runtime-w"),
            _ => None,
        };
        let judge = |b: &Block, paused: &HashSet<(u32, u64)>| classify(&threads[0], b, &loops, paused, &fresh, name_of);
        assert_eq!(judge(&untimed(1, 2, 5), &none), UntimedWait::Idle);
        assert_eq!(judge(&untimed(1, 3, 5), &none), UntimedWait::Blocking, "another group");
        assert_eq!(judge(&untimed(1, 77, 5), &none), UntimedWait::Idle, "a sibling, before the loop is known");
        assert_eq!(judge(&untimed(1, 1, 5), &none), UntimedWait::Blocking, "itself");
        let paused = HashSet::from([(1, 5)]);
        assert_eq!(judge(&untimed(1, 3, 5), &paused), UntimedWait::Pause);
    }

    #[test]
    fn in_a_group_seen_parking_for_work_any_sibling_hands_over_work() {
        // Go's Ms: every one polls at times; the one waking a parked M may not have lately.
        let threads = [info(1, "go-gateway"), info(2, "go-gateway")];
        let loops = loops(&threads);
        let mut baselines = LoopBaselines::default();
        let name_of = |_, tid| match tid {
            77 => Some("go-gateway"),
            78 => Some("redis-client"),
            _ => None,
        };
        // A loop seen idling in poll alone for a few ticks: a sibling's wake is blocking it.
        baselines.seen_polling_alone(1);
        let before = classify(&threads[0], &untimed(1, 77, 5), &loops, &HashSet::new(), &baselines, name_of);
        assert_eq!(before, UntimedWait::Blocking);
        // What `learn` records once a sibling loop woke thread 1.
        baselines.seen_parking_for_work(&threads[0]);
        let after = classify(&threads[0], &untimed(1, 77, 5), &loops, &HashSet::new(), &baselines, name_of);
        assert_eq!(after, UntimedWait::Idle);
        let other = classify(&threads[0], &untimed(1, 78, 5), &loops, &HashSet::new(), &baselines, name_of);
        assert_eq!(other, UntimedWait::Blocking, "a thread of another group still blocks it");
    }

    #[test]
    fn a_wait_on_the_word_a_worker_idles_on_is_idle_whoever_ends_it() {
        // A tokio worker whose task awaits a job on a thread pool: the pool thread that finishes
        // the job wakes the worker on its parker, where siblings wake it with work too.
        let threads = [info(1, "gw-worker-0"), info(2, "gw-worker-1"), info(3, "rpc-pool-7")];
        let loops = loops(&threads[..2]);
        let group_of = |_, tid| threads.iter().find(|t| t.tid == tid).map(|t| t.group.as_str());
        let mut baselines = LoopBaselines::default();
        let mut history = History::new(Duration::from_secs(60));
        history.record(Instant::now(), threads[0].clone(), Default::default());
        let parker = untimed(1, 2, 5); // on word 0x10
        baselines.learn(&history, &loops, &[parker]);
        let judge = |b: &Block| classify(&threads[0], b, &loops, &HashSet::new(), &baselines, group_of);
        assert_eq!(judge(&untimed(1, 3, 10)), UntimedWait::Idle, "the pool thread woke the parker");
        let lock = Block { futex_uaddr: 0x20, ..untimed(1, 3, 10) };
        assert_eq!(judge(&lock), UntimedWait::Blocking, "a lock the pool thread held is another word");
        let other_worker = Block { tid: 2, ..untimed(2, 3, 10) };
        let judged = classify(&threads[1], &other_worker, &loops, &HashSet::new(), &baselines, group_of);
        assert_eq!(judged, UntimedWait::Blocking, "idle words are each thread's own");
    }

    #[test]
    fn only_the_vm_thread_ends_a_pause() {
        let ms = 1_000_000;
        let blocks = [
            untimed(1, 9, 100 * ms),
            untimed(2, 9, 100 * ms + ms),
            untimed(3, 9, 100 * ms + ms + ms / 2),
            // The same waker later, alone: a release of its own.
            untimed(1, 9, 300 * ms),
            // One thread released by another waker.
            untimed(4, 8, 500 * ms),
        ];
        let names = |_: u32, tid: u32| match tid {
            9 => Some("VM Thread"),
            8 => Some("GC Thread#0"),
            _ => None,
        };
        let releases = pause_releases(&blocks, names);
        let mut shapes: Vec<(u32, usize)> = releases.iter().map(|r| (r.waker_tid, r.threads())).collect();
        shapes.sort_unstable();
        assert_eq!(shapes, [(9, 1), (9, 3)], "the VM thread's releases, 2 ms apart at most, are one");
        let paused = paused_blocks(&blocks, names);
        assert_eq!(paused, HashSet::from([(1, 100 * ms), (2, 101 * ms), (3, 101 * ms + ms / 2), (1, 300 * ms)]));
        // One thread stopped by the VM thread (a young collection) is paused too, and so it is
        // for a second JVM's (`VM Thread#2`); a thread of that name in another process is not it.
        let second_jvm = |_: u32, tid: u32| (tid == 8).then_some("VM Thread#2");
        assert!(paused_blocks(&blocks[4..5], second_jvm).contains(&(4, 500 * ms)));
        assert!(paused_blocks(&blocks[4..5], |_, _| None).is_empty());
        assert!(paused_blocks(&blocks[4..5], |_, tid: u32| (tid == 8).then_some("VM Thread-ish")).is_empty());
    }

    #[test]
    fn a_loop_woken_by_a_stopped_worker_after_a_pause_was_paused() {
        // A full GC of 400 ms from 100 ms on: the VM thread releases two workers at 500 ms. The
        // dispatcher (5) waited on a lock worker 2 held; worker 2 releases it 3 ms after the GC.
        let ms = 1_000_000;
        let blocks = [
            wait(1, 9, 100, 500),
            wait(2, 9, 101, 500),
            wait(5, 2, 95, 503),
            // Blocked long before the pause began: the loop's own block, the pause inside it.
            wait(6, 2, 10, 503),
            // Woken long after the pause ended.
            wait(7, 2, 120, 700),
            // Another process's wait at the same time.
            Block { tgid: 200, ..wait(8, 2, 100, 503) },
        ];
        let names = |_: u32, tid: u32| (tid == 9).then_some("VM Thread");
        let releases = pause_releases(&blocks, names);
        assert_eq!(releases.len(), 1);
        assert_eq!(releases[0].span(), Some(PauseSpan { start: 101 * ms, end: 500 * ms }));
        let paused = paused_blocks(&blocks, names);
        assert_eq!(paused, HashSet::from([(1, 500 * ms), (2, 500 * ms), (5, 503 * ms)]));
    }

    #[test]
    fn a_long_idle_thread_the_vm_thread_woke_does_not_stretch_a_short_safepoint() {
        // A 2 ms safepoint at 5 s releases two Java threads and a service thread (3) that had
        // idled for 5 s. The loop's 50 ms blocks of those seconds (woken by a completer, 4) were
        // its own, not the safepoint's.
        let ms = 1_000_000;
        let blocks = [
            wait(1, 9, 4_998, 5_000),
            wait(2, 9, 4_998, 5_000),
            wait(3, 9, 0, 5_000),
            wait(5, 4, 2_000, 2_050),
            wait(5, 4, 4_960, 5_010),
        ];
        let names = |_: u32, tid: u32| (tid == 9).then_some("VM Thread");
        let paused = paused_blocks(&blocks, names);
        assert_eq!(paused, HashSet::from([(1, 5_000 * ms), (2, 5_000 * ms), (3, 5_000 * ms)]));
        // One thread released alone (a young collection that stopped one thread) gives no span:
        // only what the VM thread itself woke is paused.
        let alone = [wait(3, 9, 0, 5_000), wait(5, 4, 2_000, 2_050)];
        assert_eq!(paused_blocks(&alone, names), HashSet::from([(3, 5_000 * ms)]));
    }

    #[test]
    fn a_client_loop_completing_every_loops_call_at_once_is_no_pause() {
        // Netty loops each parked in `future.get()` on one slow Redis: when the reply comes in,
        // the Redis client's own loop (lettuce-nioEven, same JVM) completes all four futures
        // within a millisecond. That fan-out is the incident, not a stop-the-world pause.
        let ms = 1_000_000;
        // Four `reactor-http-nio-N` in 15 bytes: one group, distinct labels (`state::threads`).
        let reactor = |tid: u32, name: &str| ThreadInfo { group: "reactor-http-ni".into(), ..info(tid, name) };
        let threads = [
            reactor(1, "reactor-http-ni"),
            reactor(2, "reactor-http-ni#2"),
            reactor(3, "reactor-http-ni#3"),
            reactor(4, "reactor-http-ni#4"),
            info(7, "lettuce-nioEven"),
        ];
        let loops = loops(&threads);
        let mut baselines = LoopBaselines::default();
        for t in 1..=4 {
            baselines.seen_polling_alone(t);
        }
        let released: Vec<Block> = (1..=4u32).map(|tid| untimed(tid, 7, 100 * ms + u64::from(tid) * 100_000)).collect();
        let name_of = |_: u32, tid: u32| threads.iter().find(|t| t.tid == tid).map(|t| t.name.as_str());
        let group_of = |_: u32, tid: u32| threads.iter().find(|t| t.tid == tid).map(|t| t.group.as_str());
        let paused = paused_blocks(&released, name_of);
        assert!(paused.is_empty(), "{paused:?}");
        for (thread, block) in threads.iter().zip(&released) {
            assert_eq!(classify(thread, block, &loops, &paused, &baselines, group_of), UntimedWait::Blocking);
        }
        // Learning from them marks no loop, and no group, as parking for work.
        let history = History::new(Duration::from_secs(60));
        let config = EventLoopConfig::default();
        let loops_now = crate::detect::loop_threads::event_loops(&history, Instant::now(), &config).map(|t| (t.tid, t));
        baselines.learn(&history, &loops_now.collect(), &released);
        assert!(!baselines.knows_a_group_parking());
    }

    #[test]
    fn the_detector_asks_for_loops_blocks_and_the_pauses_of_their_processes_only() {
        let other_jvm = ThreadInfo::new(20, 200, "java".into(), "VM Thread".into());
        let threads = [info(1, "nioEventLoopGroup-2-1"), info(2, "VM Thread"), info(3, "rpc-pool-1"), other_jvm];
        let detail = block_detail([&threads[0]], &threads);
        let expected = HashMap::from([(1, block_detail::LOOP), (2, block_detail::PAUSE_WAKER)]);
        assert_eq!(detail, expected, "the loop, and the VM thread of its process, not another JVM's");
        assert!(block_detail([], &threads).is_empty(), "no loops: nothing one by one");
    }
}
