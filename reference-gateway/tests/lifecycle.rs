//! Lifecycle of the reference gateway: graceful drain on SIGTERM, the drain deadline, the admin
//! endpoint, and refusal of an admin address off loopback.

use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tests::{http_client::*, reference_gateway::*, upstream::*, *};

fn wait_exit(gw: &mut Gateway, deadline: Duration) -> (std::process::ExitStatus, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = gw.child.try_wait().unwrap() {
            return (status, start.elapsed());
        }
        assert!(start.elapsed() < deadline, "gateway still running {deadline:?} after SIGTERM: {}", gw.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_stops_accepting_and_finishes_in_flight_requests() {
    let up = Upstream::start("slow", Behavior::Delay(Duration::from_millis(1500)));
    let mut gw = Gateway::start_with(
        &format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr()),
        "drain_timeout = \"5s\"",
    );
    let port = gw.port;
    let in_flight = std::thread::spawn(move || request(port, "GET", "/slow", &[], b""));
    wait_until("the request to reach the upstream", Duration::from_secs(5), || {
        up.requests.load(Ordering::Relaxed) == 1
    });
    gw.sigterm();
    wait_until("the listener to close", Duration::from_secs(2), || TcpStream::connect(gw.addr()).is_err());
    let r = in_flight.join().unwrap();
    assert_eq!(r.status, 200, "in-flight request was not completed: {r:?}");
    assert!(r.body.starts_with("slow"));
    let (status, _) = wait_exit(&mut gw, Duration::from_secs(5));
    assert!(status.success(), "exit status {status}: {}", gw.stderr());
    assert!(gw.stderr().contains("drained"), "{}", gw.stderr());
}

#[test]
fn drain_deadline_closes_what_is_still_running() {
    let up = Upstream::start("stuck", Behavior::Delay(Duration::from_secs(20)));
    let mut gw = Gateway::start_with(
        &format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr()),
        "drain_timeout = \"1s\"",
    );
    let port = gw.port;
    let in_flight = std::thread::spawn(move || try_request(port, "GET", "/stuck", &[], b"", Duration::from_secs(10)));
    wait_until("the request to reach the upstream", Duration::from_secs(5), || {
        up.requests.load(Ordering::Relaxed) == 1
    });
    gw.sigterm();
    let (status, took) = wait_exit(&mut gw, Duration::from_secs(5));
    assert_about("drain deadline", took, Duration::from_secs(1));
    assert!(status.success(), "exit status {status}");
    let r = in_flight.join().unwrap();
    assert!(r.is_err(), "a request past the drain deadline should be cut, got {r:?}");
    assert!(gw.stderr().contains("drain deadline passed"), "{}", gw.stderr());
}

#[test]
fn admin_endpoint_shows_and_switches_faults() {
    let gw = Gateway::start("");
    let get = || request(gw.admin_port, "GET", "/admin/faults", &[], b"");
    let v: serde_json::Value = serde_json::from_str(&get().body).unwrap();
    assert_eq!(v["redis_client"], "async");
    assert_eq!(v["upstream_response_timeout"], serde_json::Value::Null);
    assert_eq!(v["pool_enabled"], false);

    let r = request(
        gw.admin_port,
        "PUT",
        "/admin/faults",
        &[("Content-Type", "application/json")],
        br#"{"redis_client":"blocking","upstream_response_timeout":"30m","pool_enabled":true,"pool_permits_per_second":0.5}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&get().body).unwrap();
    assert_eq!(v["redis_client"], "blocking");
    assert_eq!(v["upstream_response_timeout"], "30m");
    assert_eq!(v["pool_enabled"], true);
    assert_eq!(v["pool_permits_per_second"], 0.5);

    for bad in [&br#"{"redis_client":"sometimes"}"#[..], br#"{"nope":1}"#, br#"{"pool_permits_per_second":0}"#, b"{"] {
        let r = request(gw.admin_port, "PUT", "/admin/faults", &[], bad);
        assert_eq!(r.status, 400, "{} accepted: {r:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(request(gw.admin_port, "GET", "/health", &[], b"").status, 200);
    assert_eq!(request(gw.admin_port, "DELETE", "/admin/faults", &[], b"").status, 405);
}

#[test]
fn admin_off_loopback_is_refused_at_startup() {
    let dir = temp_dir("admin");
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!("[server]\nlisten = [\"127.0.0.1:{}\"]\n[admin]\nlisten = \"0.0.0.0:{}\"\n", free_port(), free_port()),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reference-gateway")).arg("--config").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
