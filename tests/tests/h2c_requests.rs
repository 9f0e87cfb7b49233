//! HTTP/2 cleartext (h2c, prior knowledge) end to end: h2load (Debian's `nghttp2-client`) against
//! the reference gateway in front of a loopback upstream that takes 2 ms per request. h2load
//! sends a fixed number of requests, so none is abandoned at its end: the observer's count of
//! the gateway's streams must equal h2load's exactly, each proxied once, and the observer's p50
//! must be within 10 % of the p50 of h2load's per-request log. Uploads too: reads that start
//! inside a DATA frame keep the walk of frame headers in sync.

use tests::{
    h2load::{assert_matches_h2load, assert_multiplexed_counted, assert_uploads_counted},
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
