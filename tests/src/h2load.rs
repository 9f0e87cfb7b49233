//! h2load (Debian's `nghttp2-client`) as the client of HTTP/2 tests: a fixed number of requests
//! (none abandoned at its end, so counts compare exactly), bounded in time, and the p50 of its
//! per-request log.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    observer::Observer,
    temp_dir,
    wrk::{metric_sum, observed},
};

pub const REQUESTS: u64 = 3000;
pub const CONNECTIONS: u64 = 8;
/// h2load at this load takes about 1 s; beyond this it is killed and the test fails.
const H2LOAD_DEADLINE: Duration = Duration::from_secs(60);

pub struct H2load {
    pub succeeded: u64,
    pub p50_seconds: f64,
}

/// Runs h2load (`streams` at a time per connection; over TLS for an https URL, h2 by ALPN) and
/// reads its count and per-request log.
pub fn h2load(url: &str, streams: u32) -> H2load {
    let log = temp_dir("h2load").join("requests.log");
    let args = ["-n", &REQUESTS.to_string(), "-c", &CONNECTIONS.to_string(), "-m", &streams.to_string()]
        .map(String::from)
        .into_iter()
        .chain([format!("--log-file={}", log.display())]);
    let succeeded = run(args, url, REQUESTS);
    // Tab-separated: start (µs since the epoch), status, µs until the end of the response.
    let mut micros: Vec<u64> = std::fs::read_to_string(&log)
        .expect("h2load's log")
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    assert_eq!(micros.len() as u64, REQUESTS, "one log line per request");
    micros.sort_unstable();
    let p50_seconds = micros[micros.len() / 2] as f64 * 1e-6;
    eprintln!("h2load: {succeeded} succeeded, p50 {:.3} ms", p50_seconds * 1e3);
    H2load { succeeded, p50_seconds }
}

/// Runs h2load with `args` against `url` (bounded in time) and checks that all of its
/// `requests` succeeded with a 2xx; returns how many did.
pub fn run(args: impl IntoIterator<Item = String>, url: &str, requests: u64) -> u64 {
    let mut child = Command::new("h2load")
        .args(args)
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
    assert_eq!((field("succeeded"), field("failed")), (requests, 0), "{text}");
    assert!(text.contains(&format!("status codes: {requests} 2xx")), "{text}");
    field("succeeded")
}

/// h2load with one stream at a time per connection against a proxy whose upstream takes
/// `UPSTREAM_DELAY`: the observer's inbound streams equal h2load's requests, each is proxied
/// once, and the observer's p50 is within 10 % of h2load's.
pub fn assert_matches_h2load(observer: &Observer, url: &str) {
    let (inbound, outbound) = assert_served_matches_h2load(observer, url);
    assert_eq!(outbound, inbound, "each stream is proxied once over HTTP/1.1");
}

/// As `assert_matches_h2load`, for a server that answers itself (its handler takes the delay):
/// returns the observer's inbound and outbound requests.
pub fn assert_served_matches_h2load(observer: &Observer, url: &str) -> (f64, f64) {
    let load = h2load(url, 1);
    // The last responses reach the observer a tick later.
    std::thread::sleep(Duration::from_millis(1500));
    let (inbound, outbound, p50) = observed(observer);
    assert_eq!(inbound, load.succeeded as f64, "observer's h2 streams vs h2load's requests");
    let ratio = p50 / load.p50_seconds;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "observer p50 {:.3} ms vs h2load {:.3} ms",
        p50 * 1e3,
        load.p50_seconds * 1e3
    );
    (inbound, outbound)
}

/// Streams of the multiplexed run allowed to end without a status where the kernel walks frame
/// headers past the copied head (h2c): a stream the walk could not follow (a write that starts
/// inside a header before its length, or one whose place the kernel lost) still loses it.
pub const WALKED_STATUSLESS_TOLERANCE: f64 = 3.0;

/// h2load with eight streams at a time per connection: every stream counted once. `walked`: the
/// kernel walks the frames past each write's head (h2c, not TLS plaintext yet), so the walk never
/// loses sync and every stream but a few has its status.
pub fn assert_multiplexed_counted(observer: &Observer, url: &str, walked: bool) {
    let (succeeded, counted, statusless, resyncs) = counted_while(observer, || h2load(url, 8).succeeded);
    eprintln!("multiplexed: {counted} streams counted, {statusless} without a status, {resyncs} resyncs");
    assert_eq!(counted, succeeded as f64, "multiplexed streams vs h2load's requests");
    if walked {
        assert_eq!(resyncs, 0.0, "the walk past the head keeps every frame header");
        assert!(statusless <= WALKED_STATUSLESS_TOLERANCE, "{statusless} streams without a status");
    }
}

