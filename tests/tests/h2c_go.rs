//! HTTP/2 cleartext from a Go server (`tests/fixtures/go/h2c_server.go`: net/http with
//! golang.org/x/net/http2/h2c, Debian's `golang-golang-x-net-dev`, built at test time), the way
//! gRPC-Go and many internal gateways speak it. Go's HTTP/2 server frames through a buffered
//! writer and answers each stream from a goroutine of its own, so its writes hold whole frames of
//! several streams, unlike nginx's (a buffer per frame header) and hyper's. h2load's streams
//! against a handler that takes 2 ms: counted exactly with their status and p50 within 10 % one at
//! a time; every stream counted with its status and no resync eight at a time, 100 at a time on
//! one connection, and for uploads read in pieces.

use std::process::Command;

use tests::{
    free_port,
    h2load::{
        assert_many_streams_counted, assert_multiplexed_counted, assert_served_matches_h2load, assert_uploads_counted,
    },
    privileged,
    runtimes::go_binary,
    tls::observed_server,
    wrk::UPSTREAM_DELAY,
};

#[test]
fn go_h2c_streams_match_h2load() {
    if !privileged(module_path!()) {
        return;
    }
    let port = free_port();
    let mut command = Command::new(go_binary("h2c_server.go"));
    command.args([port.to_string(), UPSTREAM_DELAY.as_millis().to_string()]);
    let (_server, observer) = observed_server(command, "go-h2c_server", port);
    let url = format!("http://127.0.0.1:{port}/items");
    let (_, outbound) = assert_served_matches_h2load(&observer, &url);
    assert_eq!(outbound, 0.0, "the server answers itself: no request goes out");
    assert_multiplexed_counted(&observer, &url, true);
    assert_many_streams_counted(&observer, &url);
    assert_uploads_counted(&observer, &url);
}
