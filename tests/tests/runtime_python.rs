//! A Python asyncio gateway (`tests/fixtures/python/gateway.py`: `asyncio.start_server` with
//! minimal HTTP/1.1, one event loop in the main thread `py-asyncio`), watched from outside while
//! it serves, then blocked in the running process, then healed. Both ways must be named
//! `EventLoopBlocked` on the loop thread and resolve after the heal; with the same load and no
//! fault nothing may fire.
//!
//! `sleep` is `time.sleep(0.2)` in the handler: clock_nanosleep on the loop thread. `lock` is a
//! `threading.Lock` another thread (`py-lock-holder`) holds 200 ms at a time: the loop parks in
//! an untimed futex wait (sem_wait), which looks like an idle worker's wait.

use std::time::Duration;

use tests::{
    privileged,
    runtimes::{PYTHON_LOOP_THREAD, RuntimeGateway, Scenario},
    serial,
};

const HEALTHY: Duration = Duration::from_secs(6);
const DETECT_WITHIN: Duration = Duration::from_secs(15);
const RESOLVE_WITHIN: Duration = Duration::from_secs(20);

fn blocked_loop_is_named(test: &str, fault: &str) {
    if !privileged(test) {
        return;
    }
    let _serial = serial();
    let gateway = RuntimeGateway::python("gateway.py");
    let mut scenario = Scenario::healthy(gateway, 4, Duration::from_millis(5), HEALTHY);

    let latency = scenario.fault(fault);
    assert!(latency >= Duration::from_millis(100), "{fault}: a request took {latency:?}, the fault is not in effect");
    let (alert, detected) = scenario.detected("EventLoopBlocked", DETECT_WITHIN);
    assert_eq!(alert["subject"], PYTHON_LOOP_THREAD, "the asyncio loop is the one blocked: {alert:#}");
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    let resolved = scenario.healed("EventLoopBlocked", RESOLVE_WITHIN);
    let after_heal = scenario.gateway.timed_get("/");
    assert!(after_heal < Duration::from_millis(100), "healed, yet a request took {after_heal:?}");
    eprintln!("SUMMARY python {fault}: EventLoopBlocked detected {detected:.2?}, resolved {resolved:.2?}");
    assert!(scenario.finish() > 50, "the load barely ran");
}

#[test]
fn python_time_sleep_in_a_handler_is_a_blocked_loop() {
    blocked_loop_is_named(module_path!(), "sleep");
}

/// A lock held by another thread: an untimed futex wait on the loop thread between two polls.
#[test]
fn python_a_lock_held_by_another_thread_is_a_blocked_loop() {
    blocked_loop_is_named(module_path!(), "lock");
}
