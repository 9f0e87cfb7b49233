//! Gateways on the JVM, built from libraries this project did not write (Debian's Netty 4.1 and
//! Guava, the JDK's own com.sun.net.httpserver), watched from outside while they serve, then
//! broken in the same running process, then healed (fixtures in `tests/fixtures/jvm/`, harness in
//! `tests/src/jvm.rs`). Each scenario runs a healthy phase under load first, with the observer
//! already watching: nothing may fire. Then a fault is switched on over the fixture's stdin, and
//! the test waits for the alert the fault must raise, prints how long detection took, heals, and
//! prints how long resolution took. Lines starting `SUMMARY` collect the measurements.
//!
//! What the faults look like to the kernel (see /work/shared/RUNTIMES.md): `future.get(timeout)`,
//! `Thread.sleep` and Guava's `RateLimiter.acquire()` are timed futex waits; `future.get()`,
//! `join()`, Reactor's `block()` and a contended `synchronized` are untimed ones, which is also how
//! an idle JVM worker waits for work.

use std::{
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    alerts::{alerts_of, assert_quiet, wait_resolved},
    jvm::{self, JvmGateway, thread_census},
    jvm_scenario::{
        self, DETECT_WITHIN, HEALTHY, LOAD_AT_MOST, Load, RESOLVE_WITHIN, Scenario, Shape, cold_start_is_quiet,
        expect_firing, explain,
    },
    load::{stop, stop_flag},
    metrics,
    observer::Observer,
    privileged,
    redis_server::Redis,
    serial,
    summary::{Detection, Start},
    temp_dir,
};

// --- 0. A cold start under load ---------------------------------------------------------------

/// The observer watches the gateway from its first request and the load starts cold, with no
/// warm-up: class loading, the interpreter and the JIT's first compilations run in the loop
/// threads, with young GCs and safepoints all the while. A cold start is not an incident:
/// nothing may fire.
#[test]
fn jvm_netty_cold_start_under_load_is_quiet() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let Some((redis, gateway)) = netty_gateway() else { return };
    cold_start_is_quiet("jvm netty", &gateway, 16);
    drop(redis);
}

/// Netty's gateway, its access check asking a real redis-server; None (the test skips) without
/// one. The gateway is dropped before Redis.
fn netty_gateway() -> Option<(Redis, JvmGateway)> {
    let redis = Redis::start()?;
    let gateway = JvmGateway::start("NettyGateway", &[&redis.port.to_string()], &["-Xmx256m"]);
    Some((redis, gateway))
}

/// The same for the JDK's HttpServer serving on its dispatcher thread, which once ran a 180 ms
/// iteration while cold: one long iteration is a metric, not an incident.
#[test]
fn jvm_httpserver_cold_start_under_load_is_quiet() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = JvmGateway::start("JdkHttpGateway", &["inline"], &["-Xmx256m"]);
    cold_start_is_quiet("jvm httpserver", &gateway, 8);
}

// --- 1. Netty, with a Redis client on its own event loops --------------------------------------

/// The Netty loops blocked on Redis are named by then (1 s of it pending by design).
const NETTY_DETECT_WITHIN: Duration = Duration::from_secs(3);

/// Four reactor-http-nio loops; the access check's Redis GET goes through a Netty Redis client
/// with its own loop (lettuce-nioEventLoop-4-1) to a real redis-server.
/// A thread dump is asked for when the alert is pending and lands a tick after it returns; a dump
/// that caught the loop idle is followed by another a second later, three at most.
const JAVA_FRAMES_WITHIN: Duration = Duration::from_secs(5);

