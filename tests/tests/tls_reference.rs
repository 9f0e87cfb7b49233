//! The reference gateway with TLS through the system's OpenSSL (`libssl.so.3`, through the
//! `openssl` crate and `tokio-openssl`), on both sides of the proxy: a TLS listener and TLS to its
//! upstream (another reference gateway with a TLS listener, not a target). The observer hooks the
//! library's calls in the gateway it watches:
//! - under wrk over https, its inbound requests and the outbound ones to the TLS upstream match
//!   wrk's count within 0.1 %, and its p50 wrk's within 10 %;
//! - `UpstreamNoResponse` names the TLS upstream once it stops answering (SIGSTOP: its kernel
//!   still takes the requests, nothing answers), nothing about a healthy plain one, and resolves
//!   once it answers again;
//! - `RequestQueueing` names the TLS listener while the gateway's one worker blocks in a
//!   synchronous Redis call (its clients' requests wait unread in their sockets), as the plain
//!   HTTP suite's slow handler does, and resolves once Redis is fast again.
//!
//! Certificates are made at test time by the `openssl` CLI in a temp dir.

use std::{
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    alerts::{assert_likely_cause, assert_quiet, wait_firing, wait_firing_about, wait_resolved},
    free_port,
    load::{load_paced, stop, stop_flag},
    observer::Observer,
    privileged,
    redis_server::Redis,
    reference_gateway::{Gateway, access_config, tls_listener},
    serial,
    summary::{Detection, Start},
    tls::{Killed, certified_dir, wait_hooked},
    upstream::{Behavior, Upstream},
    wrk::{UPSTREAM_DELAY, assert_matches_wrk, metric_sum},
};

const RUNTIME: &str = "reference-gateway (tokio, OpenSSL)";

/// A reference gateway with `extra` config and a TLS listener too; (gateway, TLS port).
fn tls_gateway(cert: &str, key: &str, extra: &str, server_extra: &str) -> (Gateway, u16) {
    let port = free_port();
    let gw = Gateway::start_with(extra, &format!("{server_extra}\n{}", tls_listener(port, cert, key)));
    (gw, port)
}

/// Every path to `up`, in plain HTTP.
fn routes_to(up: &Upstream) -> String {
    format!("[upstreams.items]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"items\"\n", up.addr())
}

/// An `[upstreams.NAME]` over TLS to 127.0.0.1:`port`, the certificate checked against `ca`.
fn tls_upstream(name: &str, port: u16, ca: &str) -> String {
    format!("[upstreams.{name}]\nservers = [\"127.0.0.1:{port}\"]\ntls = true\ntls_ca = \"{ca}\"\nmax_fails = 1000\n")
}

/// The observer on `gw` with TLS plaintext, its libssl hooked; the gateway maps the system's
/// `libssl.so.3` (dynamically linked, not vendored: the observer finds it by name).
fn observe(gw: &Gateway) -> Observer {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", gw.pid())).unwrap_or_default();
    assert!(maps.lines().any(|l| l.ends_with("/libssl.so.3")), "the gateway maps no libssl.so.3:\n{maps}");
    let observer = Observer::start_with(&[&format!("pid={}", gw.pid())], &["--tls-plaintext"]);
    wait_hooked(&observer, 1.0);
    observer
}

/// No ciphertext parsed as HTTP, no connection counted as TLS nobody decrypts.
fn assert_plaintext_only(observer: &Observer) {
    let metrics = observer.metrics();
    let process = [("process", "reference-gatew")];
    let garbage = metric_sum(&metrics, "gateway_observer_http_non_http_bytes_total", &process);
    let unparsed = metric_sum(&metrics, "gateway_observer_tls_connections_unparsed_total", &process);
    let unattributed = metric_sum(&metrics, "gateway_observer_tls_unattributed_records_total", &[]);
    eprintln!(
        "non-HTTP bytes {garbage}, unparsed TLS connections {unparsed}, TLS records with no socket {unattributed}"
    );
    assert_eq!(garbage, 0.0, "ciphertext parsed as non-HTTP bytes");
    assert_eq!(unparsed, 0.0, "connections whose plaintext was read counted as TLS nobody decrypts");
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child of this test; no memory is touched.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill({pid}, {sig})");
}

#[test]
fn https_through_the_gateway_and_its_tls_upstream_match_wrk() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let (_dir, cert, key) = certified_dir("ref-tls-wrk");
    let items = Upstream::start("items", Behavior::Delay(UPSTREAM_DELAY));
    let backend_routes = routes_to(&items);
    let (_backend, backend_port) = tls_gateway(&cert, &key, &backend_routes, "");
    let front_routes = format!("{}[[routes]]\nupstream = \"backend\"\n", tls_upstream("backend", backend_port, &cert));
    let (front, port) = tls_gateway(&cert, &key, &front_routes, "");
    let observer = observe(&front);
    // Inbound within 0.1 % of wrk, outbound (over TLS, the gateway the client) within 0.1 % of
    // inbound, p50 within 10 %.
    assert_matches_wrk(&observer, &format!("https://127.0.0.1:{port}/items"));
    assert_plaintext_only(&observer);
}

