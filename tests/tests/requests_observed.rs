//! Request tracking end to end, on gateways the observer knows nothing about: the reference
//! gateway and Debian's nginx as a reverse proxy, each in front of a loopback upstream that takes
//! 5 ms per request. Under wrk load, the requests the observer counts match wrk's within 0.1 %
//! and its p50 (socket queue wait + read-to-written) matches wrk's p50 within 10 %; an upstream
//! that never answers shows up as outstanding requests whose age grows.

use std::{
    io::Write as _,
    net::TcpStream,
    process::Command,
    time::{Duration, Instant},
};

use tests::{
    free_port,
    nginx::Nginx,
    observer::Observer,
    privileged,
    reference_gateway::Gateway,
    upstream::{Behavior, Upstream},
    wait_until,
    wrk::{UPSTREAM_DELAY, assert_matches_wrk, metric_sum, snapshot},
};

/// Sends requests that the black-hole upstream never answers, on their own connections.
fn hanging_requests(port: u16, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(b"GET /hang/x HTTP/1.1\r\nHost: gw\r\n\r\n").expect("send");
            s
        })
        .collect()
}

/// The black-hole peer's (outstanding, oldest age) summed over processes.
fn hanging_peer(observer: &Observer, peer: &str) -> (u64, f64) {
    let snap = snapshot(observer);
    let mut outstanding = 0;
    let mut oldest: f64 = 0.0;
    for p in snap["processes"].as_array().into_iter().flatten() {
        for u in p["upstreams"].as_array().into_iter().flatten().filter(|u| u["peer"] == peer) {
            outstanding += u["outstanding"].as_u64().unwrap_or(0);
            oldest = oldest.max(u["oldest_age_seconds"].as_f64().unwrap_or(0.0));
        }
    }
    (outstanding, oldest)
}

fn assert_hanging_upstream_is_outstanding(observer: &Observer, port: u16, black_hole: &Upstream) {
    let peer = black_hole.addr();
    let _clients = hanging_requests(port, 3);
    let start = Instant::now();
    wait_until("3 requests outstanding at the black-hole upstream", Duration::from_secs(5), || {
        hanging_peer(observer, &peer).0 == 3
    });
    std::thread::sleep(Duration::from_secs(1));
    let (_, first_age) = hanging_peer(observer, &peer);
    std::thread::sleep(Duration::from_secs(2));
    let (outstanding, later_age) = hanging_peer(observer, &peer);
    eprintln!("black hole {peer}: {outstanding} outstanding, oldest {first_age:.2} s then {later_age:.2} s");
    assert_eq!(outstanding, 3);
    assert!(first_age >= 0.9 && first_age <= start.elapsed().as_secs_f64() + 0.1, "first age {first_age}");
    assert!((later_age - first_age - 2.0).abs() < 0.6, "age grew by {:.2} s in 2 s", later_age - first_age);
    let metrics = observer.get("/metrics").expect("metrics").1;
    assert_eq!(
        metric_sum(&metrics, "gateway_observer_upstream_outstanding_requests", &[("peer", &peer)]),
        3.0,
        "{metrics}"
    );
    assert!(metric_sum(&metrics, "gateway_observer_upstream_oldest_request_age_seconds", &[("peer", &peer)]) >= 2.5);
}

/// The reference gateway: /hang/ to the black hole, everything else to `upstream`.
fn gateway_in_front_of(upstream: &Upstream, black_hole: &Upstream) -> Gateway {
    Gateway::start(&format!(
        "[upstreams.items]\nservers = [\"{}\"]\n[upstreams.hole]\nservers = [\"{}\"]\n\
         [[routes]]\npath_prefix = \"/hang/\"\nupstream = \"hole\"\n[[routes]]\nupstream = \"items\"\n",
        upstream.addr(),
        black_hole.addr()
    ))
}

#[test]
fn reference_gateway_requests_match_wrk_and_a_hanging_upstream_is_outstanding() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let black_hole = Upstream::start("hole", Behavior::BlackHole);
    let gw = gateway_in_front_of(&upstream, &black_hole);
    let observer = Observer::start(gw.pid());
    assert_matches_wrk(&observer, &format!("http://127.0.0.1:{}/api/items", gw.port));
    assert_hanging_upstream_is_outstanding(&observer, gw.port, &black_hole);
}

#[test]
fn nginx_requests_match_wrk_and_a_hanging_upstream_is_outstanding() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let black_hole = Upstream::start("hole", Behavior::BlackHole);
    let port = free_port();
    let nginx = Nginx::proxy(
        port,
        &format!(
            "  upstream items {{ server {}; keepalive 32; }}\n  upstream hole {{ server {}; }}",
            upstream.addr(),
            black_hole.addr()
        ),
        "    location /hang/ { proxy_pass http://hole; proxy_read_timeout 1800s; }\n    \
         location / { proxy_pass http://items; proxy_http_version 1.1; proxy_set_header Connection \"\"; }",
    );
    let observer = Observer::start(nginx.pid());
    assert_matches_wrk(&observer, &format!("http://127.0.0.1:{port}/api/items"));
    assert_hanging_upstream_is_outstanding(&observer, port, &black_hole);
}