fn netty_loop_blocked(test: &str, fault: &str) {
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let Some((redis, gateway)) = netty_gateway() else { return };
    // The kernel keeps 15 bytes of a name: reactor-http-nio-N is `reactor-http-ni` to the
    // observer, lettuce-nioEventLoop-4-1 is `lettuce-nioEven`.
    let mut scenario = Scenario::new(
        &format!("netty {fault}"),
        gateway,
        "/api/x",
        &["reactor-http-ni", "lettuce-nioEven"],
        &["reactor-http-ni", "lettuce-nioEven"],
    );
    // Redis is slow for the whole test, healthy phase included: another client pauses every
    // client 60 ms out of 80 (CLIENT PAUSE, as incident 1's test does). With the asynchronous
    // client that only delays responses, and the loops stay free: nothing may fire. A blocking
    // call on a loop is harmless against a Redis answering in 200 µs (here it blocked the loops
    // about 3 % of the time), and an incident once Redis is slow: the incident is the pair.
    let slow = stop_flag();
    let pauser = slow_redis(&redis, &slow);
    scenario.healthy(Shape { clients: 4, pause: Duration::from_millis(2) });
    let before = scenario.fault(fault);
    let (alert, detected) = scenario.detected("EventLoopBlocked", &before);
    // Issue 13's goal is 2 s; a second more for a shared, loaded host. The untimed fault once
    // took 7-12 s here: the Redis client's loop completing every loop's call at once read as a
    // JVM pause releasing them.
    assert!(
        detected <= NETTY_DETECT_WITHIN,
        "EventLoopBlocked fired {detected:.2?} after the fault, more than {NETTY_DETECT_WITHIN:?}: {}",
        alert["summary"]
    );
    assert!(
        alert["subject"].as_str().is_some_and(|s| s.starts_with("reactor-http-ni")),
        "the HTTP loops are the ones blocked, not the Redis client's: {alert:#}"
    );
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    eprintln!("netty {fault}: evidence {}", alert["evidence"]);
    // The blocked loop's Java frames, from a thread dump the alert asked for while pending.
    let frames =
        tests::alerts::wait_evidence(scenario.observer(), "EventLoopBlocked", "java_stack", JAVA_FRAMES_WITHIN)
            .unwrap_or_else(|evidence| panic!("no java_stack {JAVA_FRAMES_WITHIN:?} after firing: {evidence:#}"));
    let frames: Vec<String> = serde_json::from_value(frames).expect("java_stack is a list of frames");
    eprintln!("netty {fault}: java_stack {frames:#?}");
    // A dump is one sample: a loop caught between two waits, idle in its selector, is dumped
    // again (up to three times a minute) and the first dump that caught it blocked is kept.
    assert!(
        !frames.first().is_some_and(|top| top.starts_with("EPoll.wait")),
        "a loop idle in its selector: {frames:#?}"
    );
    if fault.ends_with("get") {
        assert_blocked_in_get(&frames);
    } else {
        assert_blocked_on_the_monitor(&frames);
    }
    let resolved = scenario.healed("EventLoopBlocked");
    Detection { runtime: "jvm netty", fault, kind: "EventLoopBlocked", start: Start::Watching }
        .report(detected, Some(resolved));
    stop(&slow);
    let _ = pauser.join();
    assert!(scenario.finish() > 50, "the load barely ran");
    drop(redis);
}

/// The loop's frames name the blocking call and the handler that made it.
fn assert_blocked_in_get(frames: &[String]) {
    assert!(
        frames.iter().any(|f| f.contains("CompletableFuture.get") || f.contains("CompletableFuture.join")),
        "the blocking call: {frames:#?}"
    );
    assert!(frames.iter().any(|f| f.contains("NettyGateway$Handler")), "the handler that made it: {frames:#?}");
}

/// The loop's frames name the monitor it waits to enter and the handler that entered it.
fn assert_blocked_on_the_monitor(frames: &[String]) {
    assert_eq!(frames.get(1).map(String::as_str), Some("- waiting to lock Object"), "the monitor: {frames:#?}");
    assert!(frames[0].starts_with("NettyGateway$Handler.channelRead0"), "the handler: {frames:#?}");
}

