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

use tests::runtimes::{self, PYTHON_LOOP_THREAD, RuntimeGateway};

fn blocked_loop_is_named(test: &str, fault: &str) {
    runtimes::blocked_loop_is_named(
        test,
        || RuntimeGateway::python("gateway.py"),
        PYTHON_LOOP_THREAD,
        fault,
        Duration::from_millis(100),
    );
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
