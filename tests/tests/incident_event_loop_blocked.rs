//! Incident 1, end to end: the reference gateway's access check calls Redis with a synchronous
//! client on its runtime's worker threads, Redis becomes slow, and the observer — attached from
//! outside with the real probes — names the blocked event loops within seconds, with evidence,
//! and resolves the alert once Redis is fast again. With the same load and no fault it is quiet.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};
use tests::{
    alerts::{assert_quiet, blocked_stack, frames_in_order, live_stack, wait_firing, wait_for_evidence, wait_resolved},
    load::{assert_running, load, stop, stop_flag},
    observer::Observer,
    privileged,
    redis_server::Redis,
    reference_gateway::{Gateway, access_config},
    summary::{Detection, Start},
    upstream::{Behavior, Upstream},
};

/// The firing alert's stack, which arrives with a later block if the first had none yet.
fn wait_for_stack(observer: &Observer) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(stack) = blocked_stack(&observer.alerts()) {
            return stack;
        }
        assert!(Instant::now() < end, "no stack in EventLoopBlocked evidence: {:#?}", observer.alerts());
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_slow_redis_behind_a_blocking_client_is_named_within_seconds() {
    if !privileged(module_path!()) {
        return;
    }
    let Some(redis) = Redis::start() else { return };
    let up = Upstream::start("up", Behavior::Echo);
    let config = access_config(&redis, &up, "blocking");
    let gw = Gateway::start_with(&config, "workers = 4");
    let mut con = redis.conn();
    let _: () = redis::cmd("SET").arg("tok").arg(r#"{"userId":"u-1"}"#).query(&mut con).expect("SET token");
    let observer = Observer::start(gw.pid());

    // Healthy phase: steady load, no fault, no alert.
    let healthy_for =
        Duration::from_secs(std::env::var("HEALTHY_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60));
    let done = stop_flag();
    let clients = load(gw.port, "/api/x", 4, done.clone(), Instant::now() + healthy_for + Duration::from_secs(60));
    assert_quiet(&observer, healthy_for);
    assert_running(&clients);

    // Fault: Redis stalls for 60 ms out of every 80 (another client pauses all clients again and
    // again), so synchronous GETs park the worker threads in socket reads.
    let slow = Arc::new(AtomicBool::new(true));
    let slow_redis = {
        let slow = slow.clone();
        let mut con = redis.conn();
        thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(60);
            while slow.load(Ordering::Relaxed) && Instant::now() < end {
                let _: Result<(), _> = redis::cmd("CLIENT").arg("PAUSE").arg(60).arg("ALL").query(&mut con);
                thread::sleep(Duration::from_millis(80));
            }
        })
    };
    let (alert, detected_after) = wait_firing(&observer, "EventLoopBlocked", Duration::from_secs(5));
    eprintln!("EventLoopBlocked firing {detected_after:?} after the fault started: {alert:#}");
    assert!(alert["subject"].as_str().is_some_and(|s| s.starts_with("gw-worker-")), "{alert:#}");
    assert_eq!(alert["process"]["pid"], gw.pid());
    assert_eq!(alert["evidence"]["reason"], "socket", "a synchronous Redis read: {alert:#}");
    // Either rule of the detector: a fifth of the window blocked, or one block over 50 ms.
    let share = alert["evidence"]["blocked_share"].as_f64().unwrap_or(0.0);
    let long_blocks = alert["evidence"]["blocks_over_single_threshold"].as_u64().unwrap_or(0);
    assert!(share >= 0.2 || long_blocks >= 1, "neither rule holds in the evidence: {alert:#}");
    assert_eq!(alert["evidence"]["syscall"], "recvfrom", "the Redis client's read: {alert:#}");
    // What the gateway's clients went through meanwhile, from its sockets.
    let requests = &alert["evidence"]["requests"];
    assert!(requests["completed"].as_u64().is_some_and(|n| n > 0), "requests served in the window: {alert:#}");
    assert!(requests["max_socket_queue_seconds"].as_f64().is_some(), "socket queue wait in the evidence: {alert:#}");
    // The user stack of a long block, captured as its recv returns (sock_recv_length) and symbolized from the
    // gateway's mappings: its innermost frame is libc's recv (glibc has no frame pointers, so the
    // kernel's unwinder rarely gets further through it).
    let stack = wait_for_stack(&observer);
    assert!(stack[0].contains("recv"), "innermost frame of the blocking call: {stack:?}");
    // The stack of a worker blocked right now, unwound from userspace through .eh_frame (issue
    // 17): past glibc into the gateway's own code, down to the access check that called Redis
    // (`AccessCheck::check_blocking`, in the binary's symbol table).
    let (stack, after) = wait_for_evidence(&observer, "EventLoopBlocked", Duration::from_secs(10), |e| {
        live_stack(e).filter(|s| frames_in_order(s, "recv", "check_blocking").is_some())
    });
    eprintln!("LIVE_STACK {} frames, {:.1}s after firing: {stack:#?}", stack.len(), after.as_secs_f64());
    assert!(stack.iter().all(|f| !f.starts_with("0x") && !f.contains("(0x")), "a raw address: {stack:#?}");

    // Redis fast again: the alerts resolve.
    slow.store(false, Ordering::Relaxed);
    let _ = slow_redis.join();
    let resolved_after = wait_resolved(&observer, "EventLoopBlocked", Duration::from_secs(20));
    eprintln!("resolved {resolved_after:?} after Redis was fast again");
    Detection {
        runtime: "reference-gateway (tokio)",
        fault: "slow redis, blocking client",
        kind: "EventLoopBlocked",
        start: Start::Watching,
    }
    .report(detected_after, Some(resolved_after));
    stop(&done);
    let served: usize = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    assert!(served > 100, "the load made only {served} requests");
}