/// Pauses every Redis client 60 ms out of 80 (CLIENT PAUSE) until `slow` is set: a slow Redis.
fn slow_redis(redis: &Redis, slow: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> thread::JoinHandle<()> {
    let slow = slow.clone();
    let mut con = redis.conn();
    thread::spawn(move || {
        let end = Instant::now() + LOAD_AT_MOST;
        while !slow.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
            let _: Result<(), _> = redis::cmd("CLIENT").arg("PAUSE").arg(60).arg("ALL").query(&mut con);
            thread::sleep(Duration::from_millis(80));
        }
    })
}

/// Lettuce's sync API on an event loop (incident 1's shape): `future.get(2, SECONDS)`.
#[test]
fn jvm_netty_timed_get_on_the_loop_is_a_blocked_loop() {
    netty_loop_blocked(module_path!(), "timed-get");
}

/// Reactor's `block()` / `join()`: the loop parks on the Redis reply without a timeout.
#[test]
fn jvm_netty_untimed_get_on_the_loop_is_a_blocked_loop() {
    netty_loop_blocked(module_path!(), "untimed-get");
}

/// The loops queue on a monitor another thread holds 200 ms at a time.
#[test]
fn jvm_netty_contended_monitor_on_the_loop_is_a_blocked_loop() {
    netty_loop_blocked(module_path!(), "synchronized");
}

/// Incident 1 as an SRE meets it: the Netty loops are already parked on Redis replies (Reactor's
/// untimed `block()`, Redis slow) when the observer attaches, so it has no healthy history of
/// them. Between two blocked calls a loop returns to its selector for the next request, which is
/// how the observer learns it is a loop: EventLoopBlocked within 5 s of the observer being ready
/// (issue 13), a few seconds more allowed for a shared, loaded host.
#[test]
fn jvm_netty_loops_already_blocked_when_the_observer_attaches() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let Some((redis, mut gateway)) = netty_gateway() else { return };
    let slow = stop_flag();
    let pauser = slow_redis(&redis, &slow);
    let load = Load::start(gateway.port, "/api/x", Shape { clients: 4, pause: Duration::from_millis(2) });
    jvm_scenario::warm_up(&mut gateway);
    gateway.fault("untimed-get");
    thread::sleep(Duration::from_secs(2));
    eprintln!("attach: {}", thread_census(gateway.pid(), "reactor-http-ni", 10));
    let observer = Observer::start(gateway.pid());
    let ready = Instant::now();
    let (alert, detected) = expect_firing(
        &observer,
        gateway.pid(),
        "EventLoopBlocked",
        (ready, Duration::from_secs(8)),
        &["reactor-http-ni"],
        &[],
    );
    eprintln!("attach: EventLoopBlocked firing {detected:.2?} after the observer was ready: {}", alert["summary"]);
    assert!(
        alert["subject"].as_str().is_some_and(|s| s.starts_with("reactor-http-ni")),
        "the HTTP loops are the ones blocked, not the Redis client's: {alert:#}"
    );
    gateway.heal();
    let resolved = wait_resolved(&observer, "EventLoopBlocked", RESOLVE_WITHIN);
    Detection { runtime: "jvm netty", fault: "untimed-get", kind: "EventLoopBlocked", start: Start::Attached }
        .report(detected, Some(resolved));
    stop(&slow);
    let _ = pauser.join();
    assert!(load.finish() > 50, "the load barely ran");
    drop(redis);
}

// --- 2-4. Guava's RateLimiter in JDK HttpServer worker pools ----------------------------------

/// 80 clients, each a request every 500 ms: about 160 requests a second served in a millisecond
/// or two when healthy (a handful of pool threads busy), while the limiter's 20 permits a second
/// leave every caller parked in it (80 in flight: the pool grows, or its 64 threads fill).
const POOL_LOAD: Shape = Shape { clients: 80, pause: Duration::from_millis(500) };

