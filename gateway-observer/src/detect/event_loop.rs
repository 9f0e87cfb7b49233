//! `EventLoopBlocked`: a thread that idles in epoll/poll/select (an event loop, found without
//! configuration) spends time off the CPU for another reason — a timed futex wait, a sleep, a
//! blocking socket read, disk — longer than a threshold in one block, or for more than a share of
//! a window. While it is blocked, nothing else it serves is served.
//!
//! Untimed futex waits count when `super::untimed` says they were not the runtime idling (tokio,
//! Go and libuv workers idle that way; Netty, JDK selector, asyncio and Node loops never do).

use std::time::{Duration, Instant};

use gateway_observer_common::reason;

use std::collections::{HashMap, HashSet};

use super::loop_threads::{EventLoopConfig, event_loops};
use super::untimed::{self, UntimedWait};
use crate::state::{
    history::{History, ThreadInfo, WindowDelta},
    loop_baselines::LoopBaselines,
    thread_memory::ThreadsNow,
};
use crate::{
    api::v1,
    clock::Tick,
    detect::{Config, finding::Finding},
    events::Block,
    reason::reason_label,
    syscalls,
};

/// Reasons that mean "blocked in work" for an event loop.
pub const BLOCKING_REASONS: [u32; 8] = crate::state::history::LOOP_BLOCKING_REASONS;

/// One blocked event loop, with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockedLoop {
    pub thread: ThreadInfo,
    /// The reason with the most blocked time in the window.
    pub reason: u32,
    pub blocked_ns: u64,
    pub window: Duration,
    pub share: f64,
    pub blocks: BlockStats,
    /// Blocked nanoseconds per reason, for the evidence.
    pub by_reason: Vec<(&'static str, u64)>,
    /// Still blocked in the last tick (a blocked share over the threshold, or a long block that
    /// ended in it), not only earlier in the window.
    pub active: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// Blocks past the kernel's event threshold in the window, in blocking reasons.
    pub count: u32,
    pub over_single_threshold: u32,
    pub longest_ns: u64,
    /// The futex word most blocks waited on, if any.
    pub futex_uaddr: Option<u64>,
    /// The syscall the longest block was in.
    pub syscall: Option<&'static str>,
    /// The user stack of the longest block that has one.
    pub stack_id: Option<u32>,
}

