//! gRPC's status from the trailers: grpc-go's health service (`tests/fixtures/go/grpc_server.go`,
//! Debian's golang-google-grpc-dev, built at test time), called by h2load with gRPC's framing.
//! Every call's HTTP status is 200; only `grpc-status` tells a check of a known service (OK, in
//! trailers after the message) from one of an unknown service (NOT_FOUND, in a trailers-only
//! response). `gateway_observer_grpc_responses_total` must count each exactly, and every call
//! must be counted as a request.

use std::{process::Command, time::Duration};

use tests::{
    free_port,
    h2load::{run, stream_counts},
    privileged,
    runtimes::go_binary,
    temp_dir,
    tls::observed_server,
    wrk::metric_sum,
};

/// Calls of each kind, four at a time on each of two connections.
const CALLS: u64 = 500;

#[test]
fn grpc_status_codes_from_trailers_are_counted() {
    if !privileged(module_path!()) {
        return;
    }
    let port = free_port();
    let mut command = Command::new(go_binary("grpc_server.go"));
    command.arg(port.to_string());
    let (_server, observer) = observed_server(command, "go-grpc_server", port);
    let url = format!("http://127.0.0.1:{port}/grpc.health.v1.Health/Check");
    let codes = |code: &str| {
        metric_sum(
            &observer.metrics(),
            "gateway_observer_grpc_responses_total",
            &[("direction", "inbound"), ("code", code)],
        )
    };
    let dir = temp_dir("grpc-status");
    // HealthCheckRequest's `service` (field 1, a string): none, or "x", which is unknown.
    let requests: [(&str, &[u8], &str, &str); 2] =
        [("known", &[], "OK", "NOT_FOUND"), ("unknown", &[0x0a, 0x01, b'x'], "NOT_FOUND", "OK")];
    for (key, request, code, other) in requests {
        // A gRPC message: uncompressed (0), its length (4 bytes, big-endian), the bytes.
        let mut message = vec![0u8];
        message.extend((request.len() as u32).to_be_bytes());
        message.extend(request);
        let body = dir.join(key);
        std::fs::write(&body, message).expect("write the call's message");
        let (before, other_before, streams_before) = (codes(code), codes(other), stream_counts(&observer).0);
        let args = ["-n", &CALLS.to_string(), "-c", "2", "-m", "4", "-d"]
            .map(String::from)
            .into_iter()
            .chain([body.display().to_string()])
            .chain(["-H", "content-type: application/grpc", "-H", "te: trailers"].map(String::from));
        let succeeded = run(args, &url, CALLS);
        // The last responses reach the observer a tick later.
        std::thread::sleep(Duration::from_millis(1500));
        let (counted, streams) = (codes(code) - before, stream_counts(&observer).0 - streams_before);
        eprintln!("{key}: {succeeded} calls, {streams} streams counted, {counted} {code}");
        assert_eq!(streams, succeeded as f64, "{key}: streams vs h2load's calls");
        assert_eq!(counted, succeeded as f64, "{key}: calls counted {code}");
        assert_eq!(codes(other), other_before, "{key}: no call counted {other}");
    }
}
