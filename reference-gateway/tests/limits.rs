//! Timeouts and limits of the reference gateway against real sockets: each timeout fires at its
//! configured time ±20 %, each limit answers its status, ambiguous framing is refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tests::{http_client::*, reference_gateway::*, upstream::*, *};

fn proxy_to(servers: &[String], extra: &str) -> String {
    let list = servers.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    format!("{extra}\n[upstreams.up]\nservers = [{list}]\nmax_fails = 100\n[[routes]]\nupstream = \"up\"\n")
}

#[test]
fn upstream_refused_is_502_with_a_clear_body() {
    let dead = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(&proxy_to(&[dead], ""));
    let r = gw.get("/x");
    assert_eq!(r.status, 502, "{r:?}");
    assert!(r.body.contains("refused the connection"), "{}", r.body);
    assert_eq!(gw.metric("reference_gateway_upstream_errors_total{kind=\"connect_refused\"}"), 1.0);
}

#[test]
fn upstream_response_timeout_is_504_at_the_configured_time() {
    let hole = Upstream::start("hole", Behavior::BlackHole);
    let gw = Gateway::start(&proxy_to(&[hole.addr()], "[timeouts]\nupstream_response = \"1s\""));
    let start = Instant::now();
    let r = gw.get("/slow");
    assert_about("upstream response timeout", start.elapsed(), Duration::from_secs(1));
    assert_eq!(r.status, 504, "{r:?}");
    assert!(r.body.contains("no response within"), "{}", r.body);
    assert_eq!(gw.metric("reference_gateway_upstream_errors_total{kind=\"response_timeout\"}"), 1.0);
}

/// A listener whose accept queue is full: the kernel drops further SYNs, so connects hang.
fn unanswered_connect_target() -> (socket2::Socket, Vec<TcpStream>, SocketAddr) {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    sock.listen(0).unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..16 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(s) => fillers.push(s),
            Err(_) => return (sock, fillers, addr),
        }
    }
    panic!("could not fill the accept queue of {addr}");
}

#[test]
fn upstream_connect_timeout_is_504_at_the_configured_time() {
    let (_sock, _fillers, addr) = unanswered_connect_target();
    let gw = Gateway::start(&proxy_to(&[addr.to_string()], "[timeouts]\nconnect = \"1s\""));
    let start = Instant::now();
    let r = gw.get("/x");
    assert_about("connect timeout", start.elapsed(), Duration::from_secs(1));
    assert_eq!(r.status, 504, "{r:?}");
    assert!(r.body.contains("timed out"), "{}", r.body);
    assert_eq!(gw.metric("reference_gateway_upstream_errors_total{kind=\"connect_timeout\"}"), 1.0);
}

#[test]
fn slow_request_head_is_cut_but_idle_keep_alive_waits_for_its_own_timer() {
    let up = Upstream::start("a", Behavior::Echo);
    let gw = Gateway::start(&proxy_to(&[up.addr()], "[timeouts]\nclient_header = \"1s\"\nidle = \"2s\""));

    // Slowloris: a head that never ends is cut at client_header.
    let (_, took, closed) =
        raw_exchange(gw.port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n", Duration::from_secs(5));
    assert!(closed, "connection with an unfinished head was not closed");
    assert_about("client header timeout", took, Duration::from_secs(1));

    // An idle keep-alive connection is closed by the idle timer, not the head timer.
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let idle_start = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) => panic!("idle connection not closed: {e}"),
        }
    }
    assert_about("idle keep-alive timeout", idle_start.elapsed(), Duration::from_secs(2));
}

#[test]
fn oversized_headers_get_431_and_bodies_413() {
    let up = Upstream::start("a", Behavior::Echo);
    let gw = Gateway::start(&proxy_to(&[up.addr()], "[limits]\nmax_header_bytes = 8192\nmax_body_bytes = 1000"));
    let big = "a".repeat(9000);
    let r = request(gw.port, "GET", "/", &[("X-Big", &big)], b"");
    assert_eq!(r.status, 431, "{r:?}");

    let r = request(gw.port, "POST", "/", &[], &[b'x'; 2000]);
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.body.contains("over 1000 bytes"), "{}", r.body);

    // Chunked: the size is only known while streaming to the upstream.
    let chunk = "y".repeat(600);
    let req = format!(
        "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
    );
    let (out, _, _) = raw_exchange(gw.port, req.as_bytes(), Duration::from_secs(5));
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");

    let r = request(gw.port, "POST", "/", &[], &[b'x'; 900]);
    assert_eq!(r.status, 200, "a body under the limit passes: {r:?}");
}

#[test]
fn connections_over_the_limit_get_503() {
    let up = Upstream::start("a", Behavior::Echo);
    let gw = Gateway::start(&proxy_to(&[up.addr()], "[limits]\nmax_connections = 2"));
    // Two keep-alive connections that stay open (each proven accepted by an answer).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(gw.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let r = request(gw.port, "GET", "/", &[], b"");
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.body.contains("too many connections"), "{}", r.body);
    drop(held);
    wait_until("a slot to free up", Duration::from_secs(5), || {
        try_request(gw.port, "GET", "/", &[], b"", Duration::from_secs(2)).is_ok_and(|r| r.status == 200)
    });
}

#[test]
fn ambiguous_framing_is_400_and_the_connection_closes() {
    let up = Upstream::start("a", Behavior::Echo);
    let gw = Gateway::start(&proxy_to(&[up.addr()], ""));
    // CL+TE, with a second request pipelined behind it that must never be served.
    let smuggle = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n";
    let (out, _, closed) = raw_exchange(gw.port, smuggle, Duration::from_secs(5));
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(closed, "connection left open after CL+TE");
    assert_eq!(out.matches("HTTP/1.1").count(), 1, "pipelined request was served: {out}");

    let (out, _, closed) = raw_exchange(
        gw.port,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        Duration::from_secs(5),
    );
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(closed, "connection left open after conflicting Content-Length");
    assert_eq!(up.requests.load(std::sync::atomic::Ordering::Relaxed), 0, "an ambiguous request reached the upstream");
}