/// `EventLoopBlocked` findings now: event loops blocked over the window, or by one long block.
pub fn detect(state: &ThreadsNow, config: &Config, tick: Tick) -> Vec<Finding> {
    let memory = state.memory;
    let found =
        blocked_loops(&memory.history, state.blocks, tick.at, tick.mono_ns, &config.event_loop, &memory.baselines);
    found.iter().map(|found| finding(found, &config.event_loop)).collect()
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The finding of a blocked loop, with its evidence; the tick adds its stacks.
pub(crate) fn finding(found: &BlockedLoop, config: &EventLoopConfig) -> Finding {
    let evidence = v1::EventLoopBlocked {
        reason: reason_label(found.reason).into(),
        thread: found.thread.name.clone(),
        tid: found.thread.tid,
        window_seconds: found.window.as_secs_f64(),
        blocked_seconds: secs(found.blocked_ns),
        blocked_share: found.share,
        blocked_seconds_by_reason: found.by_reason.iter().map(|(reason, ns)| ((*reason).into(), secs(*ns))).collect(),
        blocks_over_event_threshold: found.blocks.count,
        blocks_over_single_threshold: found.blocks.over_single_threshold,
        single_block_threshold_seconds: config.single_block.as_secs_f64(),
        longest_block_seconds: secs(found.blocks.longest_ns),
        syscall: found.blocks.syscall.map(Into::into),
        futex_word: found.blocks.futex_uaddr.map(crate::opaque::futex_word),
        stack: None,
        stack_source: None,
        java_stack: None,
        java_stack_unavailable: None,
        requests: None,
        refusals: None,
    };
    Finding {
        pid: found.thread.tgid,
        comm: found.thread.comm.clone(),
        subject: found.thread.name.clone(),
        summary: found.summary(config),
        evidence: v1::Evidence::EventLoopBlocked(evidence),
        active: found.active,
        held_for: Duration::ZERO,
        stack_id: found.blocks.stack_id,
    }
}

/// Blocked event loops now. `now_mono_ns` is CLOCK_MONOTONIC, the clock of `blocks`. Untimed
/// futex waits count as blocking as `super::untimed` decides, with what `baselines` learned.
pub fn blocked_loops(
    history: &History,
    blocks: &[Block],
    now: Instant,
    now_mono_ns: u64,
    config: &EventLoopConfig,
    baselines: &LoopBaselines,
) -> Vec<BlockedLoop> {
    let window_start_ns = now_mono_ns.saturating_sub(u64::try_from(config.window.as_nanos()).unwrap_or(u64::MAX));
    let judge = BlockJudge::new(history, blocks, now, config, baselines);
    let paused = &judge.paused;
    let blocking = |thread: &ThreadInfo, b: &Block| judge.blocking(thread, b);
    let mut found = Vec::new();
    for thread in judge.loops.values().copied() {
        let Some(mut delta) = history.delta(thread.tid, config.window).filter(|d| d.elapsed * 2 >= config.window)
        else {
            continue; // too little history yet to judge
        };
        let mine: Vec<&Block> =
            blocks.iter().filter(|b| b.tid == thread.tid && b.timestamp_ns >= window_start_ns).collect();
        for b in mine.iter().filter(|b| b.reason != reason::FUTEX && paused.contains(&(b.tid, b.timestamp_ns))) {
            if let Some(ns) = delta.offcpu_ns.get_mut(b.reason as usize) {
                *ns = ns.saturating_sub(b.wait_ns);
            }
        }
        let untimed_ns = untimed_blocking_ns(thread, &delta, &mine, &blocking, baselines);
        let by_reason: Vec<(u32, u64)> = BLOCKING_REASONS
            .iter()
            .map(|&r| (r, delta.ns(r)))
            .chain([(reason::FUTEX, untimed_ns)])
            .filter(|(_, ns)| *ns > 0)
            .collect();
        let blocked_ns: u64 = by_reason.iter().map(|(_, ns)| ns).sum();
        let share = blocked_ns as f64 / delta.elapsed.as_nanos().max(1) as f64;
        let stats = block_stats(mine.iter().copied().filter(|b| blocking(thread, b)), config.single_block);
        if share < config.blocked_share && stats.over_single_threshold == 0 {
            continue;
        }
        let reason = by_reason.iter().max_by_key(|(_, ns)| *ns).map_or(reason::OTHER, |(r, _)| *r);
        let active = blocked_in_last_tick(history, thread, &mine, now_mono_ns, config, &blocking, baselines);
        found.push(BlockedLoop {
            thread: thread.clone(),
            reason,
            blocked_ns,
            window: delta.elapsed,
            share,
            blocks: stats,
            by_reason: by_reason.iter().map(|(r, ns)| (reason_label(*r), *ns)).collect(),
            active,
        });
    }
    found.sort_by_key(|a| (a.thread.tgid, a.thread.tid));
    found
}

/// Whether a loop's long block was blocking, with what the untimed rules need.
struct BlockJudge<'a> {
    history: &'a History,
    loops: HashMap<u32, &'a ThreadInfo>,
    /// Blocks (tid, end) that ended in a stop-the-world pause.
    paused: HashSet<(u32, u64)>,
    baselines: &'a LoopBaselines,
}

impl<'a> BlockJudge<'a> {
    fn new(
        history: &'a History,
        blocks: &[Block],
        now: Instant,
        config: &'a EventLoopConfig,
        baselines: &'a LoopBaselines,
    ) -> Self {
        let loops: HashMap<u32, &ThreadInfo> = event_loops(history, now, config).map(|t| (t.tid, t)).collect();
        // Pauses matter only in processes with loops to judge: the rest's blocks (thousands a
        // second from a process of napping threads) are not searched.
        let with_loops: HashSet<u32> = loops.values().map(|t| t.tgid).collect();
        let paused = untimed::paused_blocks(blocks.iter().filter(|b| with_loops.contains(&b.tgid)), |tgid, tid| {
            history.thread(tgid, tid).map(|t| t.name.as_str())
        });
        Self { history, loops, paused, baselines }
    }