#[test]
fn a_tls_upstream_that_stops_answering_is_named() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let (_dir, cert, key) = certified_dir("ref-tls-silent");
    let items = Upstream::start("items", Behavior::Echo);
    let good = Upstream::start("good", Behavior::Echo);
    let backend_routes = routes_to(&items);
    let (backend, backend_port) = tls_gateway(&cert, &key, &backend_routes, "");
    let front = Gateway::start(&format!(
        "[faults]\nupstream_response_timeout = \"1800s\"\n{}[upstreams.good]\nservers = [\"{}\"]\n\
         [[routes]]\npath_prefix = \"/tls/\"\nupstream = \"backend\"\n[[routes]]\nupstream = \"good\"\n",
        tls_upstream("backend", backend_port, &cert),
        good.addr()
    ));
    let observer = observe(&front);
    let (peer, healthy_peer) = (format!("127.0.0.1:{backend_port}"), good.addr());

    // Healthy: both routes answered, the observer quiet.
    let until = Instant::now() + Duration::from_secs(60);
    let (good_load, tls_load) = (stop_flag(), stop_flag());
    let good_clients = load_paced(front.port, "/api/x", 2, Duration::from_millis(5), good_load.clone(), until);
    let tls_clients = load_paced(front.port, "/tls/x", 6, Duration::from_millis(5), tls_load.clone(), until);
    assert_quiet(&observer, Duration::from_secs(3));

    // Fault: the TLS upstream stops (its sockets still take the requests, nothing answers).
    signal(backend.pid(), libc::SIGSTOP);
    let (alert, detected) = wait_firing_about(&observer, "UpstreamNoResponse", Some(&peer), Duration::from_secs(10));
    eprintln!("UpstreamNoResponse firing {detected:?} into the fault: {alert:#}");
    let evidence = &alert["evidence"];
    assert!(evidence["outstanding"].as_u64().is_some_and(|n| n >= 1), "{evidence:#}");
    // It answered until the fault (its TLS responses were read): judged silent after 1 s.
    assert_eq!(evidence["gone_silent"], true, "{evidence:#}");
    let silent = evidence["silent_seconds"].as_f64().unwrap_or(f64::NAN);
    assert!((1.0..5.0).contains(&silent), "{evidence:#}");
    assert!(evidence["connections_waiting"].as_u64().is_some_and(|n| n >= 1), "{evidence:#}");
    let healthy = evidence["other_peers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["peer"] == healthy_peer.as_str() && p["healthy"] == true);
    assert!(healthy, "the healthy peer is named healthy: {evidence:#}");

    // Fix: it runs again and answers what waited.
    signal(backend.pid(), libc::SIGCONT);
    let resolved = wait_resolved(&observer, "UpstreamNoResponse", Duration::from_secs(30));
    eprintln!("resolved {resolved:?} after the upstream ran again");
    Detection {
        runtime: RUNTIME,
        fault: "TLS upstream stops answering",
        kind: "UpstreamNoResponse",
        start: Start::Watching,
    }
    .report(detected, Some(resolved));
    let about_healthy: Vec<Value> =
        observer.alerts().into_iter().filter(|a| a["subject"] == healthy_peer.as_str()).collect();
    assert!(about_healthy.is_empty(), "alerts about the healthy peer: {about_healthy:#?}");
    stop(&good_load);
    stop(&tls_load);
    let served: usize = good_clients.into_iter().chain(tls_clients).map(|c| c.join().unwrap_or(0)).sum();
    assert!(served > 100, "the load made only {served} requests");
    assert_plaintext_only(&observer);
}

/// wrk over https to `url` with the access-check token, for `seconds`, each connection pausing
/// `pause_ms` between requests (a moderate rate: one worker at full speed would be a busy loop,
/// not a healthy one). Its output goes to `out`.
fn paced_wrk(url: &str, seconds: u64, pause_ms: u64, dir: &std::path::Path, out: &str) -> Killed {
    let script = dir.join("pace.lua");
    std::fs::write(&script, format!("function delay() return {pause_ms} end\n")).expect("write the wrk script");
    let stdout = std::fs::File::create(dir.join(out)).expect("wrk output file");
    Killed(
        Command::new("wrk")
            .args(["-t1", "-c4", &format!("-d{seconds}s"), "-H", "Authorization: Bearer tok", "-s"])
            .arg(&script)
            .arg(url)
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .expect("run wrk"),
    )
}

