//! 1. Netty, with a Redis client on its own event loops.

use std::{
    thread,
    time::{Duration, Instant},
};

use tests::{
    alerts::wait_resolved,
    jvm::{self, thread_census},
    jvm_scenario::{self, LOAD_AT_MOST, Load, RESOLVE_WITHIN, Scenario, Shape, expect_firing},
    load::{stop, stop_flag},
    observer::Observer,
    privileged,
    redis_server::Redis,
    serial,
    summary::{Detection, Start},
};

use crate::{java_evidence, java_stack, netty_gateway};

/// The Netty loops blocked on Redis are named by then (1 s of it pending by design).
const NETTY_DETECT_WITHIN: Duration = Duration::from_secs(3);

/// Four reactor-http-nio loops; the access check's Redis GET goes through a Netty Redis client
/// with its own loop (lettuce-nioEventLoop-4-1) to a real redis-server.
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
    let frames = java_evidence(scenario.observer(), "EventLoopBlocked", &format!("netty {fault}"), java_stack);
    let frames: Vec<String> = serde_json::from_value(frames).expect("java_stack is a list of frames");
    eprintln!("netty {fault}: java_stack {frames:#?}");
    // A dump is one sample: a loop caught between two waits, idle in its selector, is dumped
    // again at once (three dumps at most) and the first dump that caught it blocked is kept.
    assert_not_idle(&frames);
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

/// Not a loop caught idle in its selector (or on its way into it).
fn assert_not_idle(frames: &[String]) {
    assert!(
        !frames.first().is_some_and(|top| top.starts_with("EPoll.wait") || top.starts_with("EPollSelectorImpl")),
        "a loop idle in its selector: {frames:#?}"
    );
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
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect`"]
fn jvm_netty_untimed_get_on_the_loop_is_a_blocked_loop() {
    netty_loop_blocked(module_path!(), "untimed-get");
}

/// The loops queue on a monitor another thread holds 200 ms at a time.
#[test]
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect`"]
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
    // Incident 1's answer, in the alert as it fires: the loop waits on Redis in the handler.
    let frames = java_evidence(&observer, "EventLoopBlocked", "netty attach untimed-get", java_stack);
    let frames: Vec<String> = serde_json::from_value(frames).expect("java_stack is a list of frames");
    eprintln!("attach: java_stack {frames:#?}");
    assert_not_idle(&frames);
    assert_blocked_in_get(&frames);
    gateway.heal();
    let resolved = wait_resolved(&observer, "EventLoopBlocked", RESOLVE_WITHIN);
    Detection { runtime: "jvm netty", fault: "untimed-get", kind: "EventLoopBlocked", start: Start::Attached }
        .report(detected, Some(resolved));
    stop(&slow);
    let _ = pauser.join();
    assert!(load.finish() > 50, "the load barely ran");
    drop(redis);
}