    /// A stop-the-world pause (a JVM safepoint) is not the loop's block, whatever the wait's
    /// kind; an untimed wait blocks as `untimed::classify` decides.
    fn blocking(&self, thread: &ThreadInfo, b: &Block) -> bool {
        let group_of = |tgid, tid| self.history.thread(tgid, tid).map(|t| t.group.as_str());
        (BLOCKING_REASONS.contains(&b.reason) && !self.paused.contains(&(b.tid, b.timestamp_ns)))
            || (b.reason == reason::FUTEX
                && untimed::classify(thread, b, &self.loops, &self.paused, self.baselines, group_of)
                    == UntimedWait::Blocking)
    }
}

/// Long untimed waits of event loops that ended after `since_ns` and were blocking, as (tid,
/// wait ns): the untimed part of `event_loop_blocked_seconds_total`, which the per-reason totals
/// cannot give (they hold idle parking too).
pub fn untimed_blocks(
    history: &History,
    blocks: &[Block],
    now: Instant,
    since_ns: u64,
    config: &EventLoopConfig,
    baselines: &LoopBaselines,
) -> Vec<(u32, u64)> {
    let judge = BlockJudge::new(history, blocks, now, config, baselines);
    blocks
        .iter()
        .filter(|b| b.reason == reason::FUTEX && b.timestamp_ns > since_ns)
        .filter_map(|b| {
            let thread = judge.loops.get(&b.tid)?;
            judge.blocking(thread, b).then_some((b.tid, b.wait_ns))
        })
        .collect()
}

/// Untimed futex time over `delta` that was blocking: long waits (`blocks`, this thread's) whose
/// waker was not a sibling loop and that were not a pause, plus the shorter waits when the thread
/// is a poll-only loop. At most the untimed time the totals hold.
fn untimed_blocking_ns(
    thread: &ThreadInfo,
    delta: &WindowDelta,
    blocks: &[&Block],
    blocking: &dyn Fn(&ThreadInfo, &Block) -> bool,
    baselines: &LoopBaselines,
) -> u64 {
    let untimed = delta.ns(reason::FUTEX);
    let long: Vec<&&Block> = blocks.iter().filter(|b| b.reason == reason::FUTEX).collect();
    let long_blocking: u64 = long.iter().filter(|b| blocking(thread, b)).map(|b| b.wait_ns).sum();
    let short = if baselines.short_waits_block(thread) {
        untimed.saturating_sub(long.iter().map(|b| b.wait_ns).sum())
    } else {
        0
    };
    (long_blocking + short).min(untimed)
}

/// Whether the loop was blocked in the last tick: over the share threshold in it (an open span
/// counts as it grows), or a block past the single-block threshold ended in it.
fn blocked_in_last_tick(
    history: &History,
    thread: &ThreadInfo,
    blocks: &[&Block],
    now_mono_ns: u64,
    config: &EventLoopConfig,
    blocking: &dyn Fn(&ThreadInfo, &Block) -> bool,
    baselines: &LoopBaselines,
) -> bool {
    let Some(last) = history.last_delta(thread.tid) else { return false };
    let tick_start_ns = now_mono_ns.saturating_sub(u64::try_from(last.elapsed.as_nanos()).unwrap_or(u64::MAX));
    let in_tick: Vec<&Block> = blocks.iter().copied().filter(|b| b.timestamp_ns >= tick_start_ns).collect();
    let blocked_ns = BLOCKING_REASONS.iter().map(|r| last.ns(*r)).sum::<u64>()
        + untimed_blocking_ns(thread, &last, &in_tick, blocking, baselines);
    if blocked_ns as f64 >= config.blocked_share * last.elapsed.as_nanos() as f64 {
        return true;
    }
    let single_ns = u64::try_from(config.single_block.as_nanos()).unwrap_or(u64::MAX);
    in_tick.iter().any(|b| b.wait_ns >= single_ns && blocking(thread, b))
}

