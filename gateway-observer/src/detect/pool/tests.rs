use super::*;
use crate::state::history::ThreadInfo;

/// Every saturated pool, with default configs; `waiting`: (pid, requests waiting).
fn judge_all(h: &History, now: Instant, now_mono_ns: u64, waiting: &[(u32, usize)]) -> Vec<SaturatedPool> {
    let requests = RequestPressure { waiting: waiting.iter().copied().collect(), ..RequestPressure::default() };
    judge_with(h, now, now_mono_ns, &requests)
}

fn judge_with(h: &History, now: Instant, now_mono_ns: u64, requests: &RequestPressure) -> Vec<SaturatedPool> {
    let loops = crate::detect::loop_threads::EventLoopConfig::default();
    let signals = SleepSignals { requests, timed_waits: &TimedWaits::default() };
    saturated_pools(h, &[], now, now_mono_ns, &PoolConfig::default(), &loops, &signals)
}

/// `n` threads named `name-i`, each second spending `sleep_ms` in sleep and `futex_ms` idle.
fn pool(h: &mut History, start: Instant, tid0: u32, n: u32, name: &str, sleep_ms: u64, futex_ms: u64) {
    for s in 0..=6u64 {
        for i in 0..n {
            let mut t = [0u64; reason::COUNT as usize];
            t[reason::SLEEP as usize] = s * sleep_ms * 1_000_000;
            t[reason::FUTEX as usize] = s * futex_ms * 1_000_000;
            let info = ThreadInfo::new(tid0 + i, 50, "java".into(), format!("{name}-{i}"));
            h.record(start + Duration::from_secs(s), info, t);
        }
    }
}

#[test]
fn incident_two_every_worker_asleep_in_the_rate_limiter() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool(&mut h, start, 1000, 32, "pool-3-thread", 990, 0);
    let now = start + Duration::from_secs(6);
    let found = judge_all(&h, now, 6_000_000_000, &[]);
    assert_eq!(found.len(), 1);
    let p = &found[0];
    assert_eq!(p.group, "pool-3-thread-*");
    assert_eq!(p.threads, 32);
    assert!((p.blocked_share - 0.99).abs() < 0.01, "{}", p.blocked_share);
    assert!(p.cpu_cores < 0.5, "{}", p.cpu_cores);
    assert!(p.summary().contains("mostly sleep"), "{}", p.summary());
}

/// `n` threads of pid 50 named `name-i`, each second spending `ms` in `reason`.
fn pool_in(h: &mut History, start: Instant, n: u32, name: &str, code: u32, ms: u64) {
    for s in 0..=6u64 {
        for i in 0..n {
            let mut t = [0u64; reason::COUNT as usize];
            t[code as usize] = s * ms * 1_000_000;
            let info = ThreadInfo::new(1000 + i, 50, "java".into(), format!("{name}-{i}"));
            h.record(start + Duration::from_secs(s), info, t);
        }
    }
}

#[test]
fn a_fixed_pool_asleep_in_a_rate_limiter_while_requests_wait() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool_in(&mut h, start, 64, "rpc-pool", reason::FUTEX_SLEEP, 995);
    let now = start + Duration::from_secs(6);
    let found = judge_all(&h, now, 6_000_000_000, &[(50, 80)]);
    assert_eq!(found.len(), 1);
    assert!(found[0].active);
    assert_eq!(found[0].waiting_requests, 80);
    let summary = found[0].summary();
    assert!(summary.contains("mostly futex_sleep") && summary.contains("80 requests waiting"), "{summary}");
}

/// Every worker of a thread-per-request pool parked on a `CompletableFuture.get()`, each
/// holding the request it read, while more requests wait unread: the pool is full, not idle.
#[test]
fn untimed_waits_holding_requests_while_requests_queue_are_a_full_pool() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool_in(&mut h, start, 64, "http-nio-8080-exec", reason::FUTEX, 995);
    let now = start + Duration::from_secs(6);
    let held: HashMap<u32, usize> = (1000..1064).map(|tid| (tid, 1)).collect();
    let full = RequestPressure {
        waiting: HashMap::from([(50, 64)]),
        held: held.clone(),
        queued: HashMap::from([(50, 40)]),
        ..RequestPressure::default()
    };
    let found = judge_with(&h, now, 6_000_000_000, &full);
    assert_eq!(found.len(), 1, "a full pool");
    let p = &found[0];
    assert!(p.active);
    assert!((p.blocked_share - 0.995).abs() < 0.01, "{}", p.blocked_share);
    assert_eq!((p.held_requests, p.queued_requests), (64, 40));
    let summary = p.summary();
    assert!(summary.contains("(mostly futex)") && summary.contains("40 waited unread in its sockets"), "{summary}");

    // Nothing queued (an async server's long polls, or spare threads): waiting for work.
    let nothing_queued = RequestPressure { queued: HashMap::new(), ..full.clone() };
    assert!(judge_with(&h, now, 6_000_000_000, &nothing_queued).is_empty());
    // Requests queue behind a blocked event loop, which holds them: the idle pool beside it
    // is not the one that is full.
    let held_elsewhere = RequestPressure {
        waiting: HashMap::from([(50, 64)]),
        held: HashMap::from([(7, 64)]),
        queued: HashMap::from([(50, 40)]),
        ..RequestPressure::default()
    };
    assert!(judge_with(&h, now, 6_000_000_000, &held_elsewhere).is_empty());
    // Half the workers parked on requests they hold, the other half idle: still room.
    let half: HashMap<u32, usize> = (1000..1016).map(|tid| (tid, 1)).collect();
    let quarter = RequestPressure {
        waiting: HashMap::from([(50, 16)]),
        held: half,
        queued: HashMap::from([(50, 40)]),
        ..RequestPressure::default()
    };
    assert!(judge_with(&h, now, 6_000_000_000, &quarter).is_empty(), "16 requests held by 64 parked threads");
}

