//! The course the JVM runtime suites share (`runtime_jvm`, `runtime_tomcat`): bounded load in
//! batches, the observer started on a warmed-up fixture, a healthy phase that must be quiet, a
//! fault switched on over the fixture's stdin, detection, the heal and resolution, with what the
//! observer saw printed when an alert does not come.

use std::{
    sync::{Arc, atomic::AtomicBool},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    alerts::{alerts_of, assert_quiet, wait_resolved},
    http_client::try_request,
    jvm::{JvmGateway, thread_census},
    load::{assert_running, load_paced, stop, stop_flag},
    metrics,
    observer::Observer,
};

pub const HEALTHY: Duration = Duration::from_secs(6);
pub const DETECT_WITHIN: Duration = Duration::from_secs(15);
pub const RESOLVE_WITHIN: Duration = Duration::from_secs(20);
/// Every load loop ends by this long after it started, whatever happens to the test.
pub const LOAD_AT_MOST: Duration = Duration::from_secs(75);

/// Client load: `clients` threads, each pausing `pause` between requests.
#[derive(Clone, Copy)]
pub struct Shape {
    pub clients: usize,
    pub pause: Duration,
}

/// Bounded load started in batches of 10 clients 50 ms apart, so that a pool does not see all
/// the clients' first requests at the same instant.
pub struct Load {
    flag: Arc<AtomicBool>,
    clients: Vec<JoinHandle<usize>>,
}

impl Load {
    pub fn start(port: u16, path: &'static str, shape: Shape) -> Load {
        let flag = stop_flag();
        let deadline = Instant::now() + LOAD_AT_MOST;
        let mut clients = Vec::new();
        let mut left = shape.clients;
        while left > 0 {
            let batch = left.min(10);
            clients.extend(load_paced(port, path, batch, shape.pause, flag.clone(), deadline));
            left -= batch;
            if left > 0 {
                thread::sleep(Duration::from_millis(50));
            }
        }
        Load { flag, clients }
    }

    /// Stops the clients and returns the requests they made.
    pub fn finish(self) -> usize {
        stop(&self.flag);
        self.clients.into_iter().map(|c| c.join().unwrap_or(0)).sum()
    }
}

/// Lets the JIT compile the serving path under the load (4 s or 1500 requests at most) before
/// the observer attaches: a cold JVM interprets its first requests, and then once ran one
/// 180 ms iteration on HTTP-Dispatcher's CPU (a real long iteration, but the JVM warming up, not
/// what these scenarios are about).
pub fn warm_up(gateway: &mut JvmGateway) {
    let end = Instant::now() + Duration::from_secs(4);
    while Instant::now() < end && gateway.stat("served") < 1500 {
        thread::sleep(Duration::from_millis(200));
    }
}

/// One request's latency on a fresh connection, measured on a thread of its own (under a fault it
/// may take seconds); join it for the duration, or None if the request failed.
pub fn timed_request(port: u16, path: &'static str) -> JoinHandle<Option<Duration>> {
    thread::spawn(move || {
        let start = Instant::now();
        let r = try_request(port, "GET", path, &[], b"", Duration::from_secs(30)).ok()?;
        (r.status == 200).then(|| start.elapsed())
    })
}

/// The offcpu seconds of `pid`'s thread groups by reason, from the observer's metrics.
pub fn offcpu_by_group(observer: &Observer) -> Vec<metrics::Sample> {
    metrics::parse(&observer.metrics())
        .into_iter()
        .filter(|s| s.name == "gateway_observer_thread_offcpu_seconds_total")
        .collect()
}