/// Counts of the blocking `blocks` (already filtered).
fn block_stats<'a>(blocks: impl Iterator<Item = &'a Block>, single: Duration) -> BlockStats {
    let single_ns = u64::try_from(single.as_nanos()).unwrap_or(u64::MAX);
    let mut stats = BlockStats::default();
    let mut futexes: Vec<(u64, u32)> = Vec::new();
    for block in blocks {
        stats.count += 1;
        if block.wait_ns >= single_ns {
            stats.over_single_threshold += 1;
        }
        if block.wait_ns > stats.longest_ns {
            stats.longest_ns = block.wait_ns;
            stats.syscall = block.syscall_nr.and_then(|nr| syscalls::name_of(nr as i32));
            stats.stack_id = block.stack_id;
        }
        if block.futex_uaddr != 0 {
            match futexes.iter_mut().find(|(addr, _)| *addr == block.futex_uaddr) {
                Some((_, n)) => *n += 1,
                None => futexes.push((block.futex_uaddr, 1)),
            }
        }
    }
    stats.futex_uaddr = futexes.iter().max_by_key(|(_, n)| *n).map(|(addr, _)| *addr);
    stats
}

impl BlockedLoop {
    /// One line for people: "blocked 71% of the last 5.0s in futex_timed (3 blocks > 50ms, longest 180ms)".
    pub fn summary(&self, config: &EventLoopConfig) -> String {
        format!(
            "event loop blocked {:.0}% of the last {:.1}s in {} ({} blocks > {} ms, longest {} ms)",
            self.share * 100.0,
            self.window.as_secs_f64(),
            reason_label(self.reason),
            self.blocks.over_single_threshold,
            config.single_block.as_millis(),
            self.blocks.longest_ns / 1_000_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32) -> ThreadInfo {
        ThreadInfo::new(tid, 100, "java".into(), format!("reactor-http-nio-{tid}"))
    }

    /// Ten one-second samples of a loop that polls `poll_ms` and blocks `timed_ms` each second.
    fn history_of(tid: u32, poll_ms: u64, timed_ms: u64, futex_ms: u64) -> (History, Instant) {
        let start = Instant::now();
        let mut h = History::new(Duration::from_secs(60));
        for s in 0..=10u64 {
            let mut t = [0u64; reason::COUNT as usize];
            t[reason::POLL as usize] = s * poll_ms * 1_000_000;
            t[reason::FUTEX_TIMED as usize] = s * timed_ms * 1_000_000;
            t[reason::FUTEX as usize] = s * futex_ms * 1_000_000;
            h.record(start + Duration::from_secs(s), thread(tid), t);
        }
        (h, start + Duration::from_secs(10))
    }

    fn block(tid: u32, wait_ms: u64, at_ns: u64, uaddr: u64) -> Block {
        Block {
            tid,
            tgid: 100,
            reason: reason::FUTEX_TIMED,
            syscall_nr: Some(202),
            waker_tid: 0,
            wait_ns: wait_ms * 1_000_000,
            runqueue_ns: 0,
            futex_uaddr: uaddr,
            timestamp_ns: at_ns,
            stack_id: None,
        }
    }

    #[test]
    fn incident_one_a_loop_parked_in_timed_futex_waits() {
        // ~170 µs waits adding up to 0.7 s per second across the loop: 70 % blocked.
        let (h, now) = history_of(2, 200, 700, 0);
        let found = blocked_loops(&h, &[], now, 10_000_000_000, &EventLoopConfig::default(), &LoopBaselines::default());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.reason, reason::FUTEX_TIMED);
        assert!((f.share - 0.7).abs() < 0.01, "{}", f.share);
        assert!(
            f.summary(&EventLoopConfig::default())
                .starts_with("event loop blocked 70% of the last 5.0s in futex_timed")
        );
    }

