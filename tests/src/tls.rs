//! What the TLS tests share: a fresh self-signed certificate, a server process ended with the
//! test, and waiting for targets to be hooked.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    time::Duration,
};

use crate::{
    observer::Observer,
    temp_dir, wait_until,
    wrk::{WRK_CONNECTIONS, metric_sum, observed, wrk},
};

/// How long an HTTPS server compared with wrk waits before it answers. wrk's p50 also holds its
/// own time (its TLS work, its event loop on a 2-core machine shared with the server), which the
/// server never sees: ~0.4-0.7 ms here, and 0.8 ms on a slow CI machine, where it took node's
/// ratio past the 10 % tolerance with a 2 ms handler (observer 3.75 ms vs wrk 4.54 ms). At 10 ms
/// it stays well under 10 %, and the fewer requests leave the server's CPU less saturated.
pub const HTTPS_HANDLER_DELAY: Duration = Duration::from_millis(10);

/// A self-signed certificate and its key for 127.0.0.1 (also as its subjectAltName, which a
/// client checking the IP needs), made by the `openssl` CLI in `dir`.
pub fn self_signed(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (Debian's openssl package)");
    assert!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
    (cert.display().to_string(), key.display().to_string())
}

/// A temp dir holding a fresh self-signed certificate and key: (dir, cert, key).
pub fn certified_dir(tag: &str) -> (PathBuf, String, String) {
    let dir = temp_dir(tag);
    let (cert, key) = self_signed(&dir);
    (dir, cert, key)
}

/// Waits until `processes` targets have their TLS library hooked.
pub fn wait_hooked(observer: &Observer, processes: f64) {
    wait_until(&format!("{processes} processes with their TLS library hooked"), Duration::from_secs(10), || {
        let metrics = observer.get("/metrics").map(|(_, body)| body).unwrap_or_default();
        metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[]) >= processes
    });
}

/// A child process killed and reaped when the test ends, passed or failed.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something listens on 127.0.0.1:`port`.
pub fn wait_listening(what: &str, port: u16) {
    wait_until(&format!("{what} to listen"), Duration::from_secs(15), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}

/// An HTTPS server started from `command` (its arguments: port, certificate, key, handler delay in
/// ms), listening on `port`, and an observer with TLS plaintext on that server, its TLS calls
/// hooked. Both end with the test.
pub fn hooked_https_server(command: Command, what: &str, port: u16) -> (Killed, Observer) {
    let server = https_server(command, what, port);
    let observer = hooked_observer(&server);
    (server, observer)
}

/// The server of [`hooked_https_server`], listening, not observed yet.
pub fn https_server(mut command: Command, what: &str, port: u16) -> Killed {
    let server =
        Killed(command.stdout(std::process::Stdio::null()).spawn().unwrap_or_else(|e| panic!("start {what}: {e}")));
    wait_listening(what, port);
    server
}

/// A server (TLS or not) started by `command`, listening on `port`, under an observer without TLS
/// plaintext.
pub fn observed_server(command: Command, what: &str, port: u16) -> (Killed, Observer) {
    let server = https_server(command, what, port);
    let observer = Observer::start(server.0.id());
    (server, observer)
}

/// An observer with TLS plaintext on `server`, once its TLS calls are hooked.
pub fn hooked_observer(server: &Killed) -> Observer {
    let observer = Observer::start_with(&[&format!("pid={}", server.0.id())], &["--tls-plaintext"]);
    wait_hooked(&observer, 1.0);
    let metrics = observer.metrics();
    let hooked: Vec<&str> =
        metrics.lines().filter(|l| l.starts_with("gateway_observer_tls_hooked_processes{")).collect();
    eprintln!("hooked: {hooked:?}");
    observer
}

/// wrk over https against `port`, then the observer's view of `process` checked against it:
/// inbound requests within 0.1 % or one per wrk connection, whichever is more (the ones wrk
/// abandons at its end: at most one in flight per connection), p50 within 10 %, no request
/// made, no ciphertext parsed or counted as TLS nobody decrypts. Returns (wrk's requests,
/// plaintext records tied to no connection).
pub fn assert_https_matches_wrk(observer: &Observer, port: u16, process: &str) -> (f64, f64) {
    let client = wrk(&format!("https://127.0.0.1:{port}/items"));
    std::thread::sleep(Duration::from_millis(1500));
    let (inbound, outbound, p50) = observed(observer);
    let metrics = observer.metrics();
    let unattributed = metric_sum(&metrics, "gateway_observer_tls_unattributed_records_total", &[]);
    let garbage = metric_sum(&metrics, "gateway_observer_http_non_http_bytes_total", &[("process", process)]);
    let unparsed = metric_sum(&metrics, "gateway_observer_tls_connections_unparsed_total", &[("process", process)]);
    eprintln!("TLS records with no socket: {unattributed}; non-HTTP bytes: {garbage}; unparsed TLS: {unparsed}");
    let requests = client.requests as f64;
    assert!(requests > 500.0, "too few requests to compare: {requests}");
    // A handler of 10 ms gives ~11k requests: 0.1 % is 11, under the 16 wrk may abandon.
    let tolerance = (requests * 0.001).max(WRK_CONNECTIONS as f64);
    assert!((inbound - requests).abs() <= tolerance, "observer {inbound} inbound vs wrk {requests}");
    assert_eq!(outbound, 0.0, "{process} makes no request");
    let ratio = p50 / client.p50_seconds;
    assert!((0.9..=1.1).contains(&ratio), "observer p50 {:.3} ms vs wrk {:.3} ms", p50 * 1e3, client.p50_seconds * 1e3);
    assert_eq!(garbage, 0.0, "ciphertext parsed as non-HTTP bytes");
    assert_eq!(unparsed, 0.0, "connections whose plaintext was read counted as TLS nobody decrypts");
    (requests, unattributed)
}
