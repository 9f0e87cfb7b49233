//! HTTPS requests to Node.js's `https` module: NodeSource's `node` links OpenSSL into its
//! executable (no `libssl.so` is mapped) and exports its calls, which are hooked there. Node
//! feeds OpenSSL from memory (libuv moves the ciphertext outside the calls), so the plaintext
//! comes keyed by its session and is tied to its connection in userspace. A server
//! whose handler answers after 2 ms, under wrk over https: the observer's inbound count matches
//! wrk's within 0.1 % and its p50 is within 10 % of wrk's.

use std::process::Command;

use tests::{
    free_port, privileged,
    tls::{assert_https_matches_wrk, certified_dir, hooked_https_server},
    wrk::{UPSTREAM_DELAY, metric_sum},
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