/// Requests of the run with many streams at a time on one connection.
const MANY_STREAMS_REQUESTS: u64 = 3000;

/// 100 streams at a time on one connection. h2load asks for the next 100 in one write once the
/// last ones are answered, so the server's reads hold about 100 HEADERS frames (some 20 bytes
/// each once HPACK indexes the request): about 25 end inside the 512-byte head and 70 past it,
/// where the kernel's walk goes on past its 32 frame headers in continuation programs. Where it
/// stopped, the userspace walk lost sync (a resync) and the streams whose HEADERS it missed went
/// uncounted (nginx: 1794-1913 of 3000 counted, 26-31 resyncs, before the continuations).
pub fn assert_many_streams_counted(observer: &Observer, url: &str) {
    let args = ["-n", &MANY_STREAMS_REQUESTS.to_string(), "-c", "1", "-m", "100"].map(String::from);
    let (succeeded, counted, statusless, resyncs) = counted_while(observer, || run(args, url, MANY_STREAMS_REQUESTS));
    // Why a walk may have stopped short, for a failure's message: continuations that never came,
    // socket records the ring had no room for.
    let metrics = observer.metrics();
    let cut_short = metric_sum(&metrics, "gateway_observer_http2_walks_cut_short_total", &[]);
    let lost = metric_sum(&metrics, "gateway_observer_bpf_events_lost_total", &[("ring", "sockets")]);
    eprintln!(
        "many streams: {counted} streams counted, {statusless} without a status, {resyncs} resyncs; since start \
         {cut_short} walks cut short, {lost} socket records lost"
    );
    assert_eq!(counted, succeeded as f64, "streams 100 at a time on one connection vs h2load's requests");
    assert_eq!(resyncs, 0.0, "the walk of a transfer of more than 32 frames past its head lost sync");
    assert_eq!(statusless, 0.0, "streams 100 at a time on one connection without a status");
}

/// How many of the streams `load` ran succeeded (it says), and what the observer counted of them:
/// streams, those without a status, parse resyncs.
fn counted_while(observer: &Observer, load: impl FnOnce() -> u64) -> (u64, f64, f64, f64) {
    let before = stream_counts(observer);
    let succeeded = load();
    // The last responses reach the observer a tick later.
    std::thread::sleep(Duration::from_millis(1500));
    let after = stream_counts(observer);
    (succeeded, after.0 - before.0, after.1 - before.1, after.2 - before.2)
}

/// The observer's inbound streams, those without a status, and parse resyncs, so far.
pub fn stream_counts(observer: &Observer) -> (f64, f64, f64) {
    let metrics = observer.metrics();
    let inbound = [("direction", "inbound")];
    (
        metric_sum(&metrics, "gateway_observer_http_requests_total", &inbound),
        metric_sum(&metrics, "gateway_observer_http_requests_total", &[inbound[0], ("status_class", "none")]),
        metric_sum(&metrics, "gateway_observer_http_parse_resyncs_total", &[]),
    )
}

/// Uploads through h2c: `UPLOADS` POSTs of a 27 kB body, four at a time per connection. The
/// gateway reads them in pieces that start inside a DATA frame (8 kB reads of 16 kB frames), so
/// each read's first header lies where the last one's frame ends: the kernel keeps that place
/// per connection and walks from it. Every stream is counted once with its status, and the walk
/// never loses sync.
pub fn assert_uploads_counted(observer: &Observer, url: &str) {
    const UPLOADS: u64 = 1000;
    let body = temp_dir("h2load-body").join("body");
    // Printable, so that an echo of it is a plain HTTP/1.1 body.
    let line: Vec<u8> = (0..99u8).map(|i| b'a' + i % 26).chain([b'\n']).collect();
    std::fs::write(&body, line.repeat(270)).expect("write the upload body");
    let args = ["-n", &UPLOADS.to_string(), "-c", "2", "-m", "4", "-d"].map(String::from).into_iter();
    let (succeeded, counted, statusless, resyncs) =
        counted_while(observer, || run(args.chain([body.display().to_string()]), url, UPLOADS));
    eprintln!("uploads: {counted} streams counted, {statusless} without a status, {resyncs} resyncs");
    assert_eq!(counted, succeeded as f64, "uploaded streams vs h2load's requests");
    assert_eq!(resyncs, 0.0, "a read that starts inside a frame lost the walk");
    assert_eq!(statusless, 0.0, "uploaded streams without a status");
}
