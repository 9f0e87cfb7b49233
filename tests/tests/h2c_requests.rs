//! HTTP/2 cleartext (h2c, prior knowledge) end to end: h2load (Debian's `nghttp2-client`) against
//! the reference gateway in front of a loopback upstream that takes 2 ms per request. h2load
//! sends a fixed number of requests, so none is abandoned at its end: the observer's count of
//! the gateway's streams must equal h2load's exactly, each proxied once, and the observer's p50
//! must be within 10 % of the p50 of h2load's per-request log. Uploads too: reads that start
//! inside a DATA frame keep the walk of frame headers in sync. nginx as the h2c server too: its
//! frames come one buffer each.

use tests::{
    free_port,
    h2load::{assert_matches_h2load, assert_multiplexed_counted, assert_uploads_counted},
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
    let port = free_port();
    let body = format!(
        "  upstream items {{ server {}; keepalive 32; }}\n  server {{\n    listen 127.0.0.1:{port} http2;\n    \
         location / {{ proxy_pass http://items; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n  }}",
        upstream.addr()
    );
    let nginx = Nginx::start(&[], 1, &body, ("127.0.0.1", port));
    let observer = Observer::start(nginx.pid());
    let url = format!("http://127.0.0.1:{port}/api/items");
    assert_matches_h2load(&observer, &url);
    assert_multiplexed_counted(&observer, &url, true);
}
