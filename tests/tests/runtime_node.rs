//! A Node.js gateway (`tests/fixtures/node/gateway.js`: one `http` server on Node's single main
//! loop), watched from outside while it serves, then blocked in the running process in three ways
//! Node code really blocks its loop, then healed. Each way must be named `EventLoopBlocked` on
//! the loop thread (`node-main`) and resolve after the heal; the same server under load and no
//! fault, and under full load with no pause between requests, must raise nothing.
//!
//! How each fault looks from the kernel (checked with /proc/PID/task/TID/syscall while it runs):
//! `atomics-timed` is a futex wait with a timeout (V8 waits on a condition variable);
//! `atomics-untimed` is a futex wait without one, as an idle worker's; `exec-sync` is an
//! epoll_pwait on a second epoll instance that spawnSync makes for the child, so the loop thread
//! looks as if it idled in its poll while it is blocked for the child.

use std::time::{Duration, Instant};

use tests::{
    privileged,
    runtimes::{self, NODE_LOOP_THREAD, RuntimeGateway, Scenario},
    serial,
};

fn blocked_loop_is_named(test: &str, fault: &str) {
    runtimes::blocked_loop_is_named(
        test,
        || RuntimeGateway::node("gateway.js"),
        NODE_LOOP_THREAD,
        fault,
        Duration::from_millis(150),
    );
}

#[test]
fn node_atomics_wait_with_a_timeout_is_a_blocked_loop() {
    blocked_loop_is_named(module_path!(), "atomics-timed");
}

/// An untimed futex wait looks like an idle libuv or tokio worker; on an event loop between two
/// of its polls it is a block all the same.
#[test]
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect`"]
fn node_atomics_wait_without_a_timeout_is_a_blocked_loop() {
    blocked_loop_is_named(module_path!(), "atomics-untimed");
}

/// The loop thread waits for the child in epoll_pwait on spawnSync's own epoll instance, not on
/// the loop's.
#[test]
fn node_exec_sync_is_a_blocked_loop() {
    blocked_loop_is_named(module_path!(), "exec-sync");
}

/// Full load, no fault: clients with no pause keep the loop always busy with short iterations
/// (each one request's worth of work). Nothing may fire: the loop is busy, not stuck.
#[test]
fn node_under_full_load_raises_nothing() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let gateway = RuntimeGateway::node("gateway.js");
    let started = Instant::now();
    let scenario = Scenario::healthy(gateway, 12, Duration::ZERO, Duration::from_secs(15));
    tests::summary::quiet("node", "full load, no fault", started.elapsed());
    assert!(scenario.finish() > 500, "the load barely ran");
}
