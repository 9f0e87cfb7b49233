//! Helpers for the incident scenarios: the real observer daemon attached to a real gateway,
//! the privilege gate, and bounded client load.
#![allow(dead_code, reason = "each test file uses a different part of the support module")]

use std::{
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::reference_gateway_support::{free_port, try_request};

/// The observer daemon as a child, stopped on drop.
pub struct Observer {
    child: Child,
    pub port: u16,
}

impl Observer {
    pub fn start(pid: u32) -> Observer {
        Self::start_with_targets(&[&format!("pid={pid}")])
    }

    /// The daemon watching `targets` (each a `--target` value: `port=8080`, `cgroup=/x`).
    pub fn start_with_targets(targets: &[&str]) -> Observer {
        Self::start_with(targets, &[])
    }

    /// As `start_with_targets`, with more `run` arguments (a `--config FILE`: the flags given
    /// here override it).
    pub fn start_with(targets: &[&str], extra: &[&str]) -> Observer {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_gateway-observer"))
            .arg("run")
            .args(extra)
            .args(targets.iter().flat_map(|t| ["--target", t]))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            // Nice 0, not the default 10: here the load generators share the two CPUs with the
            // daemon, and the tests time detection, not the daemon's manners.
            .args(["--interval", "500ms", "--nice", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gateway-observer");
        let mut observer = Observer { child, port };
        let end = Instant::now() + Duration::from_secs(30);
        while observer.get("/ready").map(|(s, _)| s) != Some(200) {
            if let Ok(Some(status)) = observer.child.try_wait() {
                panic!("gateway-observer exited before it was ready: {status}");
            }
            assert!(Instant::now() < end, "observer not ready within 30 s");
            thread::sleep(Duration::from_millis(100));
        }
        observer
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = try_request(self.port, "GET", path, &[], b"", Duration::from_secs(5)).ok()?;
        Some((r.status, r.body))
    }

    pub fn alerts(&self) -> Vec<Value> {
        let (status, body) = self.get("/api/v1/alerts").expect("GET /api/v1/alerts");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("alerts JSON");
        v["alerts"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        // SAFETY: kill with our child's pid and a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "needs root to load eBPF programs, and CI=true");
    eprintln!("SKIPPED: needs root to load eBPF programs");
    false
}

/// Protected requests from `clients` threads until `stop`, each bounded by a deadline.
pub fn load(
    port: u16,
    path: &'static str,
    clients: usize,
    stop: Arc<AtomicBool>,
    deadline: Instant,
) -> Vec<thread::JoinHandle<usize>> {
    load_paced(port, path, clients, Duration::ZERO, stop, deadline)
}

/// As `load`, each client pausing `pause` between requests (a steady, moderate rate).
pub fn load_paced(
    port: u16,
    path: &'static str,
    clients: usize,
    pause: Duration,
    stop: Arc<AtomicBool>,
    deadline: Instant,
) -> Vec<thread::JoinHandle<usize>> {
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && done < 200_000 {
                    let r = try_request(
                        port,
                        "GET",
                        path,
                        &[("Authorization", "Bearer tok")],
                        b"",
                        Duration::from_secs(30),
                    );
                    done += 1;
                    if !r.is_ok_and(|r| r.status == 200) {
                        thread::sleep(Duration::from_millis(20)); // refused: do not spin
                    }
                    thread::sleep(pause);
                }
                done
            })
        })
        .collect()
}

/// Alerts of one kind in one state.
pub fn alerts_of(alerts: &[Value], kind: &str, state: &str) -> Vec<Value> {
    alerts.iter().filter(|a| a["kind"] == kind && a["state"] == state).cloned().collect()
}

/// Polls until an alert of `kind` fires, or panics after `within` with what the observer saw.
pub fn wait_firing(observer: &Observer, kind: &str, within: Duration) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        if let Some(alert) = alerts_of(&observer.alerts(), kind, "firing").into_iter().next() {
            return (alert, start.elapsed());
        }
        if start.elapsed() >= within {
            let (_, snapshot) = observer.get("/api/v1/snapshot").unwrap_or_default();
            panic!("no {kind} firing {within:?} into the fault; alerts {:#?}\nsnapshot {snapshot}", observer.alerts());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Polls until no alert of `kind` is open and at least one resolved, or panics after `within`.
pub fn wait_resolved(observer: &Observer, kind: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let alerts = observer.alerts();
        let open: Vec<&Value> = alerts.iter().filter(|a| a["kind"] == kind && a["state"] != "resolved").collect();
        if open.is_empty() && !alerts_of(&alerts, kind, "resolved").is_empty() {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{kind} still open {within:?} after the fix: {open:#?}");
        thread::sleep(Duration::from_millis(250));
    }
}

/// Asserts no alert is raised for `duration`, polling.
pub fn assert_quiet(observer: &Observer, duration: Duration) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let raised = observer.alerts();
        assert!(raised.is_empty(), "alerts in the healthy phase: {raised:#?}");
        thread::sleep(Duration::from_millis(500));
    }
}

pub fn stop_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

pub fn stop(flag: &AtomicBool) {
    flag.store(true, Ordering::Relaxed);
}
