//! wrk as the client of end-to-end request tests: its completed count and p50 against what the
//! observer counted (over every process of the snapshot: nginx has several workers).

use std::{process::Command, time::Duration};

use serde_json::Value;

use crate::observer::Observer;

/// The upstream's think time: long enough that the loopback hops wrk sees and the observer does
/// not (client wakeups, under 0.1 ms here) stay well below the 10 % latency tolerance, short
/// enough that the requests wrk abandons in flight when it stops (one per connection, which it
/// does not count and the gateway may still answer) stay under 0.1 % of the total.
pub const UPSTREAM_DELAY: Duration = Duration::from_millis(2);
const WRK_SECONDS: u64 = 8;
pub const WRK_CONNECTIONS: usize = 16;

pub struct WrkResult {
    pub requests: u64,
    pub p50_seconds: f64,
}

/// Runs wrk (bounded by -d) against `url` (http or https) and reads its request count and p50.
pub fn wrk(url: &str) -> WrkResult {
    let out = Command::new("wrk")
        .args(["-t2", &format!("-c{WRK_CONNECTIONS}"), &format!("-d{WRK_SECONDS}s"), "--latency"])
        .arg(url)
        .output()
        .expect("run wrk (cargo xtask setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("Non-2xx"), "wrk saw errors: {text}");
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.parse().ok()))
        .unwrap_or_else(|| panic!("no request count in wrk output: {text}"));
    let p50 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("50%").map(|v| parse_wrk_duration(v.trim())))
        .unwrap_or_else(|| panic!("no p50 in wrk output: {text}"));
    eprintln!("wrk: {requests} requests, p50 {:.3} ms", p50 * 1e3);
    WrkResult { requests, p50_seconds: p50 }
}

fn parse_wrk_duration(v: &str) -> f64 {
    for (suffix, scale) in [("us", 1e-6), ("ms", 1e-3), ("s", 1.0)] {
        if let Some(n) = v.strip_suffix(suffix) {
            return n.parse::<f64>().expect("wrk duration") * scale;
        }
    }
    panic!("unknown wrk duration {v}")
}

/// Sum of a metric's samples whose labels include all of `want`.
pub fn metric_sum(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| want.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn snapshot(observer: &Observer) -> Value {
    let (status, body) = observer.get("/api/v1/snapshot").expect("GET /api/v1/snapshot");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("snapshot JSON")
}

/// Inbound request counts and p50 over every process of the snapshot (nginx has several workers).
pub fn observed(observer: &Observer) -> (f64, f64, f64) {
    let metrics = observer.get("/metrics").expect("GET /metrics").1;
    // Answered requests, as wrk counts them (a request it abandoned at its end has no response).
    let requests = |direction| {
        let all = metric_sum(&metrics, "gateway_observer_http_requests_total", &[("direction", direction)]);
        all - metric_sum(
            &metrics,
            "gateway_observer_http_requests_total",
            &[("direction", direction), ("status_class", "none")],
        )
    };
    let (inbound, outbound) = (requests("inbound"), requests("outbound"));
    let snap = snapshot(observer);
    // Workers share the load evenly enough that the request-weighted mean of their p50s (plus
    // queue wait, below) stands for the overall p50; one process gives it exactly.
    let mut weighted = 0.0;
    let mut total = 0.0;
    for p in snap["processes"].as_array().into_iter().flatten() {
        let n = p["inbound"]["requests"].as_f64().unwrap_or(0.0);
        weighted += n * p["inbound"]["p50_seconds"].as_f64().unwrap_or(0.0);
        total += n;
    }
    let queue_sum = metric_sum(&metrics, "gateway_observer_http_socket_queue_seconds_sum", &[]);
    let queue_count = metric_sum(&metrics, "gateway_observer_http_socket_queue_seconds_count", &[]);
    let queue_mean = if queue_count > 0.0 { queue_sum / queue_count } else { 0.0 };
    eprintln!(
        "observer: {inbound} inbound, {outbound} outbound, p50 {:.3} ms + mean socket queue {:.3} ms ({queue_count} queued reads)",
        weighted / total.max(1.0) * 1e3,
        queue_mean * 1e3
    );
    (inbound, outbound, weighted / total.max(1.0) + queue_mean)
}

pub fn assert_matches_wrk(observer: &Observer, url: &str) {
    let wrk = wrk(url);
    // Responses still being written when wrk stopped reach the observer a tick later.
    std::thread::sleep(Duration::from_millis(1500));
    let (inbound, outbound, p50) = observed(observer);
    let diff = (inbound - wrk.requests as f64).abs() / wrk.requests as f64;
    assert!(
        diff <= 0.001,
        "observer counted {inbound} inbound requests, wrk {}: {:.3} % apart",
        wrk.requests,
        diff * 100.0
    );
    assert!(
        (outbound - inbound).abs() / inbound <= 0.001,
        "{outbound} outbound vs {inbound} inbound: each request is proxied once"
    );
    let ratio = p50 / wrk.p50_seconds;
    assert!((0.9..=1.1).contains(&ratio), "observer p50 {:.3} ms vs wrk {:.3} ms", p50 * 1e3, wrk.p50_seconds * 1e3);
}