fn pool_gateway(mode: &str) -> JvmGateway {
    JvmGateway::start("JdkHttpGateway", &[mode, "--permits", "20"], &["-Xmx256m"])
}

/// Waits (10 s at most) until the pool is back to about its core size after the load's start.
fn pool_settled(gateway: &mut JvmGateway, at_most: u64) {
    let end = Instant::now() + Duration::from_secs(10);
    while gateway.stat("pool") > at_most && Instant::now() < end {
        thread::sleep(Duration::from_millis(200));
    }
}

fn pool_saturated(test: &str, mode: &str) {
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let core = if mode == "fixed" { 64 } else { 10 };
    let mut scenario = Scenario::new(
        &format!("ratelimit {mode} pool"),
        pool_gateway(mode),
        "/rpc/call",
        &["rpc-pool-*"],
        &["rpc-pool-"],
    );
    // The load starts before the observer: let the pool shrink back from the first burst.
    scenario.load = Some(Load::start(scenario.gateway.port, scenario.path, POOL_LOAD));
    pool_settled(&mut scenario.gateway, core + 6);
    scenario.observer = Some(Observer::start(scenario.gateway.pid()));
    eprintln!("{}: healthy stats {:?}", scenario.name, scenario.gateway.stats());
    scenario.print_census("healthy");
    assert_quiet(scenario.observer(), HEALTHY);

    let before = scenario.fault("ratelimit");
    eprintln!("{}: stats 0.5 s into the fault {:?}", scenario.name, scenario.gateway.stats());
    let (alert, detected) = scenario.detected("PoolSaturated", &before);
    eprintln!("{}: stats at detection {:?}", scenario.name, scenario.gateway.stats());
    assert_eq!(alert["subject"], "rpc-pool-*", "{alert:#}");
    // Where the pool's threads wait, as a thread-dump summary: the biggest group first.
    let groups = tests::alerts::wait_evidence(scenario.observer(), "PoolSaturated", "waiting_at", JAVA_FRAMES_WITHIN)
        .unwrap_or_else(|evidence| panic!("no waiting_at {JAVA_FRAMES_WITHIN:?} after firing: {evidence:#}"));
    eprintln!("{}: waiting_at {groups:#}", scenario.name);
    let top = &groups[0];
    let frames: Vec<String> = serde_json::from_value(top["frames"].clone()).expect("frames");
    assert!(frames.iter().any(|f| f.contains("RateLimiter.acquire")), "{groups:#}");
    // Most of the pool waits there (the rest run or hold the limiter's lock).
    let threads = top["threads"].as_u64().expect("threads");
    assert!(threads >= core / 2, "{threads} threads at RateLimiter.acquire, pool core {core}: {groups:#}");
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    let resolved = scenario.healed("PoolSaturated");
    let fault = format!("ratelimit, {mode} pool");
    Detection { runtime: "jvm httpserver", fault: &fault, kind: "PoolSaturated", start: Start::Watching }
        .report(detected, Some(resolved));
    assert!(scenario.finish() > 200, "the load barely ran");
}

/// Incident 2 on a growing pool: core 10, max 200, SynchronousQueue (it grows by a thread per
/// parked caller).
#[test]
fn jvm_rate_limiter_in_a_growing_pool_is_a_saturated_pool() {
    pool_saturated(module_path!(), "growing");
}

/// The same on a fixed pool of 64 prestarted threads and a queue (Dubbo's default, Tomcat with
/// spare threads = max): no growth to see, only 64 threads parked in the limiter's sleep.
#[test]
fn jvm_rate_limiter_in_a_fixed_pool_is_a_saturated_pool() {
    pool_saturated(module_path!(), "fixed");
}

