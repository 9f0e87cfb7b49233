//! 2-4. Guava's RateLimiter in JDK HttpServer worker pools.

use std::{
    thread,
    time::{Duration, Instant},
};

use tests::{
    alerts::{assert_quiet, wait_resolved},
    jvm::{self, JvmGateway, thread_census},
    jvm_scenario::{HEALTHY, Load, RESOLVE_WITHIN, Scenario, Shape, expect_firing},
    observer::Observer,
    privileged, serial,
    summary::{Detection, Start},
};

use crate::java_evidence;

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
    // The live stacks' native `waiting_at` (libjvm's parking) may come first; the dump's replaces it.
    let java_groups = |evidence: &serde_json::Value| {
        let groups = &evidence["waiting_at"];
        let frames = groups.as_array()?.first()?["frames"].as_array()?;
        frames.iter().any(|f| f.as_str().is_some_and(|f| f.contains(".java:"))).then(|| groups.clone())
    };
    let groups = java_evidence(scenario.observer(), "PoolSaturated", &scenario.name, java_groups);
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
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect`"]
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