/// For a miss: what the observer said about the threads that matter, compactly. The off-CPU
/// seconds per reason of the thread groups named by `groups` since `before` (a metrics sample
/// taken when the fault started), the snapshot's event loops and thread groups, and every alert.
pub fn explain(observer: &Observer, pid: u32, groups: &[&str], before: &[metrics::Sample]) -> String {
    let now = offcpu_by_group(observer);
    let mut out = String::new();
    for group in groups {
        let mut reasons: Vec<(String, f64)> = now
            .iter()
            .filter(|s| s.labels.get("thread_group").is_some_and(|g| g == group))
            .map(|s| {
                let reason = s.labels.get("reason").cloned().unwrap_or_default();
                let earlier = metrics::sum(before, &s.name, &[("thread_group", group), ("reason", &reason)]);
                (reason, s.value - earlier)
            })
            .filter(|(_, v)| *v > 0.005)
            .collect();
        reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
        let reasons: Vec<String> = reasons.iter().map(|(r, v)| format!("{r} {v:.2}s")).collect();
        out.push_str(&format!("  off-CPU of {group} since the fault: {}\n", reasons.join(", ")));
    }
    if let Some((_, body)) = observer.get("/api/v1/snapshot")
        && let Ok(snapshot) = serde_json::from_str::<Value>(&body)
    {
        let loops: Vec<String> = snapshot["event_loops"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["pid"] == pid)
            .map(|l| format!("{}({}) util {}", l["thread"], l["tid"], l["utilization"]))
            .collect();
        out.push_str(&format!("  snapshot event loops: {}\n", loops.join(", ")));
        for process in snapshot["processes"].as_array().into_iter().flatten().filter(|p| p["pid"] == pid) {
            let threads: Vec<String> = process["thread_groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| groups.iter().any(|name| g["name"] == *name))
                .map(Value::to_string)
                .collect();
            out.push_str(&format!("  snapshot thread groups: {}\n", threads.join(" ")));
            out.push_str(&format!(
                "  snapshot cpu {} inbound {} listeners {}\n",
                process["cpu"], process["inbound"], process["listeners"]
            ));
        }
    }
    let alerts: Vec<String> = observer
        .alerts()
        .iter()
        .map(|a| format!("{} {} {}: {}", a["kind"], a["subject"], a["state"], a["summary"]))
        .collect();
    out.push_str(&format!("  alerts: {alerts:#?}\n"));
    out
}

/// Polls until an alert of `kind` fires, `within` of `start` (the fault's switch, or the
/// observer's start); returns it with the time since `start`. On a miss panics with `explain`.
pub fn expect_firing(
    observer: &Observer,
    pid: u32,
    kind: &str,
    (start, within): (Instant, Duration),
    groups: &[&str],
    before: &[metrics::Sample],
) -> (Value, Duration) {
    loop {
        if let Some(alert) = alerts_of(&observer.alerts(), kind, "firing").into_iter().next() {
            return (alert, start.elapsed());
        }
        if start.elapsed() >= within {
            panic!(
                "no {kind} firing {within:?} into the fault; what the observer saw:\n{}",
                explain(observer, pid, groups, before)
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The common course: load, observer, healthy phase, fault, detection, heal, resolution.
pub struct Scenario {
    pub name: String,
    pub gateway: JvmGateway,
    pub path: &'static str,
    /// Thread groups (the observer's names) and the kernel-name prefixes to census.
    pub groups: Vec<&'static str>,
    pub census: Vec<&'static str>,
    pub load: Option<Load>,
    pub observer: Option<Observer>,
    /// When the fixture acknowledged the fault: detection is timed from here.
    pub fault_at: Option<Instant>,
}

impl Scenario {
    pub fn new(
        name: &str,
        gateway: JvmGateway,
        path: &'static str,
        groups: &[&'static str],
        census: &[&'static str],
    ) -> Self {
        Scenario {
            name: name.to_owned(),
            gateway,
            path,
            groups: groups.to_vec(),
            census: census.to_vec(),
            load: None,
            observer: None,
            fault_at: None,
        }
    }

    pub fn observer(&self) -> &Observer {
        self.observer.as_ref().expect("observer started")
    }

    pub fn print_census(&self, phase: &str) {
        for prefix in &self.census {
            eprintln!("{} {phase}: {}", self.name, thread_census(self.gateway.pid(), prefix, 10));
        }
    }

    /// Load starts, then the observer; the healthy phase must be quiet.
    pub fn healthy(&mut self, shape: Shape) {
        self.load = Some(Load::start(self.gateway.port, self.path, shape));
        warm_up(&mut self.gateway);
        self.observer = Some(Observer::start(self.gateway.pid()));
        let latency = timed_request(self.gateway.port, self.path).join().ok().flatten();
        self.print_census("healthy");
        eprintln!("{} healthy: a request took {latency:?}", self.name);
        assert_quiet(self.observer(), HEALTHY);
        if let Some(load) = &self.load {
            assert_running(&load.clients);
        }
    }

    /// Switches `fault` on; returns the latency of a request sent right after, with the
    /// metrics as they were when it started (for `explain`).
    pub fn fault(&mut self, fault: &str) -> Vec<metrics::Sample> {
        let before = offcpu_by_group(self.observer());
        self.gateway.fault(fault);
        self.fault_at = Some(Instant::now());
        let probe = timed_request(self.gateway.port, self.path);
        thread::sleep(Duration::from_millis(500));
        self.print_census(&format!("fault {fault}"));
        let latency = probe.join().ok().flatten();
        eprintln!("{} fault {fault}: a request took {latency:?}", self.name);
        before
    }

    pub fn detected(&self, kind: &str, before: &[metrics::Sample]) -> (Value, Duration) {
        let start = self.fault_at.expect("a fault switched on");
        let (alert, after) =
            expect_firing(self.observer(), self.gateway.pid(), kind, (start, DETECT_WITHIN), &self.groups, before);
        eprintln!(
            "{}: {kind} firing {after:.2?} after the fault: {} {}",
            self.name, alert["subject"], alert["summary"]
        );
        (alert, after)
    }

    pub fn healed(&mut self, kind: &str) -> Duration {
        self.gateway.heal();
        let resolved = wait_resolved(self.observer(), kind, RESOLVE_WITHIN);
        eprintln!("{}: {kind} resolved {resolved:.2?} after the heal", self.name);
        resolved
    }

    pub fn finish(mut self) -> usize {
        let served = self.load.take().map_or(0, Load::finish);
        eprintln!("{}: the load made {served} requests", self.name);
        served
    }
}

/// How long a cold start is watched: past the JIT's first tier-4 compilations of the serving path.
pub const COLD_START: Duration = Duration::from_secs(12);

/// A cold start under load: the observer watches `gateway` from its first request, `clients`
/// clients start cold with no warm-up (class loading, the interpreter and the JIT's first
/// compilations, young GCs and safepoints all the while), and nothing may fire for
/// `COLD_START`; reported as `runtime`'s quiet scenario. The observer is returned for more
/// checks.
pub fn cold_start_is_quiet(runtime: &str, gateway: &JvmGateway, clients: usize) -> Observer {
    let observer = Observer::start(gateway.pid());
    let load = Load::start(gateway.port, "/api/x", Shape { clients, pause: Duration::from_millis(1) });
    assert_quiet(&observer, COLD_START);
    let served = load.finish();
    crate::summary::quiet(runtime, "cold start under load", COLD_START);
    eprintln!("{runtime} cold start: {served} requests");
    assert!(served > 500, "the load barely ran: {served} requests");
    observer
}