/// Waits for a `paced_wrk` to end (its -d), then its completed requests from `out`.
fn wrk_requests(mut wrk: Killed, dir: &std::path::Path, out: &str) -> f64 {
    let status = wrk.0.wait().expect("wait for wrk");
    let text = std::fs::read_to_string(dir.join(out)).unwrap_or_default();
    assert!(status.success(), "wrk: {text}");
    text.lines()
        .find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.parse().ok()))
        .unwrap_or_else(|| panic!("no request count in wrk output: {text}"))
}

/// `gateway_observer_http_socket_queue_seconds_count` for the gateway.
fn socket_queue_count(observer: &Observer) -> f64 {
    metric_sum(
        &observer.metrics(),
        "gateway_observer_http_socket_queue_seconds_count",
        &[("process", "reference-gatew")],
    )
}

#[test]
fn requests_queue_in_the_tls_listener_while_the_worker_blocks() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let Some(redis) = Redis::start() else { return };
    let (dir, cert, key) = certified_dir("ref-tls-queue");
    let up = Upstream::start("up", Behavior::Echo);
    let config = access_config(&redis, &up, "blocking");
    let (gw, port) = tls_gateway(&cert, &key, &config, "workers = 1");
    let mut con = redis.conn();
    let _: () = redis::cmd("SET").arg("tok").arg(r#"{"userId":"u-1"}"#).query(&mut con).expect("SET token");
    let observer = observe(&gw);
    let url = format!("https://127.0.0.1:{port}/api/x");

    // Healthy: Redis fast, the one worker keeps up.
    let healthy = paced_wrk(&url, 5, 5, &dir, "healthy.txt");
    assert_quiet(&observer, Duration::from_secs(4));
    assert!(wrk_requests(healthy, &dir, "healthy.txt") > 100.0, "too few healthy requests");
    thread::sleep(Duration::from_millis(1000));

    // Fault: Redis stalls 400 ms out of every 500 (another client pauses all clients again and
    // again), so the worker sits in a synchronous GET while requests arrive on the TLS listener.
    let count_before = socket_queue_count(&observer);
    let wrk = paced_wrk(&url, 9, 5, &dir, "fault.txt");
    let slow = Arc::new(AtomicBool::new(true));
    let pauser = {
        let (slow, mut con) = (slow.clone(), redis.conn());
        thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(30);
            while slow.load(Ordering::Relaxed) && Instant::now() < end {
                let _: Result<(), _> = redis::cmd("CLIENT").arg("PAUSE").arg(400).arg("ALL").query(&mut con);
                thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let (alert, detected) = wait_firing(&observer, "RequestQueueing", Duration::from_secs(8));
    eprintln!("RequestQueueing firing {:.1}s into the fault: {alert:#}", detected.as_secs_f64());
    let evidence = &alert["evidence"];
    assert_eq!(alert["subject"], "inbound");
    assert_eq!(alert["process"]["pid"], gw.pid());
    let listed = evidence["listeners"].as_array().into_iter().flatten().any(|l| l["port"] == port);
    assert!(listed, "the TLS listener {port} is named: {evidence:#}");
    // A request waits for the worker's current pause (400 ms) and the requests read before it.
    let longest = evidence["max_socket_queue_seconds"]
        .as_f64()
        .unwrap_or(0.0)
        .max(evidence["oldest_unread_seconds"].as_f64().unwrap_or(0.0));
    assert!((0.2..=1.5).contains(&longest), "longest wait {longest}: {evidence:#}");
    assert!(
        evidence["waiting_now"].as_u64().unwrap_or(0) >= 1 || evidence["delayed"].as_u64().unwrap_or(0) >= 3,
        "{evidence:#}"
    );
    // The worker blocked in Redis: the likely cause, named.
    assert_likely_cause(&observer, "RequestQueueing", "EventLoopBlocked", Duration::from_secs(6));

    // Every TLS request read got its socket wait (from the ciphertext's arrival): as many as wrk
    // completed, plus those it abandoned at its end (one per connection, 4) or timed out.
    let requests = wrk_requests(wrk, &dir, "fault.txt");
    thread::sleep(Duration::from_millis(1500));
    let queued = socket_queue_count(&observer) - count_before;
    eprintln!("wrk: {requests} requests in the fault phase; observer: {queued} socket waits recorded");
    assert!((-1.0..=6.0).contains(&(queued - requests)), "observer {queued} socket waits vs wrk {requests} requests");

    slow.store(false, Ordering::Relaxed);
    let _ = pauser.join();
    let fixed = Instant::now();
    let resolved = wait_resolved(&observer, "RequestQueueing", Duration::from_secs(20));
    eprintln!("RequestQueueing resolved {:.1}s after Redis was fast again", fixed.elapsed().as_secs_f64());
    Detection {
        runtime: RUNTIME,
        fault: "worker blocked, TLS listener",
        kind: "RequestQueueing",
        start: Start::Watching,
    }
    .report(detected, Some(resolved));
    assert_plaintext_only(&observer);
}
