//! The daemon symbolizes a blocked event loop's stack as root, through files the target (or any
//! local user) arranges. A FIFO at /tmp/perf-PID.map, which any user can create for any pid,
//! used to stall the daemon's tick for good once that stack was symbolized: /metrics stopped
//! answering. Here a real Python asyncio gateway blocks its loop with `time.sleep` while such a
//! FIFO waits for it; the stack must arrive, /metrics must keep answering, and the refusal must be
//! counted. Privileged (the daemon loads eBPF); every process ends on drop.

use std::{
    ffi::CString,
    path::PathBuf,
    thread,
    time::{Duration, Instant},
};

use tests::{
    alerts::blocked_stack,
    metrics, privileged,
    runtimes::{RuntimeGateway, Scenario},
    serial,
};

/// A FIFO at `path`, removed on drop.
struct Fifo(PathBuf);

impl Fifo {
    fn create(path: PathBuf) -> Fifo {
        let _ = std::fs::remove_file(&path);
        let c = CString::new(path.to_string_lossy().into_owned()).expect("path");
        // SAFETY: a NUL-terminated path of ours.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo {}", path.display());
        Fifo(path)
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_fifo_perf_map_does_not_stall_the_daemon() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let gateway = RuntimeGateway::python("gateway.py");
    let _fifo = Fifo::create(PathBuf::from(format!("/tmp/perf-{}.map", gateway.pid())));
    let mut scenario = Scenario::healthy(gateway, 2, Duration::from_millis(5), Duration::from_secs(2));
    scenario.fault("sleep");

    // Until a stack is in the evidence, and for 3 s after (three ticks that symbolize it), every
    // GET /metrics must be answered.
    let started = Instant::now();
    let mut stack_at: Option<Instant> = None;
    let text = loop {
        let Some((200, text)) = scenario.observer.get("/metrics") else {
            panic!(
                "/metrics not answered {:.1}s into the fault ({}): the daemon stalled",
                started.elapsed().as_secs_f64(),
                if stack_at.is_some() { "a stack was symbolized" } else { "no stack yet" }
            );
        };
        if stack_at.is_none()
            && let Some((200, body)) = scenario.observer.get("/api/v1/alerts")
            && let Ok(alerts) = serde_json::from_str::<serde_json::Value>(&body)
            && let Some(stack) = blocked_stack(alerts["alerts"].as_array().map_or(&[], |a| a.as_slice()))
        {
            eprintln!("stack after {:.1}s: {stack:#?}", started.elapsed().as_secs_f64());
            stack_at = Some(Instant::now());
        }
        if stack_at.is_some_and(|at| at.elapsed() > Duration::from_secs(3)) {
            break text;
        }
        assert!(started.elapsed() < Duration::from_secs(25), "no EventLoopBlocked stack within 25 s of the fault");
        thread::sleep(Duration::from_millis(200));
    };
    let samples = metrics::parse(&text);
    let refused = metrics::sum(&samples, "gateway_observer_symbol_files_refused_total", &[("reason", "not_regular")]);
    assert!(refused >= 1.0, "the FIFO was not counted as refused: {refused}");
    assert!(scenario.finish() > 10, "the load barely ran");
}
