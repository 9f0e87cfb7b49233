//! HTTP/2 flow-control stalls end to end: nginx serving static files over h2c (prior knowledge,
//! `listen ... http2`) to h2load, one stream at a time per connection.
//!
//! With 16,383-byte stream windows (`h2load -w 14`) a 1 MiB body cannot go out without nginx
//! waiting for WINDOW_UPDATEs: nghttp2 (h2load's library) grants a stream's window back once at
//! least half of it was consumed, so each response needs from 1 MiB / 16,383 = 64 to
//! 1 MiB / 8,192 = 128 grants, and every stall ends at one. The observer's stalls of nginx as
//! sender must lie within [requests × 32, requests × 129] (at least half of the grants ended a
//! stall; at most one stall per grant plus one per stream), with stalled time under the run's.
//! Controls: the same file with h2load's default 1 GiB windows, and a 10,000-byte body that fits
//! the small window: no stall in either.
//!
//! Then a connection held open on a stall (a hand-made h2c client that never grants window): its
//! stall shows in /metrics while the connection is open, its seconds growing with the wait (within
//! a tick of it), and the close neither counts it again nor takes any of its time back. nginx
//! takes one stream at a time per connection here (h2load's runs use one), so a second stream
//! on the held connection is refused (REFUSED_STREAM): counted while open, and once.

use std::time::{Duration, Instant};

use tests::{h2c::StalledStream, h2load, nginx::Nginx, observer::Observer, privileged, temp_dir, wrk::metric_sum};

const BIG: usize = 1 << 20;
const SMALL: usize = 10_000;
const WINDOW: f64 = 16_383.0;
const REQUESTS: u64 = 40;
const CONNECTIONS: u64 = 2;
/// How old /metrics may be: the observer's interval here (`Observer::start`), and as long again
/// for a tick delayed on a busy host.
const TICK: f64 = 0.5 + 0.5;

/// The observer's stalls and stalled seconds of nginx sending on connections it accepted.
fn stalls(observer: &Observer) -> (f64, f64) {
    let metrics = observer.metrics();
    let labels = [("process", "nginx"), ("direction", "inbound"), ("sender", "gateway")];
    (
        metric_sum(&metrics, "gateway_observer_http2_flow_control_stalls_total", &labels),
        metric_sum(&metrics, "gateway_observer_http2_flow_control_stalled_seconds_total", &labels),
    )
}

/// h2load fetching `url` with `window_bits` stream windows; returns its run time. Its
/// connections are closed when it returns, and counted by the observer a tick later.
fn fetch(url: &str, window_bits: u32) -> Duration {
    let start = Instant::now();
    let args = ["-n", &REQUESTS.to_string(), "-c", &CONNECTIONS.to_string(), "-m", "1", "-w", &window_bits.to_string()];
    h2load::run(args.map(String::from), url, REQUESTS);
    let took = start.elapsed();
    std::thread::sleep(Duration::from_millis(1500));
    took
}

#[test]
fn nginx_h2c_stalls_on_small_client_windows() {
    if !privileged(module_path!()) {
        return;
    }
    let root = temp_dir("h2-flow-root");
    std::fs::write(root.join("big.bin"), vec![b'b'; BIG]).expect("write the big file");
    std::fs::write(root.join("small.bin"), vec![b's'; SMALL]).expect("write the small file");
    let port = tests::free_port();
    // sendfile off: the body goes through writev, where the kernel sees each DATA frame's header
    // first. Chunks of 16 KiB: one DATA frame fills a 16,383-byte window, one frame per write.
    let body = format!(
        "  server {{\n    listen 127.0.0.1:{port} http2;\n    root {};\n    sendfile off;\n    http2_chunk_size 16k;\n    http2_max_concurrent_streams 1;\n  }}",
        root.display()
    );
    let nginx = Nginx::start(&[], 1, &body, ("127.0.0.1", port));
    let observer = Observer::start(nginx.pid());
    let big = format!("http://127.0.0.1:{port}/big.bin");

    fetch(&big, 30);
    let (count, seconds) = stalls(&observer);
    eprintln!("1 GiB windows, 1 MiB bodies: {count} stalls, {seconds:.4} s");
    assert_eq!(count, 0.0, "stalls with windows larger than the bodies");

    fetch(&format!("http://127.0.0.1:{port}/small.bin"), 14);
    let (count, _) = stalls(&observer);
    eprintln!("16 KiB windows, 10,000-byte bodies: {count} stalls");
    assert_eq!(count, 0.0, "stalls with bodies that fit the window");

    let took = fetch(&big, 14);
    let (count, seconds) = stalls(&observer);
    let requests = REQUESTS as f64;
    let grants = BIG as f64 / WINDOW;
    let (low, high) = (requests * (grants / 2.0).floor(), requests * (2.0 * grants + 1.0).ceil());
    eprintln!("16 KiB windows, 1 MiB bodies: {count} stalls in [{low}, {high}], {seconds:.4} s stalled in {took:?}");
    assert!((low..=high).contains(&count), "{count} stalls, want [{low}, {high}]");
    let bound = took.as_secs_f64() * CONNECTIONS as f64;
    assert!(seconds > 0.0 && seconds <= bound, "{seconds} s stalled, at most {bound} s");

    held_open_stall(&observer, port);
}

/// nginx's refused streams (REFUSED_STREAM).
fn refused(observer: &Observer) -> f64 {
    let labels = [("process", "nginx"), ("reason", "refused")];
    metric_sum(&observer.metrics(), "gateway_observer_http2_stream_resets_total", &labels)
}

/// One stall and one refused stream on a connection held open: seen before the close, counted
/// once.
fn held_open_stall(observer: &Observer, port: u16) {
    let before = stalls(observer);
    let refused_before = refused(observer);
    let sent = Instant::now();
    let mut client = StalledStream::open(port, "/big.bin", WINDOW as u32);
    let filled = Instant::now();
    let deadline = filled + Duration::from_secs(5);
    while stalls(observer).0 == before.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let open = stalls(observer);
    // The stall began between the request's sending and the window's filling; the metrics are
    // at most a tick old.
    let (low, high) = (filled.elapsed().as_secs_f64() - TICK, sent.elapsed().as_secs_f64());
    let shown = open.1 - before.1;
    eprintln!("held open: {} stall, {shown:.3} s stalled so far, want [{low:.3}, {high:.3}]", open.0 - before.0);
    assert_eq!(open.0 - before.0, 1.0, "the stall of the connection still open");
    assert!((low..=high).contains(&shown), "{shown} s stalled while open, want [{low}, {high}]");
    assert_eq!(client.reset_code(3), 7, "nginx's answer to a second stream: REFUSED_STREAM");
    let deadline = Instant::now() + Duration::from_secs(5);
    while refused(observer) == refused_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let refused_open = refused(observer) - refused_before;
    eprintln!("held open: {refused_open} stream refused");
    assert_eq!(refused_open, 1.0, "the refused stream while the connection is open");
    drop(client);
    let closed_by = sent.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(1500));
    let closed = stalls(observer);
    let total = closed.1 - before.1;
    eprintln!("closed: {} stall, {total:.3} s stalled, want [{shown:.3}, {closed_by:.3}]", closed.0 - before.0);
    assert_eq!(closed.0, open.0, "the close counts the stall again");
    assert!((shown..=closed_by + TICK).contains(&total), "{total} s stalled after the close");
    assert_eq!(refused(observer) - refused_before, 1.0, "the refused stream after the close");
}
