//! gRPC's status from the trailers, on two servers nobody here wrote, called by h2load with
//! gRPC's framing: grpc-go's health service (`tests/fixtures/go/grpc_server.go`, Debian's
//! golang-google-grpc-dev, built at test time), and a server on gRPC's C core
//! (`tests/fixtures/python/grpc_server.py`, Debian's python3-grpcio). Every call's HTTP status is
//! 200; only `grpc-status` tells a call that found what it asked for (OK, in trailers after the
//! message) from one that did not (NOT_FOUND, in a trailers-only response).
//! `gateway_observer_grpc_responses_total` must count each exactly, and every call must be
//! counted as a request, with no resync.
//!
//! The C core writes its SETTINGS as it accepts, before it reads the client's preface, and writes
//! each header name and value as a buffer of its own (a frame header may straddle two): the kernel
//! gathers such a small write whole into the record's head. Before it did, its first calls on each
//! connection went uncounted and no call had its status.

use std::{path::Path, process::Command, time::Duration};

use tests::{
    free_port,
    h2load::{run, stream_counts},
    observer::Observer,
    privileged,
    runtimes::{fixture_dir, go_binary},
    temp_dir,
    tls::observed_server,
    wrk::metric_sum,
};

/// Calls of each kind, four at a time on each of two connections.
const CALLS: u64 = 500;

#[test]
fn grpc_go_status_codes_from_trailers_are_counted() {
    if !privileged(module_path!()) {
        return;
    }
    let port = free_port();
    let mut command = Command::new(go_binary("grpc_server.go"));
    command.arg(port.to_string());
    let (_server, observer) = observed_server(command, "go-grpc_server", port);
    // HealthCheckRequest's `service` (field 1, a string): none, or "x", which is unknown.
    let calls: [(&str, &[u8], &str); 2] = [("known", &[], "OK"), ("unknown", &[0x0a, 0x01, b'x'], "NOT_FOUND")];
    assert_codes_counted(&observer, &format!("http://127.0.0.1:{port}/grpc.health.v1.Health/Check"), calls);
}

#[test]
fn grpc_core_status_codes_from_trailers_are_counted() {
    if !privileged(module_path!()) {
        return;
    }
    let port = free_port();
    // Debian's interpreter, which python3-grpcio is installed for.
    let mut command = Command::new("/usr/bin/python3");
    command.arg("-u").arg(fixture_dir().join("python/grpc_server.py")).arg(port.to_string());
    let (_server, observer) = observed_server(command, "python3 grpc_server.py", port);
    // Raw messages (no protobuf): the server finds "present" only.
    let calls: [(&str, &[u8], &str); 2] = [("present", b"present", "OK"), ("absent", b"absent", "NOT_FOUND")];
    assert_codes_counted(&observer, &format!("http://127.0.0.1:{port}/kt.Lookup/Get"), calls);
}

/// `CALLS` calls of each of `calls` (a name, the request message, the code it ends with) to
/// `url`: each counted as a request and under its code, none under the other's, no resync.
fn assert_codes_counted(observer: &Observer, url: &str, calls: [(&str, &[u8], &str); 2]) {
    let codes = |code: &str| {
        metric_sum(
            &observer.metrics(),
            "gateway_observer_grpc_responses_total",
            &[("direction", "inbound"), ("code", code)],
        )
    };
    let dir = temp_dir("grpc-status");
    for (i, (name, request, code)) in calls.into_iter().enumerate() {
        let other = calls[1 - i].2;
        let body = call_body(&dir, name, request);
        let (before, other_before) = (codes(code), codes(other));
        let (streams_before, _, resyncs_before) = stream_counts(observer);
        let args = ["-n", &CALLS.to_string(), "-c", "2", "-m", "4", "-d", &body]
            .map(String::from)
            .into_iter()
            .chain(["-H", "content-type: application/grpc", "-H", "te: trailers"].map(String::from));
        let succeeded = run(args, url, CALLS);
        // The last responses reach the observer a tick later.
        std::thread::sleep(Duration::from_millis(1500));
        let (streams, _, resyncs) = stream_counts(observer);
        let counted = codes(code) - before;
        eprintln!("{name}: {succeeded} calls, {} streams counted, {counted} {code}", streams - streams_before);
        assert_eq!(streams - streams_before, succeeded as f64, "{name}: streams vs h2load's calls");
        assert_eq!(counted, succeeded as f64, "{name}: calls counted {code}");
        assert_eq!(codes(other), other_before, "{name}: no call counted {other}");
        assert_eq!(resyncs, resyncs_before, "{name}: HTTP/2 walk resyncs");
    }
}

/// A file holding one gRPC message: uncompressed (0), its length (4 bytes, big-endian), `request`.
fn call_body(dir: &Path, name: &str, request: &[u8]) -> String {
    let mut message = vec![0u8];
    message.extend((request.len() as u32).to_be_bytes());
    message.extend(request);
    let body = dir.join(name);
    std::fs::write(&body, message).expect("write the call's message");
    body.display().to_string()
}
