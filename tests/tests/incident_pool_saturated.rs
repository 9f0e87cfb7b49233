//! Incident 2, end to end: the reference gateway runs a route on a bounded thread pool behind a
//! rate limiter whose acquire sleeps. With a generous rate the pool is idle and the observer is
//! quiet; with a tiny rate every pool thread parks in the limiter, the pool fills to its maximum,
//! and the observer names the saturated pool — at low CPU — within seconds, then resolves.

use std::time::{Duration, Instant};
use tests::{
    alerts::{assert_quiet, wait_firing, wait_for_evidence, wait_resolved},
    http_client::try_request,
    load::{assert_running, load, stop, stop_flag},
    observer::Observer,
    privileged,
    summary::{Detection, Start},
};

/// The refusals the firing PoolSaturated alert's evidence counts, once there are some (5 s at most:
/// the first callers to find the pool full may not have been answered when it fired).
fn wait_for_refusals(observer: &Observer) -> u64 {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let refusals = observer
            .alerts()
            .iter()
            .filter(|a| a["kind"] == "PoolSaturated" && a["state"] == "firing")
            .filter_map(|a| a["evidence"]["refusals"].as_u64())
            .max()
            .unwrap_or(0);
        if refusals > 0 || Instant::now() >= end {
            return refusals;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_rate_limiter_that_parks_every_worker_is_named_within_seconds() {
    if !privileged(module_path!()) {
        return;
    }
    let gw = tests::reference_gateway::Gateway::start(
        r#"
        [faults.pool]
        enabled = true
        core = 10
        max = 64
        keep_alive = "2s"
        permits_per_second = 10000.0
        [[routes]]
        path_prefix = "/rpc/"
        handler = "pool"
        "#,
    );
    let observer = Observer::start(gw.pid());

    // Healthy: moderate load, generous rate.
    let healthy = stop_flag();
    let clients = load(gw.port, "/rpc/call", 8, healthy.clone(), Instant::now() + Duration::from_secs(60));
    assert_quiet(&observer, Duration::from_secs(10));
    assert_running(&clients);
    stop(&healthy);
    for c in clients {
        let _ = c.join();
    }

    // Fault: 20 permits a second for 96 concurrent callers.
    let put = try_request(
        gw.admin_port,
        "PUT",
        "/admin/faults",
        &[("Content-Type", "application/json")],
        br#"{"pool_permits_per_second":20.0}"#,
        Duration::from_secs(5),
    )
    .expect("PUT /admin/faults");
    assert_eq!(put.status, 200, "{}", put.body);
    let fault = stop_flag();
    let clients = load(gw.port, "/rpc/call", 96, fault.clone(), Instant::now() + Duration::from_secs(60));
    let (alert, detected_after) = wait_firing(&observer, "PoolSaturated", Duration::from_secs(5));
    eprintln!("PoolSaturated firing {detected_after:?} after the fault started: {alert:#}");
    assert_eq!(alert["subject"], "rpc-pool-*", "{alert:#}");
    assert_eq!(alert["process"]["pid"], gw.pid());
    let evidence = &alert["evidence"];
    assert!(evidence["threads"].as_u64().is_some_and(|n| n >= 10), "{alert:#}");
    assert!(evidence["blocked_seconds_by_reason"]["sleep"].as_f64().is_some_and(|s| s > 0.0), "{alert:#}");
    assert!(evidence["cpu_cores"].as_f64().is_some_and(|c| c < 0.5), "parked threads burn no CPU: {alert:#}");
    // Where the pool's threads wait, unwound from userspace (issue 17): the biggest group sleeps
    // in libc under the gateway's `RateLimiter::acquire` (in the binary's symbol table).
    let (waiting_at, after) = wait_for_evidence(&observer, "PoolSaturated", Duration::from_secs(5), |e| {
        let groups = e["waiting_at"].as_array()?.clone();
        let frames = groups.first()?["frames"].as_array()?.clone();
        frames.iter().any(|f| f.as_str().is_some_and(|f| f.contains("RateLimiter::acquire"))).then_some(groups)
    });
    eprintln!("WAITING_AT {:.1}s after firing: {waiting_at:#?}", after.as_secs_f64());
    let biggest = &waiting_at[0];
    assert!(biggest["threads"].as_u64().is_some_and(|n| n >= 10), "most pool threads in one place: {waiting_at:#?}");
    assert!(biggest["frames"][0].as_str().is_some_and(|f| f.contains("nanosleep")), "{waiting_at:#?}");
    assert!(waiting_at.len() <= 5, "at most five places: {waiting_at:#?}");
    // 96 callers for a pool of at most 64: the gateway answers the rest 503, seen on its sockets.
    let refusals = wait_for_refusals(&observer);
    assert!(refusals >= 1, "refusals (5xx) in PoolSaturated evidence: {refusals}");
    let (_, metrics) = observer.get("/metrics").expect("metrics");
    let blocked: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("gateway_observer_pool_threads{")
                && l.contains("rpc-pool-*")
                && l.contains("state=\"blocked\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(blocked >= 10.0, "rpc-pool threads blocked (asleep in the limiter) per pool_threads: {blocked}");

    // The callers go away: the limiter's sleepers drain, the pool idles and shrinks, it resolves.
    stop(&fault);
    let resolved_after = wait_resolved(&observer, "PoolSaturated", Duration::from_secs(40));
    eprintln!("resolved {resolved_after:?} after the load stopped");
    Detection {
        runtime: "reference-gateway (tokio)",
        fault: "rate limiter, bounded pool",
        kind: "PoolSaturated",
        start: Start::Watching,
    }
    .report(detected_after, Some(resolved_after));
    for c in clients {
        let _ = c.join();
    }
}
