//! HTTPS requests to Node.js's `https` module: NodeSource's `node` links OpenSSL into its
//! executable (no `libssl.so` is mapped) and exports its calls, which are hooked there. Node
//! feeds OpenSSL from memory (libuv moves the ciphertext outside the calls), so the plaintext
//! comes keyed by its session and is tied to its connection in userspace. A server
//! whose handler answers after 2 ms, under wrk over https: the observer's inbound count matches
//! wrk's within 0.1 % and its p50 is within 10 % of wrk's.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use tests::{
    free_port,
    observer::Observer,
    privileged,
    tls::{Killed, certified_dir, wait_hooked, wait_listening},
    wrk::{UPSTREAM_DELAY, metric_sum, observed, wrk},
};

/// An `https` server answering every request after `argv[5]` ms, on one loop.
const NODE_TLS_SERVER: &str = r#"
const fs = require("fs"), https = require("https");
const [port, cert, key, delay] = process.argv.slice(2);
const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (req, res) => {
  setTimeout(() => res.end("ok\n"), Number(delay));
});
server.keepAliveTimeout = 60000;
server.listen(Number(port), "127.0.0.1");
"#;

#[test]
fn node_https_requests_match_wrk() {
    if !privileged(module_path!()) {
        return;
    }
    let (dir, cert, key) = certified_dir("node-tls");
    let script = dir.join("server.js");
    std::fs::write(&script, NODE_TLS_SERVER).expect("write the server script");
    let port = free_port();
    let delay = UPSTREAM_DELAY.as_millis().to_string();
    let server = Killed(
        Command::new("node")
            .arg(&script)
            .args([&port.to_string(), &cert, &key, &delay])
            .stdout(Stdio::null())
            .spawn()
            .expect("start node (cargo xtask setup installs it)"),
    );
    wait_listening("node", port);
    let observer = Observer::start_with(&[&format!("pid={}", server.0.id())], &["--tls-plaintext"]);
    wait_hooked(&observer, 1.0);
    // NodeSource's node carries OpenSSL (library "node"); Debian's links libssl.so.3. Either way
    // the same memory buffers feed it.
    let metrics = observer.metrics();
    let hooked: Vec<&str> =
        metrics.lines().filter(|l| l.starts_with("gateway_observer_tls_hooked_processes{")).collect();
    eprintln!("hooked: {hooked:?}");
    assert_eq!(metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[]), 1.0, "node hooked: {hooked:?}");
    let client = wrk(&format!("https://127.0.0.1:{port}/items"));
    std::thread::sleep(Duration::from_millis(1500));
    let (inbound, outbound, p50) = observed(&observer);
    let metrics = observer.metrics();
    let unattributed = metric_sum(&metrics, "gateway_observer_tls_unattributed_records_total", &[]);
    let garbage = metric_sum(&metrics, "gateway_observer_http_non_http_bytes_total", &[("process", "node")]);
    eprintln!("TLS records with no socket: {unattributed}; non-HTTP bytes: {garbage}");
    let requests = client.requests as f64;
    assert!(requests > 500.0, "too few requests to compare: {requests}");
    assert!((inbound - requests).abs() / requests <= 0.001, "observer {inbound} inbound vs wrk {requests}");
    assert_eq!(outbound, 0.0, "node makes no request");
    let ratio = p50 / client.p50_seconds;
    assert!((0.9..=1.1).contains(&ratio), "observer p50 {:.3} ms vs wrk {:.3} ms", p50 * 1e3, client.p50_seconds * 1e3);
    assert_eq!(garbage, 0.0, "ciphertext parsed as non-HTTP bytes");
    assert!(unattributed <= requests * 0.001, "{unattributed} plaintext records tied to no connection");
    let unparsed = metric_sum(&metrics, "gateway_observer_tls_connections_unparsed_total", &[("process", "node")]);
    assert_eq!(unparsed, 0.0, "connections whose plaintext was read counted as TLS nobody decrypts");
}