    #[test]
    fn one_long_block_is_enough() {
        let (h, now) = history_of(3, 900, 8, 0);
        let now_ns = 10_000_000_000;
        let blocks = [block(3, 80, now_ns - 1_000_000_000, 0xdead), block(3, 12, now_ns - 500_000_000, 0xdead)];
        let found = blocked_loops(&h, &blocks, now, now_ns, &EventLoopConfig::default(), &LoopBaselines::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].blocks.over_single_threshold, 1);
        assert_eq!(found[0].blocks.count, 2);
        assert_eq!(found[0].blocks.longest_ns, 80_000_000);
        assert_eq!(found[0].blocks.futex_uaddr, Some(0xdead));
        assert_eq!(found[0].blocks.syscall, Some("futex"));
        // The same block, but older than the window: nothing.
        let old = [block(3, 80, now_ns - 6_000_000_000, 0xdead)];
        assert!(
            blocked_loops(&h, &old, now, now_ns, &EventLoopConfig::default(), &LoopBaselines::default()).is_empty()
        );
    }

    #[test]
    fn a_busy_healthy_loop_and_an_idle_parked_worker_are_quiet() {
        // Polls a lot, blocks 1 %: healthy.
        let (h, now) = history_of(4, 600, 10, 0);
        assert!(
            blocked_loops(&h, &[], now, 10_000_000_000, &EventLoopConfig::default(), &LoopBaselines::default())
                .is_empty()
        );
        // A tokio-style worker: idles in epoll sometimes, parks in untimed futex the rest.
        let (h, now) = history_of(5, 300, 0, 700);
        assert!(
            blocked_loops(&h, &[], now, 10_000_000_000, &EventLoopConfig::default(), &LoopBaselines::default())
                .is_empty()
        );
    }

    #[test]
    fn a_thread_that_never_polls_is_not_judged_as_a_loop_unless_named() {
        let (h, now) = history_of(6, 0, 900, 0);
        assert!(
            blocked_loops(&h, &[], now, 10_000_000_000, &EventLoopConfig::default(), &LoopBaselines::default())
                .is_empty()
        );
        // A loop that blocked before it was ever seen polling: named in the config.
        let named = EventLoopConfig { include: vec!["reactor-http-nio-*".into()], ..EventLoopConfig::default() };
        assert_eq!(blocked_loops(&h, &[], now, 10_000_000_000, &named, &LoopBaselines::default()).len(), 1);
        let excluded = EventLoopConfig { exclude: vec!["reactor-*".into()], ..EventLoopConfig::default() };
        let (h, now) = history_of(7, 200, 700, 0);
        assert!(blocked_loops(&h, &[], now, 10_000_000_000, &excluded, &LoopBaselines::default()).is_empty());
    }

    #[test]
    fn a_block_that_ended_is_remembered_by_the_window_but_not_active() {
        // Blocked 70 % of each second for five seconds, then healthy for two.
        let start = Instant::now();
        let mut h = History::new(Duration::from_secs(60));
        let mut t = [0u64; reason::COUNT as usize];
        for s in 0..=7u64 {
            h.record(start + Duration::from_secs(s), thread(8), t);
            let blocked = if s < 5 { 700 } else { 0 };
            t[reason::FUTEX_TIMED as usize] += blocked * 1_000_000;
            t[reason::POLL as usize] += (1000 - blocked) * 1_000_000;
        }
        let now = start + Duration::from_secs(7);
        let found = blocked_loops(&h, &[], now, 7_000_000_000, &EventLoopConfig::default(), &LoopBaselines::default());
        assert_eq!(found.len(), 1, "the 5 s window still holds 3 blocked seconds");
        assert!(!found[0].active, "but the loop was not blocked in the last tick");
        let (h, now) = history_of(9, 200, 700, 0);
        assert!(
            blocked_loops(&h, &[], now, 10_000_000_000, &EventLoopConfig::default(), &LoopBaselines::default())[0]
                .active
        );
    }

    #[test]
    fn untimed_waits_count_when_another_thread_ended_them() {
        // Polls 300 ms and waits untimed 700 ms a second: a `future.get()` on a Redis client's
        // thread (tid 77, not a loop) or a tokio-style park handed over by a sibling loop.
        let (mut h, now) = history_of(2, 300, 0, 700);
        let sibling = ThreadInfo::new(3, 100, "java".into(), "reactor-http-nio-3".into());
        let mut polls = [0u64; reason::COUNT as usize];
        h.record(now - Duration::from_secs(1), sibling.clone(), polls);
        polls[reason::POLL as usize] = 1;
        h.record(now, sibling, polls);
        let now_ns = 10_000_000_000;
        let waits = |waker: u32| -> Vec<Block> {
            (1..=4u64)
                .map(|s| Block {
                    reason: reason::FUTEX,
                    waker_tid: waker,
                    wait_ns: 700_000_000,
                    ..block(2, 0, now_ns - s * 1_000_000_000, 0xbeef)
                })
                .collect()
        };
        let config = EventLoopConfig::default();
        let found = blocked_loops(&h, &waits(77), now, now_ns, &config, &LoopBaselines::default());
        assert_eq!(found.len(), 1, "woken by another thread: blocked");
        assert_eq!(found[0].reason, reason::FUTEX);
        assert!(found[0].share > 0.5, "{}", found[0].share);
        assert!(
            blocked_loops(&h, &waits(3), now, now_ns, &config, &LoopBaselines::default()).is_empty(),
            "a sibling loop handed over work: idle"
        );
    }

    #[test]
    fn short_untimed_waits_of_a_worker_whose_siblings_park_for_work_are_idling() {
        // A tokio worker that kept the I/O driver while the gateway idled (it polled alone, tick
        // after tick) parks on its condvar between tasks once load comes: 600 ms a second in
        // waits too short to be reported one by one, so with no waker to judge them by.
        let (h, now) = history_of(1, 400, 0, 600);
        let now_ns = 10_000_000_000;
        let config = EventLoopConfig::default();
        let mut baselines = LoopBaselines::default();
        baselines.seen_polling_alone(1);
        let found = blocked_loops(&h, &[], now, now_ns, &config, &baselines);
        assert_eq!(found.len(), 1, "a poll-only loop whose group never parks (a fast Redis call in a Netty loop)");
        assert!(found[0].share > 0.5 && found[0].active, "{:?}", found[0]);
        // Its sibling was seen parking for work: the group idles that way.
        baselines.seen_parking_for_work(&thread(2));
        let found = blocked_loops(&h, &[], now, now_ns, &config, &baselines);
        assert!(found.is_empty(), "a sibling parks for work: idling, not blocked: {found:?}");
    }

    #[test]
    fn a_client_loop_answering_every_loop_at_once_leaves_them_blocked() {
        // Four loops each wait ~97 ms on one slow Redis, ten times a second; the Redis client's
        // own loop (tid 77, same process, another group) completes the four calls within a
        // millisecond each time. Blocked, whether the loops wait with a timeout or without.
        for waits in [reason::FUTEX, reason::FUTEX_TIMED] {
            let start = Instant::now();
            let mut h = History::new(Duration::from_secs(60));
            let client = ThreadInfo::new(77, 100, "java".into(), "lettuce-nioEventLoop-4-1".into());
            for s in 0..=10u64 {
                let mut t = [0u64; reason::COUNT as usize];
                t[reason::POLL as usize] = s * 100_000_000;
                t[waits as usize] = s * 900_000_000;
                for tid in 2..=5 {
                    h.record(start + Duration::from_secs(s), thread(tid), t);
                }
                let mut polls = [0u64; reason::COUNT as usize];
                polls[reason::POLL as usize] = s * 990_000_000;
                h.record(start + Duration::from_secs(s), client.clone(), polls);
            }
            let now = start + Duration::from_secs(10);
            let now_ns = 10_000_000_000;
            let blocks: Vec<Block> = (1..=40u64)
                .flat_map(|i| {
                    (2..=5u32).map(move |tid| Block {
                        reason: waits,
                        waker_tid: 77,
                        wait_ns: 97_000_000,
                        ..block(tid, 0, now_ns - i * 100_000_000 + u64::from(tid) * 100_000, 0xbeef)
                    })
                })
                .collect();
            let found = blocked_loops(&h, &blocks, now, now_ns, &EventLoopConfig::default(), &LoopBaselines::default());
            let tids: Vec<u32> = found.iter().map(|f| f.thread.tid).collect();
            assert_eq!(tids, [2, 3, 4, 5], "reason {waits}");
            for f in &found {
                assert_eq!(f.reason, waits);
                assert!(f.share > 0.7 && f.active, "reason {waits}: {f:?}");
            }
        }
    }

    #[test]
    fn evidence_names_the_thread_reason_and_futex() {
        let found = crate::detect::evidence_golden::blocked(Some("futex"), Some(0x7f00_1234));
        let f = finding(&found, &EventLoopConfig::default());
        assert_eq!(f.id(), "EventLoopBlocked/10/reactor-http-nio-2");
        let v1::Evidence::EventLoopBlocked(evidence) = &f.evidence else { panic!("{f:?}") };
        assert_eq!(evidence.reason, "futex_timed");
        assert_eq!(evidence.futex_word, Some(crate::opaque::futex_word(0x7f00_1234)), "no raw address");
        assert_eq!(evidence.blocked_share, 0.71);
        assert!(f.summary.contains("71%"), "{}", f.summary);
    }
}