/// Reads one chunked response off a keep-alive connection (up to its last-chunk marker).
fn read_chunked_response(stream: &mut TcpStream) -> Vec<u8> {
    use std::io::Read as _;
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while !response.ends_with(b"0\r\n\r\n") {
        let n = stream.read(&mut buf).expect("read response");
        assert!(n > 0, "connection closed mid-response: {}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&buf[..n]);
    }
    response
}

/// nginx relaying a chunked upstream response unbuffered writes it as writev(headers, chunk size,
/// data, CRLF) and then the last chunk on its own: the head the kernel copies holds only the
/// headers, so each response is found to end from the tail bytes. 50 requests on one keep-alive
/// connection must each be counted once, none left in flight.
#[test]
fn nginx_relaying_chunked_responses_on_keep_alive() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("chunked", Behavior::EchoChunked);
    let port = free_port();
    let nginx = Nginx::proxy(
        port,
        &format!("  upstream u {{ server {}; keepalive 4; }}", upstream.addr()),
        "    location / { proxy_pass http://u; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; }",
    );
    let observer = Observer::start(nginx.pid());
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    for i in 0..50 {
        stream.write_all(format!("GET /c/{i} HTTP/1.1\r\nHost: gw\r\n\r\n").as_bytes()).expect("send");
        let response = read_chunked_response(&mut stream);
        assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = observer.get("/metrics").expect("metrics").1;
    let inbound = metric_sum(
        &metrics,
        "gateway_observer_http_requests_total",
        &[("direction", "inbound"), ("status_class", "2xx")],
    );
    let outbound = metric_sum(
        &metrics,
        "gateway_observer_http_requests_total",
        &[("direction", "outbound"), ("status_class", "2xx")],
    );
    let in_flight: u64 =
        snapshot(&observer)["processes"].as_array().into_iter().flatten().filter_map(|p| p["in_flight"].as_u64()).sum();
    eprintln!("chunked via nginx: {inbound} inbound, {outbound} outbound, {in_flight} in flight");
    assert_eq!((inbound, outbound, in_flight), (50.0, 50.0, 0));
}

/// The socket ring overflows while the daemon is frozen (SIGSTOP) under a wrk flood: the kernel
/// counts the lost records on each socket, so the daemon forgets what it was parsing only on the
/// connections that lost some. Three requests hanging at a black-hole upstream, whose records
/// all arrived before the flood, must stay outstanding (they used to be forgotten with every
/// other connection's, blinding UpstreamNoResponse exactly when the host is busiest).
#[test]
fn a_socket_ring_loss_forgets_only_the_connections_that_lost_records() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(Duration::ZERO));
    let black_hole = Upstream::start("hole", Behavior::BlackHole);
    let gw = gateway_in_front_of(&upstream, &black_hole);
    let observer = Observer::start(gw.pid());
    let peer = black_hole.addr();
    let _clients = hanging_requests(gw.port, 3);
    wait_until("3 requests outstanding at the black-hole upstream", Duration::from_secs(5), || {
        hanging_peer(&observer, &peer).0 == 3
    });
    let lost_records = || {
        let metrics = observer.get("/metrics").expect("metrics").1;
        metric_sum(&metrics, "gateway_observer_bpf_events_lost_total", &[("ring", "sockets")])
    };
    assert_eq!(lost_records(), 0.0, "nothing lost before the flood");
    // SAFETY: signals to our own child.
    unsafe { libc::kill(observer.pid() as i32, libc::SIGSTOP) };
    // About 600 bytes of ring per transfer and four transfers per request: a few seconds of wrk
    // fill the 8 MiB ring many times over.
    let out = Command::new("wrk")
        .args(["-t1", "-c16", "-d3s", &format!("http://127.0.0.1:{}/items", gw.port)])
        .output()
        .expect("run wrk");
    // SAFETY: as above.
    unsafe { libc::kill(observer.pid() as i32, libc::SIGCONT) };
    assert!(out.status.success(), "wrk: {}", String::from_utf8_lossy(&out.stderr));
    wait_until("socket records lost while the daemon was frozen", Duration::from_secs(5), || lost_records() > 0.0);
    std::thread::sleep(Duration::from_secs(2));
    let metrics = observer.get("/metrics").expect("metrics").1;
    let abandoned = metric_sum(&metrics, "gateway_observer_http_abandoned_requests_total", &[]);
    let (outstanding, oldest) = hanging_peer(&observer, &peer);
    eprintln!(
        "lost {} records; abandoned {abandoned}; black hole: {outstanding} outstanding, oldest {oldest:.1} s",
        lost_records()
    );
    assert_eq!(outstanding, 3, "the hanging requests lost no record and must stay outstanding");
    assert!(oldest >= 3.0, "their age kept growing through the flood: {oldest:.1} s");
}