/// A fixed pool's workers in their first `RateLimiter` sleeps (timed waits none of which has
/// timed out yet), each holding the request it read, while more requests wait unread: full,
/// with no history of how its timed waits end.
#[test]
fn timed_waits_holding_requests_while_requests_queue_are_a_full_pool() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool_in(&mut h, start, 64, "rpc-pool-", reason::FUTEX_TIMED, 990);
    let now = start + Duration::from_secs(6);
    let held: HashMap<u32, usize> = (1000..1064).map(|tid| (tid, 1)).collect();
    let full = RequestPressure {
        waiting: HashMap::from([(50, 64)]),
        held: held.clone(),
        queued: HashMap::from([(50, 3)]),
        ..RequestPressure::default()
    };
    let found = judge_with(&h, now, 6_000_000_000, &full);
    assert_eq!(found.len(), 1, "a full pool");
    assert!(found[0].active && (found[0].blocked_share - 0.99).abs() < 0.01, "{:?}", found[0]);
    // The requests came within the last second: the waits before them may have been idle.
    assert_eq!(found[0].saturated_for, Duration::ZERO, "not dated by requests this young");
    let all_along = RequestPressure { waiting_all_along: full.waiting.clone(), held_all_along: held, ..full.clone() };
    let found = judge_with(&h, now, 6_000_000_000, &all_along);
    assert_eq!(found[0].saturated_for, Duration::from_secs(1), "parked on the same requests all second");
    assert!(found[0].summary().contains("(mostly futex_timed)"), "{}", found[0].summary());
    // The same waits with nothing held: a pool's keep-alive polls for work.
    let idle = RequestPressure { held: HashMap::new(), ..full };
    assert!(judge_with(&h, now, 6_000_000_000, &idle).is_empty());
}

#[test]
fn first_sleeps_count_once_the_groups_timed_waits_all_time_out() {
    // Attached mid-incident: every thread is in its first observed timed wait (futex_timed),
    // and the ones that ended lately all timed out.
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool_in(&mut h, start, 64, "rpc-pool", reason::FUTEX_TIMED, 995);
    let now = start + Duration::from_secs(6);
    let loops = crate::detect::loop_threads::EventLoopConfig::default();
    let requests = RequestPressure { waiting: HashMap::from([(50, 70)]), ..RequestPressure::default() };
    let judge = |waits: &TimedWaits| {
        let signals = SleepSignals { requests: &requests, timed_waits: waits };
        saturated_pools(&h, &[], now, 6_000_000_000, &PoolConfig::default(), &loops, &signals)
    };
    let mut waits = TimedWaits::default();
    for tid in 1000..1004 {
        waits.note(tid, 0, 0, now - Duration::from_secs(1));
        waits.note(tid, 1_000_000_000, 0, now);
    }
    assert_eq!(judge(&waits).len(), 1, "four seconds of timeouts, no wakes: the group sleeps");
    // A keep-alive pool handed work: its timed waits are woken, so they stay waits for work.
    waits.note(1005, 0, 0, now - Duration::from_secs(1));
    waits.note(1005, 0, 30 * 1_000_000_000, now);
    assert!(judge(&waits).is_empty());
}

#[test]
fn an_idle_pool_timing_out_with_no_requests_waiting_is_quiet() {
    // Jetty's minimum threads poll for work with a 60 s idle timeout, forever: timed waits
    // that time out, with nothing waiting on them.
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool_in(&mut h, start, 8, "qtp1234", reason::FUTEX_SLEEP, 999);
    let now = start + Duration::from_secs(6);
    assert!(judge_all(&h, now, 6_000_000_000, &[]).is_empty());
    // A few long requests (long polls) do not make eight idle threads busy.
    assert!(judge_all(&h, now, 6_000_000_000, &[(50, 3)]).is_empty());
    assert_eq!(judge_all(&h, now, 6_000_000_000, &[(50, 4)]).len(), 1, "half as many waiting as asleep");
}

#[test]
fn threads_already_there_at_start_are_not_growth() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool(&mut h, start, 1000, 32, "pool-2-thread", 0, 995);
    let now = start + Duration::from_secs(6);
    assert!(judge_all(&h, now, 6_000_000_000, &[]).is_empty());
}

#[test]
fn an_idle_pool_and_a_small_group_are_quiet() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    pool(&mut h, start, 1000, 32, "pool-1-thread", 0, 995);
    pool(&mut h, start, 2000, 2, "tiny", 1000, 0);
    let now = start + Duration::from_secs(6);
    assert!(judge_all(&h, now, 6_000_000_000, &[]).is_empty());
}

#[test]
fn fast_growth_alone_is_enough() {
    let start = Instant::now();
    let mut h = History::new(Duration::from_secs(60));
    // Mostly idle threads, but 20 appeared within the window, well after the process was
    // first seen (with its main thread) at second 0.
    h.record(start, ThreadInfo::new(50, 50, "java".into(), "java".into()), [0; reason::COUNT as usize]);
    for i in 0..20u32 {
        for s in 10..=11u64 {
            let mut t = [0u64; reason::COUNT as usize];
            t[reason::FUTEX as usize] = (s - 10) * 500_000_000;
            let info = ThreadInfo::new(3000 + i, 50, "java".into(), format!("grpc-{i}"));
            h.record(start + Duration::from_secs(s), info, t);
        }
    }
    let now = start + Duration::from_secs(11);
    let found = judge_all(&h, now, 11_000_000_000, &[]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].created_in_window, 20);
    assert_eq!(found[0].saturated_for, Duration::ZERO, "named by growth alone: the alert waits its pending time");
}
