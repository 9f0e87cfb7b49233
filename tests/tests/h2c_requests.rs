//! HTTP/2 cleartext (h2c, prior knowledge) end to end: h2load (Debian's `nghttp2-client`) against
//! the reference gateway in front of a loopback upstream that takes 2 ms per request. h2load
//! sends a fixed number of requests, so none is abandoned at its end: the observer's count of
//! the gateway's streams must equal h2load's exactly, each proxied once, and the observer's p50
//! must be within 10 % of the p50 of h2load's per-request log. Uploads too: reads that start
//! inside a DATA frame keep the walk of frame headers in sync. nginx as the h2c server too: its
//! frames come one buffer each, and a connection of it the observer first sees mid-way.

use std::time::Duration;

use tests::{
    free_port,
    h2c::H2cConnection,
    h2load::{
        assert_many_streams_counted, assert_matches_h2load, assert_multiplexed_counted, assert_uploads_counted,
        stream_counts,
    },
    nginx::Nginx,
    observer::Observer,
    privileged,
    reference_gateway::Gateway,
    upstream::{Behavior, Upstream},
    wrk::UPSTREAM_DELAY,
};

#[test]
fn reference_gateway_h2c_streams_match_h2load() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let gw = Gateway::start(&format!(
        "[upstreams.items]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"items\"\n",
        upstream.addr()
    ));
    let observer = Observer::start(gw.pid());
    let url = format!("http://127.0.0.1:{}/api/items", gw.port);
    assert_matches_h2load(&observer, &url);
    // Eight streams at a time: the gateway writes several streams' frames in one syscall, past
    // the 512 bytes the kernel copies; it walks their frame headers there, so the userspace walk
    // keeps sync and every stream keeps its status.
    assert_multiplexed_counted(&observer, &url, true);
    assert_uploads_counted(&observer, &url);
    assert_many_streams_counted(&observer, &url);
}

/// nginx as an h2c server (`listen ... http2`, prior knowledge) in front of the same upstream.
/// nginx writes each frame header and each payload as a buffer of its own (one `writev`), so the
/// head copied is a 9-byte frame header: the kernel walks on across the buffers. Before it did,
/// every one of nginx's responses lost its status.
#[test]
fn nginx_h2c_streams_match_h2load() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let (nginx, port) = nginx_h2c(&upstream);
    let observer = Observer::start(nginx.pid());
    let url = format!("http://127.0.0.1:{port}/api/items");
    assert_matches_h2load(&observer, &url);
    assert_multiplexed_counted(&observer, &url, true);
}

/// Streams asked for, one after another, on the connection first seen mid-way once the daemon
/// knows it speaks HTTP/2.
const MID_WAY_STREAMS: u32 = 60;

/// An h2c connection to nginx that was open, and had answered a stream, before the observer
/// started. The kernel never saw its preface, so only userspace can tell it speaks HTTP/2 (from
/// frames); it tells the kernel, which walks the connection's frame headers past each write's
/// head from then on. nginx writes a frame header as a buffer of its own, so without that walk
/// every response loses its status. The first streams after the observer starts are not
/// counted: until userspace has seen the connection's frames and told the kernel (a ring drain,
/// 20 ms), its writes are not walked.
#[test]
fn nginx_h2c_connection_first_seen_mid_way_keeps_its_statuses() {
    if !privileged(module_path!()) {
        return;
    }
    let upstream = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let (nginx, port) = nginx_h2c(&upstream);
    let mut connection = H2cConnection::open(port);
    assert_eq!(connection.get("/api/items"), 200, "the stream before the observer");
    let observer = Observer::start(nginx.pid());
    for _ in 0..5 {
        assert_eq!(connection.get("/api/items"), 200, "a stream while the daemon learns the connection");
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = stream_counts(&observer);
    for _ in 0..MID_WAY_STREAMS {
        assert_eq!(connection.get("/api/items"), 200, "nginx's answer to the client");
    }
    std::thread::sleep(Duration::from_millis(1500));
    let after = stream_counts(&observer);
    let (counted, statusless, resyncs) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    eprintln!("mid-way: {counted} streams counted, {statusless} without a status, {resyncs} resyncs");
    assert_eq!(counted, f64::from(MID_WAY_STREAMS), "streams of the connection first seen mid-way");
    assert_eq!(statusless, 0.0, "streams of the connection first seen mid-way without a status");
}

/// nginx answering 100 streams at a time of one h2c connection, each from its config (`return
/// 200 "ok\n"`, no upstream): nearly every read of nginx then holds about 100 HEADERS frames
/// (`assert_many_streams_counted`). nginx's writes stay short here: it writes each frame as soon
/// as it makes it (its header and payload an iovec each), and queues frames into one `writev` (at
/// most 64 iovecs) only while the socket is full. `keepalive_requests`: by default nginx ends an
/// h2 connection after 1000 streams.
#[test]
fn nginx_h2c_reads_of_many_streams_count_every_stream() {
    if !privileged(module_path!()) {
        return;
    }
    let port = free_port();
    let body = format!(
        "  server {{\n    listen 127.0.0.1:{port} http2;\n    keepalive_requests 10000;\n    \
         location / {{ return 200 \"ok\\n\"; }}\n  }}"
    );
    let nginx = Nginx::start(&[], 1, &body, ("127.0.0.1", port));
    let observer = Observer::start(nginx.pid());
    assert_many_streams_counted(&observer, &format!("http://127.0.0.1:{port}/many"));
}

/// nginx as an h2c server on a free port, proxying to `upstream` over HTTP/1.1 keep-alive.
fn nginx_h2c(upstream: &Upstream) -> (Nginx, u16) {
    let port = free_port();
    let body = format!(
        "  upstream items {{ server {}; keepalive 32; }}\n  server {{\n    listen 127.0.0.1:{port} http2;\n    \
         location / {{ proxy_pass http://items; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n  }}",
        upstream.addr()
    );
    (Nginx::start(&[], 1, &body, ("127.0.0.1", port)), port)
}