/// The observer attached in the middle of the incident: the pool has already grown to its size
/// under the fault, so there is no growth left to see. It must still be named within 8 s of the
/// observer being ready: the requests the pool holds were read before the observer started, so
/// it sees the requests waiting only as the load sends new ones (3.5–4.5 s in most runs, up to
/// about 6 s on a loaded machine).
#[test]
fn jvm_rate_limiter_pool_already_saturated_when_the_observer_attaches() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let mut gateway = pool_gateway("growing");
    let load = Load::start(gateway.port, "/rpc/call", POOL_LOAD);
    pool_settled(&mut gateway, 16);
    gateway.fault("ratelimit");
    let grown = Instant::now();
    while gateway.stat("pool") < 60 {
        assert!(grown.elapsed() < Duration::from_secs(15), "the pool did not grow: {:?}", gateway.stats());
        thread::sleep(Duration::from_millis(200));
    }
    eprintln!("attach: pool grown in {:.2?}: {:?}", grown.elapsed(), gateway.stats());
    eprintln!("attach: {}", thread_census(gateway.pid(), "rpc-pool-", 10));
    let observer = Observer::start(gateway.pid());
    let ready = Instant::now();
    eprintln!("attach: observer ready {:.2?} after the pool had grown: {:?}", grown.elapsed(), gateway.stats());
    let (alert, detected) =
        expect_firing(&observer, gateway.pid(), "PoolSaturated", (ready, Duration::from_secs(8)), &["rpc-pool-*"], &[]);
    eprintln!("attach: PoolSaturated firing {detected:.2?} after the observer was ready: {}", alert["summary"]);
    assert_eq!(alert["subject"], "rpc-pool-*", "{alert:#}");
    gateway.heal();
    let resolved = wait_resolved(&observer, "PoolSaturated", RESOLVE_WITHIN);
    Detection {
        runtime: "jvm httpserver",
        fault: "ratelimit, growing pool",
        kind: "PoolSaturated",
        start: Start::Attached,
    }
    .report(detected, Some(resolved));
    assert!(load.finish() > 100, "the load barely ran");
}

// --- 5. JDK HttpServer without an executor: the dispatcher is the event loop -------------------

/// Handlers on HTTP-Dispatcher wait on `CompletableFuture.get()` that another thread completes
/// 50 ms later: the selector thread parks without a timeout between two selects.
#[test]
fn jvm_httpserver_untimed_get_on_the_dispatcher_is_a_blocked_loop() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = JvmGateway::start("JdkHttpGateway", &["inline"], &["-Xmx256m"]);
    let mut scenario =
        Scenario::new("httpserver inline untimed-get", gateway, "/api/x", &["HTTP-Dispatcher"], &["HTTP-Dispatcher"]);
    scenario.healthy(Shape { clients: 4, pause: Duration::from_millis(5) });
    let before = scenario.fault("untimed-get");
    let (alert, detected) = scenario.detected("EventLoopBlocked", &before);
    assert_eq!(alert["subject"], "HTTP-Dispatcher", "{alert:#}");
    // The untimed waits judged blocking are in the loop's blocked-time counter too, as much as
    // the alert's window holds (each is a 50 ms wait, well past the 10 ms block threshold).
    let in_alert = alert["evidence"]["blocked_seconds_by_reason"]["futex"].as_f64().unwrap_or(0.0);
    let samples = metrics::parse(&scenario.observer().metrics());
    let counted = metrics::sum(
        &samples,
        "gateway_observer_event_loop_blocked_seconds_total",
        &[("thread", "HTTP-Dispatcher"), ("reason", "futex")],
    );
    eprintln!(
        "httpserver inline untimed-get: futex blocked {counted:.2} s counted, {in_alert:.2} s in the alert's window"
    );
    assert!(
        in_alert > 0.5 && counted >= in_alert * 0.8,
        "event_loop_blocked_seconds_total{{reason=\"futex\"}} {counted:.2} s, the alert's window {in_alert:.2} s"
    );
    let resolved = scenario.healed("EventLoopBlocked");
    Detection {
        runtime: "jvm httpserver",
        fault: "untimed-get on the dispatcher",
        kind: "EventLoopBlocked",
        start: Start::Watching,
    }
    .report(detected, Some(resolved));
    assert!(scenario.finish() > 50, "the load barely ran");
}

