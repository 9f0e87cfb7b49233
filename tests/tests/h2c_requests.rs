//! HTTP/2 cleartext (h2c, prior knowledge) end to end: h2load (Debian's `nghttp2-client`) against
//! the reference gateway in front of a loopback upstream that takes 2 ms per request. h2load
//! sends a fixed number of requests, so none is abandoned at its end: the observer's count of
//! the gateway's streams must equal h2load's exactly, each proxied once, and the observer's p50
//! must be within 10 % of the p50 of h2load's per-request log.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tests::{
    observer::Observer,
    privileged,
    reference_gateway::Gateway,
    temp_dir,
    upstream::{Behavior, Upstream},
    wrk::{UPSTREAM_DELAY, metric_sum, observed},
};

const REQUESTS: u64 = 3000;
const CONNECTIONS: u64 = 8;
/// h2load at this load takes about 1 s; beyond this it is killed and the test fails.
const H2LOAD_DEADLINE: Duration = Duration::from_secs(60);

struct H2load {
    succeeded: u64,
    p50_seconds: f64,
}

/// Runs h2load (`streams` at a time per connection) and reads its count and per-request log.
fn h2load(url: &str, streams: u32) -> H2load {
    let log = temp_dir("h2load").join("requests.log");
    let mut child = Command::new("h2load")
        .args(["-n", &REQUESTS.to_string(), "-c", &CONNECTIONS.to_string(), "-m", &streams.to_string()])
        .arg(format!("--log-file={}", log.display()))
        .arg(url)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run h2load (cargo xtask setup installs nghttp2-client)");
    let start = Instant::now();
    while child.try_wait().expect("wait for h2load").is_none() {
        if start.elapsed() > H2LOAD_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("h2load ran over {H2LOAD_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("h2load output");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "h2load failed: {text}");
    // "requests: 3000 total, 3000 started, 3000 done, 3000 succeeded, 0 failed, ..."
    let line = text.lines().find(|l| l.starts_with("requests:")).unwrap_or_else(|| panic!("h2load: {text}"));
    let field = |name: &str| -> u64 {
        line.split(',').find_map(|f| f.trim().strip_suffix(name)?.trim().rsplit(' ').next()?.parse().ok()).unwrap()
    };
    assert_eq!((field("succeeded"), field("failed")), (REQUESTS, 0), "{text}");
    assert!(text.contains(&format!("status codes: {REQUESTS} 2xx")), "{text}");
    // Tab-separated: start (µs since the epoch), status, µs until the end of the response.
    let mut micros: Vec<u64> = std::fs::read_to_string(&log)
        .expect("h2load's log")
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    assert_eq!(micros.len() as u64, REQUESTS, "one log line per request");
    micros.sort_unstable();
    let p50_seconds = micros[micros.len() / 2] as f64 * 1e-6;
    eprintln!("h2load: {} succeeded, p50 {:.3} ms", field("succeeded"), p50_seconds * 1e3);
    H2load { succeeded: field("succeeded"), p50_seconds }
}

#[test]
fn reference_gateway_h2c_streams_match_h2load() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let gw = Gateway::start(&format!(
        "[upstreams.items]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"items\"\n",
        upstream.addr()
    ));
    let observer = Observer::start(gw.pid());
    let url = format!("http://127.0.0.1:{}/api/items", gw.port);
    let load = h2load(&url, 1);
    // The last responses reach the observer a tick later.
    std::thread::sleep(Duration::from_millis(1500));
    let (inbound, outbound, p50) = observed(&observer);
    assert_eq!(inbound, load.succeeded as f64, "observer's h2c streams vs h2load's requests");
    assert_eq!(outbound, inbound, "each stream is proxied once over HTTP/1.1");
    let ratio = p50 / load.p50_seconds;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "observer p50 {:.3} ms vs h2load {:.3} ms",
        p50 * 1e3,
        load.p50_seconds * 1e3
    );

    // Eight streams at a time: the gateway writes several streams' frames in one syscall, and
    // those past its first 512 bytes are not copied. The walk loses sync there and ends the
    // streams open then (their status unseen): still every stream is counted once.
    let total = || metric_sum(&observer.metrics(), "gateway_observer_http_requests_total", &[("direction", "inbound")]);
    let before = total();
    let load = h2load(&url, 8);
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = observer.metrics();
    let unseen = metric_sum(
        &metrics,
        "gateway_observer_http_requests_total",
        &[("direction", "inbound"), ("status_class", "none")],
    );
    let resyncs = metric_sum(&metrics, "gateway_observer_http_parse_resyncs_total", &[]);
    eprintln!("multiplexed: {} streams counted, {unseen} without a status, {resyncs} resyncs", total() - before);
    assert_eq!(total() - before, load.succeeded as f64, "multiplexed streams vs h2load's requests");
}
