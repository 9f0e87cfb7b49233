//! Stacks of threads blocked right now, unwound from userspace when an alert fires (issue 17), on
//! real runtimes. CPython's asyncio loop blocked in `time.sleep`: the kernel's frame-pointer
//! stack stops at glibc's `clock_nanosleep`; the live unwind goes through it into the
//! interpreter, down to `time_sleep` (the `time` module's C function, in the symbol table of the
//! pyenv build of libpython3.11 the tests run; Debian's /usr/bin/python3.11 is stripped and
//! exports no such symbol, so there the frame shows as `python3.11+0xOFFSET`), and on into the
//! Python function that called it (`block (gateway.py:45)`, read from the interpreter's frames
//! where the eval loop's native frame was). Node.js started
//! with `--perf-basic-prof`: V8's code is named from the perf map it writes.

use std::time::Duration;

use tests::{
    alerts::{frames_in_order, live_stack, wait_for_evidence},
    runtimes::{NODE_LOOP_THREAD, PYTHON_LOOP_THREAD, RuntimeGateway, Scenario},
};

#[test]
fn python_time_sleep_is_named_below_clock_nanosleep() {
    if !tests::privileged(module_path!()) {
        return;
    }
    let _serial = tests::serial();
    python_blocked_in_sleep(RuntimeGateway::python("gateway.py"), "3.11");
}

/// The pyenv CPythons of this machine besides the tests' own `python3` (3.11.7), each as the
/// gateway's interpreter: 3.12's frames are read from the offsets listed for it, 3.13's from the
/// `_Py_DebugOffsets` table at the start of its `_PyRuntime`. A missing one is said loudly and
/// skipped.
#[test]
fn python_frames_on_each_pyenv_cpython() {
    if !tests::privileged(module_path!()) {
        return;
    }
    let _serial = tests::serial();
    let mut ran = Vec::new();
    for version in ["3.12.1", "3.13.0"] {
        let python = format!("/root/.pyenv/versions/{version}/bin/python3");
        if !std::path::Path::new(&python).exists() {
            eprintln!("!!! CPython {version} NOT TESTED: {python} is not on this machine");
            continue;
        }
        let minor = &version[..version.rfind('.').unwrap_or(version.len())];
        python_blocked_in_sleep(RuntimeGateway::python_at(&python, "gateway.py"), minor);
        ran.push(version);
    }
    eprintln!("SUMMARY live_stacks python frames on CPython {ran:?}");
}

