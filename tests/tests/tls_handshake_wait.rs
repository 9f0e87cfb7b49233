//! A slow client's TLS handshake is not a request waiting in the server's socket. OpenSSL's
//! `s_server -www` runs each connection's handshake inside its first `SSL_read`, the call that
//! returns the request: the ClientHello's arrival is not when the request arrived. Clients that
//! pause between the server's flight and their own (a distant or busy client; here 300 ms, one
//! connection per request) must leave every request's socket wait near zero (s_server reads the
//! request as it comes) and raise no RequestQueueing. Counting from the ClientHello would give
//! each request the pause, and three such requests in five seconds fire the alert. nginx, which
//! runs the handshake in `SSL_do_handshake` before it reads, gets each new connection's first
//! request with its (short) wait recorded as well.

use std::{
    io::Read,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use tests::{
    free_port,
    metrics::socket_queue_totals,
    nginx::Nginx,
    observer::Observer,
    privileged,
    runtimes::fixture_dir,
    tls::{Killed, certified_dir, hooked_https_server, wait_hooked},
};

const CONNECTIONS: usize = 12;
const PAUSE_MS: u64 = 300;
/// s_server reads a request as soon as it comes; anything near the pause is the handshake's.
const MOST_WAIT_PER_REQUEST: f64 = 0.03;

/// RequestQueueing alerts raised or listed (firing, or resolved in the last 10 minutes).
fn request_queueing(observer: &Observer) -> Vec<serde_json::Value> {
    observer.alerts().into_iter().filter(|a| a["kind"] == "RequestQueueing").collect()
}

/// Runs `CONNECTIONS` HTTPS requests against `port`, one connection each, the client pausing
/// `pause_ms` mid-handshake, asserting while they run that no RequestQueueing is raised and at
/// their end that every one was answered 200. Returns the seconds the client paused in all.
fn run_clients(observer: &Observer, port: u16, pause_ms: u64) -> f64 {
    let script = fixture_dir().join("python/slow_handshake_client.py");
    let mut client = Killed(
        Command::new("python3")
            .arg(script)
            .args([port.to_string(), CONNECTIONS.to_string(), pause_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3"),
    );
    // Bounded: 12 connections of ~0.3 s each take about 4 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.0.try_wait().expect("client status").is_none() {
        assert!(Instant::now() < deadline, "the client did not finish within 30 s");
        let raised = request_queueing(observer);
        assert!(raised.is_empty(), "RequestQueueing on handshakes: {raised:#?}");
        thread::sleep(Duration::from_millis(250));
    }
    let mut out = String::new();
    client.0.stdout.take().expect("stdout").read_to_string(&mut out).expect("client output");
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields.first(), Some(&"done"), "client output: {out:?}");
    let answered: usize = fields[1].parse().expect("answered");
    assert_eq!(answered, CONNECTIONS, "every request answered 200");
    fields[2].parse().expect("paused")
}

/// Runs the clients (`run_clients`) against `process`, listening on `port`, and asserts that each
/// request's socket wait was recorded, and short. Returns the seconds the clients paused.
fn assert_every_wait_short(observer: &Observer, process: &str, port: u16, pause_ms: u64) -> f64 {
    thread::sleep(Duration::from_secs(1));
    let (wait_before, count_before) = socket_queue_totals(observer, process);
    let paused = run_clients(observer, port, pause_ms);
    // Two ticks for the last requests to be collected.
    thread::sleep(Duration::from_millis(2500));
    let (wait_after, count_after) = socket_queue_totals(observer, process);
    let (waited, waits) = (wait_after - wait_before, count_after - count_before);
    eprintln!(
        "{process}: {waits} socket waits recorded, {waited:.3} s in all; the clients paused {paused:.2} s in handshakes"
    );
    assert_eq!(waits, CONNECTIONS as f64, "every request's socket wait recorded");
    assert!(
        waited <= CONNECTIONS as f64 * MOST_WAIT_PER_REQUEST,
        "requests waited {waited:.3} s in the socket in all (at most {MOST_WAIT_PER_REQUEST} s each expected): \
         the handshake's pauses counted"
    );
    paused
}

#[test]
fn nginx_first_requests_on_new_tls_connections_get_their_socket_wait() {
    if !privileged(module_path!()) {
        return;
    }
    let (_dir, cert, key) = certified_dir("tls-handshake-wait-nginx");
    let port = free_port();
    let body = format!(
        "  server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {cert};\n    \
         ssl_certificate_key {key};\n    location / {{ return 200 \"ok\\n\"; }}\n  }}"
    );
    let nginx = Nginx::start(&[], 1, &body, ("127.0.0.1", port));
    // The master and its worker.
    let observer = Observer::start_with(&[&format!("pid={}", nginx.pid())], &["--tls-plaintext"]);
    wait_hooked(&observer, 2.0);
    assert_every_wait_short(&observer, "nginx", port, 0);
}

#[test]
fn a_slow_clients_handshake_is_not_time_in_the_socket_queue() {
    if !privileged(module_path!()) {
        return;
    }
    let (_dir, cert, key) = certified_dir("tls-handshake-wait");
    let port = free_port();
    let mut server = Command::new("openssl");
    server.args(["s_server", "-www", "-quiet", "-accept", &port.to_string(), "-cert", &cert, "-key", &key]);
    let (_server, observer) = hooked_https_server(server, "openssl s_server", port);
    let paused = assert_every_wait_short(&observer, "openssl", port, PAUSE_MS);
    assert!(paused >= CONNECTIONS as f64 * PAUSE_MS as f64 / 1000.0 * 0.95, "the client paused {paused:.2} s");
    let raised = request_queueing(&observer);
    assert!(raised.is_empty(), "RequestQueueing on handshakes: {raised:#?}");
}