// --- 6. A JVM pause: forced full GCs of a large live heap ------------------------------------

/// What the JVM logged (`-Xlog:gc,safepoint`), in milliseconds: each full collection's pause and
/// each safepoint's total (stop-the-world from the request to the release of every thread).
struct GcLog {
    full: Vec<f64>,
    safepoints: Vec<f64>,
}

impl GcLog {
    fn read(log: &std::path::Path) -> GcLog {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut full = Vec::new();
        let mut safepoints = Vec::new();
        for line in text.lines() {
            if line.contains("Pause Full")
                && let Some(ms) =
                    line.rsplit(' ').next().and_then(|v| v.strip_suffix("ms")).and_then(|v| v.parse().ok())
            {
                full.push(ms);
            }
            if line.contains("Safepoint \"")
                && let Some(ns) = line
                    .rsplit("Total: ")
                    .next()
                    .and_then(|v| v.strip_suffix(" ns"))
                    .and_then(|v| v.parse::<f64>().ok())
            {
                safepoints.push(ns / 1e6);
            }
        }
        GcLog { full, safepoints }
    }

    /// What was logged after `earlier` was read.
    fn since(&self, earlier: &GcLog) -> GcLog {
        GcLog {
            full: self.full[earlier.full.len().min(self.full.len())..].to_vec(),
            safepoints: self.safepoints[earlier.safepoints.len().min(self.safepoints.len())..].to_vec(),
        }
    }

    fn long_safepoints(&self, at_least_ms: f64) -> Vec<f64> {
        self.safepoints.iter().copied().filter(|ms| *ms >= at_least_ms).collect()
    }
}

/// The observer's stop-the-world seconds of JVMs named `java`.
fn jvm_pause_seconds(observer: &Observer) -> f64 {
    metrics::sum(
        &metrics::parse(&observer.metrics()),
        "gateway_observer_jvm_pause_seconds_total",
        &[("process", "java")],
    )
}

