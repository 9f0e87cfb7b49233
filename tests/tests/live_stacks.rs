//! Stacks of threads blocked right now, unwound from userspace when an alert fires (issue 17), on
//! real runtimes. CPython's asyncio loop blocked in `time.sleep`: the kernel's frame-pointer
//! stack stops at glibc's `clock_nanosleep`; the live unwind goes through it into the
//! interpreter, down to `time_sleep` (the `time` module's C function, in the symbol table of the
//! pyenv build of libpython3.11 the tests run; Debian's /usr/bin/python3.11 is stripped and
//! exports no such symbol, so there the frame shows as `python3.11+0xOFFSET`).

use std::time::Duration;

use tests::{
    alerts::{frames_in_order, live_stack, wait_for_evidence},
    runtimes::{PYTHON_LOOP_THREAD, RuntimeGateway, Scenario},
};

#[test]
fn python_time_sleep_is_named_below_clock_nanosleep() {
    if !tests::privileged(module_path!()) {
        return;
    }
    let _serial = tests::serial();
    let gateway = RuntimeGateway::python("gateway.py");
    let mut scenario = Scenario::healthy(gateway, 4, Duration::from_millis(5), Duration::from_secs(4));
    let latency = scenario.fault("sleep");
    assert!(latency >= Duration::from_millis(100), "the fault is not in effect: a request took {latency:?}");
    let (alert, _) = scenario.detected("EventLoopBlocked", Duration::from_secs(15));
    assert_eq!(alert["subject"], PYTHON_LOOP_THREAD, "{alert:#}");
    let (stack, after) = wait_for_evidence(&scenario.observer, "EventLoopBlocked", Duration::from_secs(10), |e| {
        live_stack(e).filter(|s| frames_in_order(s, "clock_nanosleep", "time_sleep").is_some())
    });
    eprintln!("LIVE_STACK {} frames, {:.1}s after firing: {stack:#?}", stack.len(), after.as_secs_f64());
    let (sleep, time_sleep) = frames_in_order(&stack, "clock_nanosleep", "time_sleep").expect("both");
    assert!(stack[sleep].contains("libc.so.6"), "{stack:#?}");
    assert!(stack[time_sleep].contains("libpython3.11"), "{stack:#?}");
    assert!(stack.iter().any(|f| f.contains("_PyEval_EvalFrameDefault")), "into the eval loop: {stack:#?}");
    assert!(stack.iter().all(|f| !f.starts_with("0x") && !f.contains("(0x")), "a raw address: {stack:#?}");
    let metrics = scenario.observer.metrics();
    let unwound = tests::metrics::sum(
        &tests::metrics::parse(&metrics),
        "gateway_observer_live_stacks_total",
        &[("outcome", "unwound")],
    );
    assert!(unwound >= 1.0, "the daemon counts its unwinds: {unwound}");
    scenario.healed("EventLoopBlocked", Duration::from_secs(20));
    assert!(scenario.finish() > 50, "the load barely ran");
}
