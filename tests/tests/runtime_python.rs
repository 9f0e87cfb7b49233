//! A Python asyncio gateway (`tests/fixtures/python/gateway.py`: `asyncio.start_server` with
//! minimal HTTP/1.1, one event loop in the main thread `py-asyncio`), watched from outside while
//! it serves, then blocked in the running process, then healed. Both ways must be named
//! `EventLoopBlocked` on the loop thread and resolve after the heal; with the same load and no
//! fault nothing may fire.
//!
//! `sleep` is `time.sleep(0.2)` in the handler: clock_nanosleep on the loop thread. `lock` is a
//! `threading.Lock` another thread (`py-lock-holder`) holds 200 ms at a time: the loop parks in
//! an untimed futex wait (sem_wait), which looks like an idle worker's wait.
//!
//! Either way the alert's stack names the Python code that blocked, read from the interpreter's
//! frames (issue 17): `block (gateway.py:LINE)`, the line of the blocking call, called from
//! `serve`, where the eval loop's native frame was.

use std::time::Duration;

use tests::{
    alerts::{frames_in_order, live_stack, wait_for_evidence},
    runtimes::{self, PYTHON_LOOP_THREAD, RuntimeGateway, Scenario},
};

fn blocked_loop_is_named(test: &str, fault: &str) {
    runtimes::blocked_loop_is_named_and(
        test,
        || RuntimeGateway::python("gateway.py"),
        PYTHON_LOOP_THREAD,
        fault,
        Duration::from_millis(100),
        |scenario| python_frames_in_evidence(scenario, fault),
    );
}

/// The line of `gateway.py`'s `block()` that blocks under `fault`, as a stack names it.
fn blocking_line(fault: &str) -> String {
    let source = std::fs::read_to_string(runtimes::fixture_dir().join("python/gateway.py")).expect("gateway.py");
    let statement = if fault == "sleep" { "time.sleep(BLOCK_SECONDS)" } else { "with lock:" };
    let body = source.find("def block():").expect("def block");
    let line = source[body..].find(statement).map(|at| source[..body + at].lines().count()).expect("statement");
    format!("block (gateway.py:{line})")
}

/// The alert's live stack holds `block` at its blocking line, below it `serve` (its caller),
/// and the asyncio loop outside (`_run_once`), all Python frames named from the interpreter.
fn python_frames_in_evidence(scenario: &Scenario, fault: &str) {
    let block = blocking_line(fault);
    let (stack, after) = wait_for_evidence(&scenario.observer, "EventLoopBlocked", Duration::from_secs(10), |e| {
        live_stack(e).filter(|s| frames_in_order(s, &block, "serve (gateway.py:").is_some())
    });
    eprintln!("PYTHON_STACK {:.1}s after firing: {stack:#?}", after.as_secs_f64());
    assert!(stack.iter().any(|f| f.starts_with("BaseEventLoop._run_once (base_events.py:")), "{stack:#?}");
    assert!(!stack.iter().any(|f| f.starts_with("_PyEval_EvalFrameDefault")), "every eval frame replaced: {stack:#?}");
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