/// A gateway with 1.5 GB live on ParallelGC whose fault forces a full GC as it switches on, then
/// 2 s after each one ends (300-900 ms stop-the-world each here). Every Java thread stops at the
/// safepoint — event loops and pool threads alike — so the only right name for it is a JVM
/// pause, not blocked loops or a saturated pool. One pause is a transient: `JvmPause` fires at
/// the second one (see `detect::jvm_pause`), so about 2 s + two pauses + a tick after the fault.
#[test]
fn jvm_full_gc_pauses_are_a_jvm_pause_not_blocked_loops() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    Detection { runtime: "jvm httpserver", fault: "full gc", kind: "JvmPause", start: Start::Watching }.declare();
    let dir = temp_dir("jvm-gc");
    let log = dir.join("gc.log");
    let log_opt = format!("-Xlog:gc,safepoint:file={}:uptime", log.display());
    let gateway = JvmGateway::start_within(
        "JdkHttpGateway",
        &["growing", "--live-mb", "150", "--ballast-mb", "1350"],
        &["-XX:+UseParallelGC", "-Xms3g", "-Xmx3g", "-Xmn256m", &log_opt],
        Duration::from_secs(60),
    );
    let mut scenario = Scenario::new(
        "gc pause",
        gateway,
        "/api/x",
        &["rpc-pool-*", "HTTP-Dispatcher", "VM Thread", "GC Thread#*", "completer-*"],
        &["rpc-pool-", "HTTP-Dispatcher", "VM Thread"],
    );
    scenario.healthy(Shape { clients: 8, pause: Duration::from_millis(20) });
    let logged_before = GcLog::read(&log);
    let stopped_before = jvm_pause_seconds(scenario.observer());
    let before = scenario.fault("gc");

    // Watch the fault: JvmPause must fire, and none of the kinds a pause must not be taken for.
    let forbidden = ["EventLoopBlocked", "EventLoopBusy", "PoolSaturated"];
    let start = scenario.fault_at.expect("the fault switched on");
    let mut wrong: Vec<String> = Vec::new();
    let mut pause: Option<(Value, Duration)> = None;
    let watch_until = |pause: &Option<(Value, Duration)>| {
        // Once it fired, two more pauses are watched for wrong kinds.
        pause.as_ref().map_or(DETECT_WITHIN, |(_, at)| *at + Duration::from_secs(6))
    };
    while start.elapsed() < watch_until(&pause) {
        let alerts = scenario.observer().alerts();
        for a in alerts.iter().filter(|a| forbidden.iter().any(|k| a["kind"] == *k)) {
            let line = format!("{} {} {}: {}", a["kind"], a["subject"], a["state"], a["summary"]);
            if !wrong.contains(&line) {
                wrong.push(line);
            }
        }
        if pause.is_none() {
            pause = alerts_of(&alerts, "JvmPause", "firing").into_iter().next().map(|a| (a, start.elapsed()));
        }
        thread::sleep(Duration::from_millis(100));
    }
    let during = GcLog::read(&log).since(&logged_before);
    eprintln!("gc pause: full GCs during the fault, as the JVM logged them (ms): {:?}", during.full);
    eprintln!("gc pause: safepoints of 50 ms or more during the fault (ms): {:?}", during.long_safepoints(50.0));
    assert!(
        !during.full.is_empty(),
        "no full GC in {:?} of the fault: the fixture's fault is not in effect",
        start.elapsed()
    );
    let explained = if pause.is_none() || !wrong.is_empty() {
        explain(scenario.observer(), scenario.gateway.pid(), &scenario.groups, &before)
    } else {
        String::new()
    };
    assert!(wrong.is_empty(), "a JVM pause taken for something else: {wrong:#?}\n{explained}");
    let Some((alert, detected)) = pause else {
        panic!("no JvmPause firing {DETECT_WITHIN:?} into forced full GCs of {:?} ms:\n{explained}", during.full);
    };
    eprintln!(
        "gc pause: JvmPause firing {detected:.2?} after the fault: {} evidence {}",
        alert["summary"], alert["evidence"]
    );
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    // Fires at the second pause: the first comes at once, the second 2 s after it ends; the alert
    // shows at the next tick (1 s) and the poll (0.1 s). 0.5 s of slack for a loaded machine.
    let pauses: Vec<f64> = during.long_safepoints(100.0);
    let second_pause_by = 2.0 + pauses.iter().take(2).sum::<f64>() / 1e3;
    assert!(
        detected.as_secs_f64() <= second_pause_by + 1.6,
        "fired {detected:.2?} after the fault, the second pause had ended by {second_pause_by:.2}s"
    );
    // The longest pause the counters prove: at least the threshold, never more than the longest
    // safepoint the JVM logged (1 ms for rounding).
    let longest_ms = alert["evidence"]["longest_pause_seconds"].as_f64().expect("longest pause") * 1e3;
    let logged_max = pauses.iter().copied().fold(0.0, f64::max);
    assert!(
        (100.0..=logged_max + 1.0).contains(&longest_ms),
        "longest pause {longest_ms:.1} ms against the JVM's longest safepoint {logged_max:.1} ms"
    );
    assert!(alert["evidence"]["long_pauses"].as_u64().is_some_and(|n| n >= 2), "{alert:#}");
    assert_eq!(alert["evidence"]["last_gc_cause"], "System.gc()", "{alert:#}");

    let resolved = scenario.healed("JvmPause");
    assert!(resolved <= Duration::from_secs(10), "resolved {resolved:.2?} after the heal");
    // Stop-the-world time: the observer's counter against the JVM's own log over the same stretch.
    // A healthy young collection in the tick before the fault may fall on either side (they take
    // up to 90 ms here): 100 ms and 5 % of tolerance.
    let stopped = jvm_pause_seconds(scenario.observer()) - stopped_before;
    let logged: f64 = GcLog::read(&log).since(&logged_before).safepoints.iter().sum::<f64>() / 1e3;
    eprintln!("gc pause: stop-the-world {stopped:.3}s by the observer's counter, {logged:.3}s by the JVM's log");
    assert!((stopped - logged).abs() <= 0.1 + 0.05 * logged, "stopped {stopped:.3}s, logged {logged:.3}s");
    eprintln!("gc pause: full GCs {:?} ms", during.full);
    Detection { runtime: "jvm httpserver", fault: "full gc", kind: "JvmPause", start: Start::Watching }
        .report(detected, Some(resolved));
    assert!(scenario.finish() > 50, "the load barely ran");
}

