//! HTTP/2 over TLS end to end: nginx terminating TLS with `http2` (ALPN h2, OpenSSL 3 from
//! `libssl.so.3`) in front of a loopback upstream that takes 2 ms per request, under h2load over
//! https. The h2 session is read from the plaintext of the hooked calls, preface first: the
//! observer's stream count must equal h2load's exactly, each proxied once over HTTP/1.1, with
//! its p50 within 10 % of h2load's; multiplexed, every stream is still counted once, with its
//! status (the kernel walks frame headers past the plaintext's head), also for 27 kB responses,
//! and with 100 streams at a time on one connection: nginx's `SSL_read`s then hold about 100
//! HEADERS frames, walked past 32 in the uprobe programs' continuation, and end anywhere inside
//! a frame header (h2load's TLS records: 1 or 2 bytes in, the place is kept all the same).
//! `keepalive_requests`: nginx ends an h2 connection after 1000 streams by default. Before the
//! continuation: 2225 of 3000 counted, 20 resyncs; before the split length: 2922, 1 resync in
//! about half the runs.

use tests::{
    h2load::{assert_many_streams_counted, assert_matches_h2load, assert_multiplexed_counted},
    nginx::Nginx,
    observer::Observer,
    privileged,
    tls::{certified_dir, wait_hooked},
    upstream::{Behavior, Upstream},
    wrk::{UPSTREAM_DELAY, metric_sum},
};

#[test]
fn nginx_h2_over_tls_streams_match_h2load() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let (_dir, cert, key) = certified_dir("nginx-h2-tls");
    let port = tests::free_port();
    // nginx 1.22 (Debian 12): `http2` is a parameter of `listen` (`http2 on;` came in 1.25.1).
    // A 27 kB file: its response's frames run past the 512 bytes copied of each SSL_write and
    // SSL_read, and over several of them.
    let files = tests::temp_dir("nginx-h2-tls-files");
    std::fs::write(files.join("page"), "0123456789abcdef".repeat(1700)).expect("write the served file");
    let body = format!(
        "  upstream items {{ server {}; keepalive 32; }}\n  server {{\n    listen 127.0.0.1:{port} ssl http2;\n    keepalive_requests 10000;\n    \
         ssl_certificate {cert};\n    ssl_certificate_key {key};\n    location / {{ proxy_pass http://items; \
         proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n    location /files/ {{ alias {}/; }}\n    location /many {{ return 200 \"ok\\n\"; }}\n  }}",
        upstream.addr(),
        files.display()
    );
    let nginx = Nginx::start(&[], 2, &body, ("127.0.0.1", port));
    let observer = Observer::start_with(&[&format!("pid={}", nginx.pid())], &["--tls-plaintext"]);
    // The master and both workers.
    wait_hooked(&observer, 3.0);
    let url = format!("https://127.0.0.1:{port}/api/items");
    assert_matches_h2load(&observer, &url);
    let garbage =
        metric_sum(&observer.metrics(), "gateway_observer_http_non_http_bytes_total", &[("process", "nginx")]);
    assert_eq!(garbage, 0.0, "ciphertext or h2 frames parsed as non-HTTP bytes");
    // Eight streams at a time per connection, several streams' frames in one SSL_write: the
    // kernel walks the plaintext's frame headers past its head as it does a cleartext write's.
    assert_multiplexed_counted(&observer, &url, true);
    // Larger responses: frames cut between SSL_writes, walked from where the last one left off.
    assert_multiplexed_counted(&observer, &format!("https://127.0.0.1:{port}/files/page"), true);
    assert_many_streams_counted(&observer, &format!("https://127.0.0.1:{port}/many"));
}
