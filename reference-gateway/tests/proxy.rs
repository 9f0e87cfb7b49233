//! Proxying behaviour of the reference gateway against real upstream servers on loopback:
//! routing, forwarded headers, round-robin with passive health, keep-alive, chunked bodies,
//! 100-continue, h2c, access log and metrics.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tests::{http_client::*, reference_gateway::*, upstream::*, *};

#[test]
fn routes_by_host_and_prefix_and_sets_forwarding_headers() {
    let a = Upstream::start("upstream-a", Behavior::Echo);
    let b = Upstream::start("upstream-b", Behavior::Echo);
    let gw = Gateway::start(&format!(
        r#"
        [upstreams.a]
        servers = ["{}"]
        [upstreams.b]
        servers = ["{}"]
        [[routes]]
        path_prefix = "/a/"
        upstream = "a"
        [[routes]]
        host = "b.local"
        path_prefix = "/"
        upstream = "b"
        "#,
        a.addr(),
        b.addr()
    ));
    let r =
        request(gw.port, "GET", "/a/x?q=1", &[("X-Request-Id", "client-id-1"), ("X-Forwarded-For", "10.1.2.3")], b"");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.starts_with("upstream-a\nGET /a/x?q=1 HTTP/1.1"), "{}", r.body);
    let lower = r.body.to_ascii_lowercase();
    assert!(lower.contains("x-forwarded-for: 10.1.2.3, 127.0.0.1"), "{}", r.body);
    assert!(lower.contains("x-request-id: client-id-1"), "{}", r.body);
    assert!(!lower.contains("connection: close"), "hop-by-hop header forwarded: {}", r.body);
    assert_eq!(r.header("x-request-id").as_deref(), Some("client-id-1"));

    let r = request(gw.port, "GET", "/a/y", &[("Host", "b.local")], b"");
    assert!(r.body.starts_with("upstream-b"), "host route must win: {}", r.body);
    let generated = r.header("x-request-id").expect("generated request id");
    assert!(r.body.to_ascii_lowercase().contains(&format!("x-request-id: {generated}")), "{}", r.body);

    let r = request(gw.port, "GET", "/other", &[], b"");
    assert_eq!(r.status, 404, "{r:?}");
}

#[test]
fn round_robin_ejects_a_failing_server_and_readmits_it_later() {
    let a = Upstream::start("upstream-a", Behavior::Echo);
    let b_port = free_port();
    let gw = Gateway::start(&format!(
        "[upstreams.p]\nservers = [\"{}\", \"127.0.0.1:{b_port}\"]\nmax_fails = 2\nfail_timeout = \"1s\"\n[[routes]]\nupstream = \"p\"\n",
        a.addr()
    ));
    // B refuses: bodiless requests move on to A, so clients see no error.
    for i in 0..8 {
        let r = gw.get("/rr");
        assert_eq!(r.status, 200, "request {i}: {r:?}");
        assert!(r.body.starts_with("upstream-a"));
    }
    assert_eq!(gw.metric("reference_gateway_upstream_ejections_total"), 1.0);
    assert_eq!(
        gw.metric("reference_gateway_upstream_errors_total{kind=\"connect_refused\"}"),
        2.0,
        "an ejected server must not be tried again before fail_timeout"
    );
    // B comes back; after fail_timeout it gets traffic again.
    let _b = Upstream::start_on(b_port, "upstream-b", Behavior::Echo);
    wait_until("the ejected server to be readmitted", Duration::from_secs(5), || {
        gw.get("/rr").body.starts_with("upstream-b")
    });
    let names: Vec<bool> = (0..4).map(|_| gw.get("/rr").body.starts_with("upstream-a")).collect();
    assert_eq!(names.iter().filter(|a| **a).count(), 2, "round robin over both again: {names:?}");
}

#[test]
fn a_pooled_connection_closed_by_the_upstream_is_replaced_transparently() {
    let up = Upstream::start("closer", Behavior::EchoThenClose);
    let gw = Gateway::start(&format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr()));
    for i in 0..5 {
        let r = gw.get(&format!("/again/{i}"));
        assert_eq!(r.status, 200, "request {i} after the upstream closed its keep-alive connection: {r:?}");
    }
    assert_eq!(up.connections.load(Ordering::Relaxed), 5, "each request needed a fresh upstream connection");
    assert_eq!(gw.metric("reference_gateway_upstream_errors_total{kind=\"protocol\"}"), 0.0);
}

fn read_response(reader: &mut BufReader<TcpStream>) -> (String, String) {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "connection closed mid-response");
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    (head, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn keep_alive_chunked_bodies_and_100_continue() {
    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start(&format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr()));
    let s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);

    for i in 0..3 {
        w.write_all(format!("GET /ka{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        let (head, body) = read_response(&mut r);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.contains(&format!("GET /ka{i} ")), "{body}");
    }

    w.write_all(b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut r);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.ends_with("hello world"), "chunked body not forwarded: {body}");

    w.write_all(b"PUT /continue HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "expected 100 Continue before the body, got {line:?}");
    let mut blank = String::new();
    r.read_line(&mut blank).unwrap();
    w.write_all(b"abcde").unwrap();
    let (head, body) = read_response(&mut r);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.ends_with("abcde") && !body.to_ascii_lowercase().contains("expect:"), "{body}");

    assert_eq!(up.connections.load(Ordering::Relaxed), 1, "upstream connection was not reused");
}

#[tokio::test]
async fn h2c_prior_knowledge_is_proxied() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start(&format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr()));
    let stream = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    for i in 0..2 {
        let req = http::Request::builder()
            .uri(format!("http://h2.local:{}/h2/{i}", gw.port))
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req)).await.unwrap().unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(&format!("GET /h2/{i} HTTP/1.1")), "{body}");
        assert!(body.to_ascii_lowercase().contains("host: h2.local"), "{body}");
    }
}

#[test]
fn access_log_and_metrics_record_requests_without_credentials() {
    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start(&format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr()));
    let r = request(
        gw.port,
        "GET",
        "/logged?token=query-secret",
        &[("Authorization", "Bearer secret-token-123"), ("X-Request-Id", "log-me")],
        b"",
    );
    assert_eq!(r.status, 200);
    let _ = request(gw.port, "GET", "/health", &[], b"");
    wait_until("the access log line", Duration::from_secs(5), || gw.access_log().contains("\"log-me\""));
    let log = gw.access_log();
    let line = log.lines().find(|l| l.contains("\"log-me\"")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["method"], "GET");
    assert_eq!(v["path"], "/logged");
    assert_eq!(v["status"], 200);
    assert_eq!(v["upstream"], up.addr());
    assert!(v["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(!log.contains("secret-token-123") && !log.contains("query-secret"), "credentials in the access log: {log}");

    let text = gw.metrics();
    assert!(text.contains("reference_gateway_requests_total{status_class=\"2xx\"}"), "{text}");
    assert!(gw.metric("reference_gateway_requests_total{status_class=\"2xx\"}") >= 3.0);
    assert!(gw.metric("reference_gateway_request_duration_seconds_count") >= 3.0);
    assert_eq!(gw.metric("reference_gateway_in_flight_requests"), 0.0);
}
