//! Incident 1, end to end: the reference gateway's access check calls Redis with a synchronous
//! client on its runtime's worker threads, Redis becomes slow, and the observer — attached from
//! outside with the real probes — names the blocked event loops within seconds, with evidence,
//! and resolves the alert once Redis is fast again. With the same load and no fault it is quiet.

mod reference_gateway_support;

use std::{
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use reference_gateway_support::{Gateway, Redis, Upstream, Behavior, free_port, try_request};
use serde_json::Value;

/// The observer daemon as a child, stopped on drop.
struct Observer {
    child: Child,
    port: u16,
}

impl Observer {
    fn start(pid: u32) -> Observer {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_gateway-observer"))
            .args(["run", "--target", &format!("pid={pid}"), "--listen", &format!("127.0.0.1:{port}")])
            .args(["--interval", "500ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gateway-observer");
        let observer = Observer { child, port };
        let end = Instant::now() + Duration::from_secs(30);
        while observer.get("/ready").map(|(s, _)| s) != Some(200) {
            assert!(Instant::now() < end, "observer not ready within 30 s");
            thread::sleep(Duration::from_millis(100));
        }
        observer
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = try_request(self.port, "GET", path, &[], b"", Duration::from_secs(5)).ok()?;
        Some((r.status, r.body))
    }

    fn alerts(&self) -> Vec<Value> {
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

fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "needs root to load eBPF programs, and CI=true");
    eprintln!("SKIPPED: needs root to load eBPF programs");
    false
}

/// Protected requests from `clients` threads until `stop`, each bounded by a deadline.
fn load(port: u16, clients: usize, stop: Arc<AtomicBool>, deadline: Instant) -> Vec<thread::JoinHandle<usize>> {
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && done < 200_000 {
                    let _ = try_request(port, "GET", "/api/x", &[("Authorization", "Bearer tok")], b"", Duration::from_secs(10));
                    done += 1;
                }
                done
            })
        })
        .collect()
}

fn event_loop_alerts(alerts: &[Value], state: &str) -> Vec<Value> {
    alerts.iter().filter(|a| a["kind"] == "EventLoopBlocked" && a["state"] == state).cloned().collect()
}

#[test]
fn a_slow_redis_behind_a_blocking_client_is_named_within_seconds() {
    if !privileged() {
        return;
    }
    let Some(redis) = Redis::start() else { return };
    let up = Upstream::start("up", Behavior::Echo);
    let config = format!(
        r#"
        [redis]
        url = "{}"
        timeout = "5s"
        [faults]
        redis_client = "blocking"
        [upstreams.u]
        servers = ["{}"]
        [[routes]]
        path_prefix = "/api/"
        upstream = "u"
        access_check = "protected"
        "#,
        redis.url(),
        up.addr()
    );
    let gw = Gateway::start_with(&config, "workers = 4");
    let mut con = redis.conn();
    let _: () = redis::cmd("SET").arg("tok").arg(r#"{"userId":"u-1"}"#).query(&mut con).expect("SET token");
    let observer = Observer::start(gw.pid());

    // Healthy phase: steady load, no fault, no alert.
    let healthy_for = Duration::from_secs(
        std::env::var("HEALTHY_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + healthy_for + Duration::from_secs(60);
    let clients = load(gw.port, 4, stop.clone(), deadline);
    let healthy_end = Instant::now() + healthy_for;
    while Instant::now() < healthy_end {
        let raised: Vec<Value> = observer.alerts();
        assert!(raised.is_empty(), "alerts in the healthy phase: {raised:#?}");
        thread::sleep(Duration::from_millis(500));
    }

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
    let fault_start = Instant::now();
    let firing = loop {
        let firing = event_loop_alerts(&observer.alerts(), "firing");
        if !firing.is_empty() {
            break firing;
        }
        if fault_start.elapsed() >= Duration::from_secs(5) {
            let (_, snapshot) = observer.get("/api/v1/snapshot").unwrap_or_default();
            let (_, metrics) = observer.get("/metrics").unwrap_or_default();
            let relevant: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("gateway_observer_event_loop") || (l.contains("gw-worker") && !l.starts_with('#')))
                .collect();
            panic!(
                "no EventLoopBlocked firing 5 s into the fault; alerts {:#?}\nsnapshot {snapshot}\n{}",
                observer.alerts(),
                relevant.join("\n")
            );
        }
        thread::sleep(Duration::from_millis(100));
    };
    let detected_after = fault_start.elapsed();
    eprintln!("EventLoopBlocked firing {detected_after:?} after the fault started: {:#}", firing[0]);
    let alert = &firing[0];
    assert!(alert["subject"].as_str().is_some_and(|s| s.starts_with("gw-worker-")), "{alert:#}");
    assert_eq!(alert["process"]["pid"], gw.pid());
    assert_eq!(alert["evidence"]["reason"], "socket", "a synchronous Redis read: {alert:#}");
    assert!(alert["evidence"]["blocked_share"].as_f64().is_some_and(|s| s >= 0.2), "{alert:#}");

    // Redis fast again: the alerts resolve.
    slow.store(false, Ordering::Relaxed);
    let _ = slow_redis.join();
    let fixed_at = Instant::now();
    loop {
        let alerts = observer.alerts();
        let open: Vec<&Value> =
            alerts.iter().filter(|a| a["kind"] == "EventLoopBlocked" && a["state"] != "resolved").collect();
        if open.is_empty() && !event_loop_alerts(&alerts, "resolved").is_empty() {
            break;
        }
        assert!(fixed_at.elapsed() < Duration::from_secs(20), "still open 20 s after the fix: {open:#?}");
        thread::sleep(Duration::from_millis(250));
    }
    eprintln!("resolved {:?} after Redis was fast again", fixed_at.elapsed());
    stop.store(true, Ordering::Relaxed);
    let served: usize = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    assert!(served > 100, "the load made only {served} requests");
}