/// The observer's reading of a JVM's hsperfdata file, against `jcmd PerfCounter.print` (the JDK's
/// own reading of the same counters, from inside the JVM): the same counter names, and the same
/// values, where jcmd read between two of our readings (a counter that moved lies between them).
#[test]
fn jvm_hsperfdata_counters_match_jcmd() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = JvmGateway::start("JdkHttpGateway", &["growing"], &["-Xmx256m"]);
    let pid = gateway.pid();
    let read = || {
        let location = gateway_observer::host::hsperfdata::file::locate(pid).expect("the JVM's file is found");
        gateway_observer::host::hsperfdata::file::read(pid, &location).expect("the JVM's file parses")
    };
    let ours_before = read();
    let output =
        std::process::Command::new("jcmd").arg(pid.to_string()).arg("PerfCounter.print").output().expect("jcmd");
    let ours_after = read();
    assert!(output.status.success(), "jcmd failed: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    let mut theirs: std::collections::BTreeMap<&str, &str> =
        text.lines().skip(1).filter_map(|line| line.split_once('=')).collect();
    // jcmd adds the prologue's fields (version, used bytes, ...) as sun.perfdata.*: no entries.
    assert_eq!(theirs.get("sun.perfdata.majorVersion"), Some(&"2"), "the layout version the parser knows");
    theirs.retain(|name, _| !name.starts_with("sun.perfdata."));
    use gateway_observer::host::hsperfdata::format::Value as V;
    let mut differ = Vec::new();
    for (name, value) in &theirs {
        let (Some(before), Some(after)) = (ours_before.counters.get(*name), ours_after.counters.get(*name)) else {
            differ.push(format!("{name}: not read"));
            continue;
        };
        let same = match (before, after) {
            (V::Long(b), V::Long(a)) => value.parse::<i64>().is_ok_and(|v| (*b.min(a)..=*b.max(a)).contains(&v)),
            (V::Text(b), V::Text(a)) => {
                let v = value.trim_matches('"');
                v == b || v == a
            }
            _ => false,
        };
        if !same {
            differ.push(format!("{name}: jcmd {value}, ours {before:?} then {after:?}"));
        }
    }
    eprintln!("hsperfdata: {} counters from jcmd, {} read by the observer", theirs.len(), ours_after.counters.len());
    assert!(theirs.len() > 100, "jcmd printed {} counters:\n{text}", theirs.len());
    assert_eq!(theirs.len(), ours_after.counters.len(), "the same names; those that differ: {differ:#?}");
    // A variable counter (a space's used bytes) may go up and back down between our readings.
    assert!(differ.len() <= 3, "counters that differ from jcmd's: {differ:#?}");
    for name in ["sun.os.hrt.frequency", "sun.rt.safepoints", "sun.rt.safepointTime", "sun.gc.collector.0.name"] {
        assert!(!differ.iter().any(|d| d.starts_with(name)), "{name} differs: {differ:#?}");
    }
    let counters =
        gateway_observer::host::hsperfdata::JvmCounters::from_perf_data(&ours_after).expect("pause counters");
    assert!(counters.frequency > 0 && !counters.collectors.is_empty(), "{counters:?}");
}
