//! HTTPS requests to Node.js's `https` module: NodeSource's `node` links OpenSSL into its
//! executable (no `libssl.so` is mapped) and exports its calls, which are hooked there. Node
//! feeds OpenSSL from memory (libuv moves the ciphertext outside the calls), so the plaintext
//! comes keyed by its session and is tied to its connection in userspace. A server
//! whose handler answers after 10 ms, under wrk over https: the observer's inbound count matches
//! wrk's within 0.1 % and its p50 is within 10 % of wrk's. Node as an HTTPS client, the way a
//! Node gateway calls a TLS upstream: its first request on a connection is written before it
//! reads anything, so that plaintext waits for the ciphertext written after it; every request
//! counted once, with its status, and timed within 10 % of what the client measured (its server answers after 10 ms).

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, Stdio},
};

use tests::{
    free_port,
    observer::Observer,
    privileged,
    tls::{
        HTTPS_HANDLER_DELAY, Killed, assert_https_matches_wrk, certified_dir, hooked_https_server, https_server,
        wait_hooked,
    },
    wrk::metric_sum,
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
    let delay = HTTPS_HANDLER_DELAY.as_millis().to_string();
    let mut command = Command::new("node");
    command.arg(&script).args([&port.to_string(), &cert, &key, &delay]);
    let (_server, observer) = hooked_https_server(command, "node (cargo xtask setup installs it)", port);
    // NodeSource's node carries OpenSSL (library "node"); Debian's links libssl.so.3. Either way
    // the same memory buffers feed it.
    let metrics = observer.metrics();
    assert_eq!(metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[]), 1.0, "node hooked");
    let (requests, unattributed) = assert_https_matches_wrk(&observer, port, "node");
    assert!(unattributed <= requests * 0.001, "{unattributed} plaintext records tied to no connection");
}

/// An `https` client: `argv[3]` GETs over `argv[4]` keep-alive connections to 127.0.0.1:`argv[2]`,
/// started when a line comes on stdin; prints how many completed and the p50 it measured.
const NODE_TLS_CLIENT: &str = r#"
const https = require("https");
const [port, count, connections] = process.argv.slice(2).map(Number);
const agent = new https.Agent({ keepAlive: true, maxSockets: connections });
const seconds = [];
let started = 0;
function next() {
  if (started === count) return;
  started++;
  const t0 = process.hrtime.bigint();
  https.get({ host: "127.0.0.1", port, path: "/items", agent, rejectUnauthorized: false }, (res) => {
    res.resume();
    res.on("end", () => {
      seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
      if (seconds.length < count) return next();
      seconds.sort((a, b) => a - b);
      console.log(JSON.stringify({ done: seconds.length, p50: seconds[Math.floor(count / 2)] }));
      process.exit(0);
    });
  }).on("error", (e) => { console.error(e.message); process.exit(1); });
}
console.log("ready");
process.stdin.once("data", () => { for (let i = 0; i < connections; i++) next(); });
"#;

#[test]
fn node_https_client_requests_counted_and_timed() {
    if !privileged(module_path!()) {
        return;
    }
    const REQUESTS: u64 = 600;
    // The client's clock also holds its own JS work around each exchange (0.4 ms here, more on a
    // busy machine), which no socket shows; a 10 ms answer keeps that under 5 % of what is compared.
    const SERVER_DELAY_MS: &str = "10";
    let (dir, cert, key) = certified_dir("node-tls-client");
    let (server_js, client_js) = (dir.join("server.js"), dir.join("client.js"));
    std::fs::write(&server_js, NODE_TLS_SERVER).expect("write the server script");
    std::fs::write(&client_js, NODE_TLS_CLIENT).expect("write the client script");
    let port = free_port();
    let mut server = Command::new("node");
    server.arg(&server_js).args([&port.to_string(), &cert, &key, SERVER_DELAY_MS]);
    let _server = https_server(server, "node (cargo xtask setup installs it)", port);
    let mut client = Killed(
        Command::new("node")
            .arg(&client_js)
            .args([port.to_string(), REQUESTS.to_string(), "4".into()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the node client"),
    );
    let mut lines = BufReader::new(client.0.stdout.take().expect("client stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
    // Only the client is observed: what is counted is its outbound side.
    let observer = Observer::start_with(&[&format!("pid={}", client.0.id())], &["--tls-plaintext"]);
    wait_hooked(&observer, 1.0);
    client.0.stdin.take().expect("client stdin").write_all(b"go\n").expect("start the requests");
    let result: serde_json::Value =
        serde_json::from_str(&lines.next().and_then(Result::ok).unwrap_or_default()).expect("the client's result");
    assert_eq!(result["done"], REQUESTS, "{result}");
    // The last responses reach the observer a tick later.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let metrics = observer.metrics();
    let outbound = |extra: &[(&str, &str)]| {
        let labels: Vec<(&str, &str)> = [("direction", "outbound")].into_iter().chain(extra.iter().copied()).collect();
        metric_sum(&metrics, "gateway_observer_http_requests_total", &labels)
    };
    let unattributed = metric_sum(&metrics, "gateway_observer_tls_unattributed_records_total", &[]);
    eprintln!(
        "node client: {} requests counted, {} with 2xx, {unattributed} unattributed",
        outbound(&[]),
        outbound(&[("status_class", "2xx")])
    );
    assert_eq!(outbound(&[("status_class", "2xx")]), REQUESTS as f64, "the client's requests, each with its status");
    assert_eq!(outbound(&[]), REQUESTS as f64, "nothing counted twice or without a status");
    assert_eq!(unattributed, 0.0, "plaintext tied to no connection");
    let (_, snapshot) = observer.get("/api/v1/snapshot").expect("snapshot");
    let snapshot: serde_json::Value = serde_json::from_str(&snapshot).expect("snapshot JSON");
    let observed_p50 = snapshot["processes"][0]["outbound"]["p50_seconds"].as_f64().unwrap_or(0.0);
    let client_p50 = result["p50"].as_f64().unwrap_or(0.0);
    let ratio = observed_p50 / client_p50;
    eprintln!("node client: p50 {observed_p50:.6} s observed, {client_p50:.6} s measured by the client");
    assert!((0.9..=1.1).contains(&ratio), "observer p50 {observed_p50:.6} s vs the client's {client_p50:.6} s");
}