/// The asyncio loop of `gateway` (CPython `minor`, `3.11`) blocked in `time.sleep`: the alert's
/// live stack names `clock_nanosleep` in glibc, `time_sleep` in libpython below it, and the Python
/// function that called it below that.
fn python_blocked_in_sleep(gateway: RuntimeGateway, minor: &str) {
    let blocked = Blocked { fault: "sleep", slow: Duration::from_millis(100), loop_thread: PYTHON_LOOP_THREAD };
    let (mut scenario, stack, (sleep, time_sleep)) = blocked.stack(gateway, "clock_nanosleep", "time_sleep");
    assert!(stack[sleep].contains("libc.so.6"), "{minor}: {stack:#?}");
    assert!(stack[time_sleep].contains(&format!("libpython{minor}")), "{minor}: {stack:#?}");
    // The eval loop's native frames are replaced by the Python frames they run.
    let python = stack.iter().position(|f| f.starts_with("block (gateway.py:"));
    assert!(python.is_some_and(|at| at > time_sleep), "{minor}: the Python function that called it: {stack:#?}");
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

/// The live stack is asked for at the alert's first tick, while it is pending (1 s, two of the
/// observer's 500 ms ticks, before it fires), and comes back by the next tick: it is in the
/// evidence when the alert fires, one tick later at the latest (issue 17), plus 300 ms for the
/// tests' polling and a loaded host.
const STACK_WITHIN: Duration = Duration::from_millis(500 + 300);

/// A fault that blocks a single-loop gateway's loop thread.
struct Blocked {
    fault: &'static str,
    /// A request at least this slow proves the fault is in effect.
    slow: Duration,
    loop_thread: &'static str,
}

impl Blocked {
    /// `gateway` healthy under load, then broken: EventLoopBlocked must name the loop thread and
    /// its evidence carry a live stack with a frame holding `inner` above one holding `outer`,
    /// none of them a raw address. The scenario (still broken), that stack and the two frames'
    /// places in it.
    fn stack(&self, gateway: RuntimeGateway, inner: &str, outer: &str) -> (Scenario, Vec<String>, (usize, usize)) {
        let mut scenario = Scenario::healthy(gateway, 4, Duration::from_millis(5), Duration::from_secs(4));
        let latency = scenario.fault(self.fault);
        assert!(latency >= self.slow, "the fault is not in effect: a request took {latency:?}");
        let (alert, _) = scenario.detected("EventLoopBlocked", Duration::from_secs(15));
        assert_eq!(alert["subject"], self.loop_thread, "{alert:#}");
        let ((stack, places), after) = wait_for_evidence(&scenario.observer, "EventLoopBlocked", STACK_WITHIN, |e| {
            live_stack(e).and_then(|s| frames_in_order(&s, inner, outer).map(|places| (s, places)))
        });
        eprintln!("LIVE_STACK {} frames, {:.1}s after firing: {stack:#?}", stack.len(), after.as_secs_f64());
        // The whole alert, as the README shows one.
        let alerts = scenario.observer.alerts();
        let alert = alerts.iter().find(|a| a["kind"] == "EventLoopBlocked" && live_stack(&a["evidence"]).is_some());
        eprintln!("LIVE_STACK_ALERT {}", alert.map(|a| a.to_string()).unwrap_or_default());
        assert!(stack.iter().all(|f| !f.starts_with("0x") && !f.contains("(0x")), "a raw address: {stack:#?}");
        (scenario, stack, places)
    }
}

/// Node's loop blocked in `Atomics.wait` (a timed futex wait, as `runtime_node`'s fault), with
/// `--perf-basic-prof`: the unwind goes from glibc through V8's C++ (`Builtin_AtomicsWait`, in
/// the node binary's symbol table) into V8's builtins, named from `/tmp/perf-PID.map`
/// (`Builtin:CEntry_…+0x36 [jit]`; the map is looked up first, and without it they are the
/// binary's `Builtins_CEntry_…`, so the test fails without the flag).
/// The JavaScript functions' code is in memory no file backs, with no unwind tables but with frame
/// pointers: the unwind goes through it by frame pointer, so the fixture's blocking function
/// (`JS:^block …`, its tier `~` interpreted, `^` baseline, `*` optimized) is named between the
/// builtin it called and V8's entry from C++.
#[test]
fn node_builtins_are_named_from_its_perf_map() {
    if !tests::privileged(module_path!()) {
        return;
    }
    let _serial = tests::serial();
    // V8 writes a log of its own beside the map: into the test's directory, not the working one.
    let log = tests::temp_dir("node-perf-map").join("v8.log");
    let gateway =
        RuntimeGateway::node_with(&["--perf-basic-prof", &format!("--logfile={}", log.display())], "gateway.js");
    // V8 leaves its map behind when the process ends.
    let _perf_map = RemovedOnDrop(format!("/tmp/perf-{}.map", gateway.pid()));
    let blocked = Blocked { fault: "atomics-timed", slow: Duration::from_millis(150), loop_thread: NODE_LOOP_THREAD };
    let (mut scenario, stack, (wait, jit)) = blocked.stack(gateway, "Builtin_AtomicsWait", " [jit]");
    assert!(stack[wait].ends_with("(node)"), "V8's C++ is named from the binary: {stack:#?}");
    assert!(stack[jit].starts_with("Builtin:CEntry"), "the builtin that called it, from the perf map: {stack:#?}");
    let entry = stack.iter().position(|f| f.starts_with("Builtin:JSEntry"));
    assert!(entry.is_some(), "into V8's entry from C++: {stack:#?}");
    let block = stack.iter().position(|f| js_function(f) == Some("block"));
    assert!(block.is_some_and(|at| at > jit && Some(at) < entry), "the JavaScript function that blocked: {stack:#?}");
    assert!(stack.iter().any(|f| f.starts_with("uv_run")), "down to libuv's loop: {stack:#?}");
    scenario.healed("EventLoopBlocked", Duration::from_secs(20));
    assert!(scenario.finish() > 50, "the load barely ran");
}

/// The function a V8 perf-map frame names: `JS:^block /path/gateway.js:43:16+0x2c [jit]` → `block`.
fn js_function(frame: &str) -> Option<&str> {
    let name = frame.strip_prefix("JS:")?.trim_start_matches(['~', '^', '+', '*']);
    name.split([' ', '+']).next()
}

/// A file the test made a process write, removed when the test ends, also when it fails.
struct RemovedOnDrop(String);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
