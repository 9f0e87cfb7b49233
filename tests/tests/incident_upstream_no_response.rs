//! Incident 3, end to end: an upstream in a network namespace of the test's own, behind the
//! reference gateway (upstream timeout 1800 s) and behind Debian's nginx (proxy_read_timeout
//! 1800s), each also proxying to a healthy loopback upstream. An nftables rule in the namespace
//! drops the upstream's packets after the handshake: requests go in, nothing comes back. The
//! observer must raise `UpstreamNoResponse` (the peer gone silent: 1 s without an answer) and
//! `OneWayStall` for that peer within 10 s, nothing
//! for the healthy peer, and resolve both once the rule is gone. An upstream that accepts and never
//! answers (no network fault) raises `UpstreamNoResponse` without `OneWayStall`.

use std::{
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    alerts::{alerts_of, assert_quiet, wait_resolved},
    free_port,
    load::{load, load_paced, stop, stop_flag},
    netns::NetNs,
    nginx::Nginx,
    observer::Observer,
    privileged,
    reference_gateway::Gateway,
    summary::{Detection, Start},
    upstream::{Behavior, Upstream},
};

/// The two scenarios share the machine's CPUs and time their detections: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
const UPSTREAM_PORT: u16 = 8081;
const DETECT_WITHIN: Duration = Duration::from_secs(10);

/// A static upstream (nginx answering 200) inside the namespace.
fn upstream_in(ns: &NetNs) -> Nginx {
    let body = format!(
        "  server {{\n    listen {}:{UPSTREAM_PORT};\n    location / {{ return 200 \"ok\\n\"; }}\n  }}",
        ns.ns_ip
    );
    Nginx::start(&ns.exec_prefix(), 1, &body, (&ns.ns_ip, UPSTREAM_PORT))
}

/// Polls until an alert of each of `kinds` about `subject` has fired; returns them with the time
/// each took from the call.
fn wait_all_firing(observer: &Observer, kinds: &[&str], subject: &str, within: Duration) -> Vec<(Value, Duration)> {
    let start = Instant::now();
    let mut found: Vec<Option<(Value, Duration)>> = vec![None; kinds.len()];
    while found.iter().any(Option::is_none) {
        let alerts = observer.alerts();
        for (kind, slot) in kinds.iter().zip(found.iter_mut()).filter(|(_, slot)| slot.is_none()) {
            if let Some(alert) = alerts_of(&alerts, kind, "firing").into_iter().find(|a| a["subject"] == subject) {
                *slot = Some((alert, start.elapsed()));
            }
        }
        assert!(
            start.elapsed() < within,
            "not all of {kinds:?} fired for {subject} within {within:?}: {alerts:#?}\n{}",
            flow_metrics(observer)
        );
        thread::sleep(Duration::from_millis(100));
    }
    found.into_iter().flatten().collect()
}

/// The observer's flow, request-tracking and loss metrics, for the log.
fn flow_metrics(observer: &Observer) -> String {
    let metrics = observer.get("/metrics").map(|(_, m)| m).unwrap_or_default();
    let wanted = [
        "gateway_observer_tcp",
        "gateway_observer_upstream",
        "gateway_observer_http_connections",
        "gateway_observer_http_unattributed",
        "gateway_observer_http_parse",
        "gateway_observer_bpf_events_lost",
    ];
    metrics.lines().filter(|l| wanted.iter().any(|w| l.starts_with(w))).collect::<Vec<_>>().join("\n")
}

/// No alert about `peer` of any kind.
fn assert_nothing_about(observer: &Observer, peer: &str) {
    let about: Vec<Value> = observer.alerts().into_iter().filter(|a| a["subject"] == peer).collect();
    assert!(about.is_empty(), "alerts about the healthy peer {peer}: {about:#?}");
}

/// Healthy load on both routes, then the fault: both alerts for the namespace's peer, none for
/// the healthy one; then the fix: both resolve. `runtime` names the gateway in `SUMMARY` lines.
fn run_scenario(runtime: &str, observer: &Observer, port: u16, ns: &NetNs, healthy_peer: &str) {
    let bad_peer = format!("{}:{UPSTREAM_PORT}", ns.ns_ip);
    let until = Instant::now() + Duration::from_secs(90);
    let (good_load, bad_load) = (stop_flag(), stop_flag());
    // A steady few hundred requests a second: the point is the broken peer, not throughput.
    let good = load_paced(port, "/api/x", 4, Duration::from_millis(5), good_load.clone(), until);
    let bad = load_paced(port, "/bad/x", 8, Duration::from_millis(5), bad_load.clone(), until);
    assert_quiet(observer, Duration::from_secs(3));

    ns.drop_replies_from(UPSTREAM_PORT);
    let fired = wait_all_firing(observer, &["UpstreamNoResponse", "OneWayStall"], &bad_peer, DETECT_WITHIN);
    let [(no_response, no_response_after), (one_way, one_way_after)] = [fired[0].clone(), fired[1].clone()];
    eprintln!("UpstreamNoResponse firing {no_response_after:?} into the fault: {no_response:#}");
    eprintln!("OneWayStall firing {one_way_after:?} into the fault: {one_way:#}");
    eprintln!("{}", flow_metrics(observer));
    let evidence = &no_response["evidence"];
    assert!(evidence["outstanding"].as_u64().is_some_and(|n| n >= 1), "{evidence:#}");
    // A peer that answered until the fault and then nothing: judged silent, 1 s (not 5 s) is
    // enough, and the requests written since its last answer are at least that old.
    assert_eq!(evidence["gone_silent"], true, "{evidence:#}");
    let silent = evidence["silent_seconds"].as_f64().unwrap_or(f64::NAN);
    assert!((1.0..5.0).contains(&silent), "{evidence:#}");
    assert!(evidence["written_since_answer"].as_u64().is_some_and(|n| n >= 2), "{evidence:#}");
    assert!(evidence["oldest_age_seconds"].as_f64().is_some_and(|s| s >= silent), "{evidence:#}");
    assert!(evidence["connections_waiting"].as_u64().is_some_and(|n| n >= 1), "{evidence:#}");
    let healthy = evidence["other_peers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["peer"] == healthy_peer && p["healthy"] == true);
    assert!(healthy, "the healthy peer is named healthy: {evidence:#}");
    let evidence = &one_way["evidence"];
    assert!(evidence["retransmits"].as_u64().is_some_and(|n| n >= 2), "{evidence:#}");
    assert!(evidence["unacked_bytes"].as_u64().is_some_and(|n| n > 0), "{evidence:#}");
    assert_nothing_about(observer, healthy_peer);

    ns.restore_replies();
    let restored = Instant::now();
    wait_resolved(observer, "UpstreamNoResponse", Duration::from_secs(40));
    let resolved = restored.elapsed();
    wait_resolved(observer, "OneWayStall", Duration::from_secs(40));
    let resolved_one_way = restored.elapsed();
    eprintln!("resolved {resolved:?} / {resolved_one_way:?} after the rule was removed");
    for (kind, detected, resolved) in
        [("UpstreamNoResponse", no_response_after, resolved), ("OneWayStall", one_way_after, resolved_one_way)]
    {
        Detection { runtime, fault: "return path dropped", kind, start: Start::Watching }
            .report(detected, Some(resolved));
    }
    assert_nothing_about(observer, healthy_peer);
    stop(&good_load);
    stop(&bad_load);
    for c in good.into_iter().chain(bad) {
        let _ = c.join();
    }
}

/// A loopback upstream that reads requests and never answers: silence without a network fault,
/// from a peer never seen answering, so the 5 s threshold.
/// Not fixed: the test ends with it.
fn assert_silent_upstream_is_no_response_only(runtime: &str, observer: &Observer, port: u16, hole: &Upstream) {
    let peer = hole.addr();
    let flag = stop_flag();
    let clients = load(port, "/hole/x", 3, flag.clone(), Instant::now() + Duration::from_secs(20));
    let fired = wait_all_firing(observer, &["UpstreamNoResponse"], &peer, DETECT_WITHIN);
    let (alert, after) = &fired[0];
    eprintln!("silent upstream: UpstreamNoResponse after {after:?}");
    Detection { runtime, fault: "upstream never answers", kind: "UpstreamNoResponse", start: Start::Watching }
        .report(*after, None);
    assert_eq!(alert["evidence"]["retransmits"], 0, "{alert:#}");
    // Never seen answering: the full 5 s, since a cold peer may just be slow.
    assert_eq!(alert["evidence"]["gone_silent"], false, "{alert:#}");
    assert!(alert["evidence"]["oldest_age_seconds"].as_f64().is_some_and(|s| s >= 5.0), "{alert:#}");
    let one_way: Vec<Value> =
        observer.alerts().into_iter().filter(|a| a["kind"] == "OneWayStall" && a["subject"] == peer.as_str()).collect();
    assert!(one_way.is_empty(), "no network fault, no one-way flow: {one_way:#?}");
    stop(&flag);
    drop(clients); // their requests hang until the upstream goes away; not joined
}

#[test]
fn reference_gateway_with_a_silent_return_path() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = NetNs::create(1);
    let _bad = upstream_in(&ns);
    let good = Upstream::start("good", Behavior::Echo);
    let hole = Upstream::start("hole", Behavior::BlackHole);
    let gw = Gateway::start(&format!(
        "[faults]\nupstream_response_timeout = \"1800s\"\n\
         [upstreams.bad]\nservers = [\"{}:{UPSTREAM_PORT}\"]\nmax_fails = 1000\n\
         [upstreams.good]\nservers = [\"{}\"]\n[upstreams.hole]\nservers = [\"{}\"]\n\
         [[routes]]\npath_prefix = \"/bad/\"\nupstream = \"bad\"\n\
         [[routes]]\npath_prefix = \"/hole/\"\nupstream = \"hole\"\n\
         [[routes]]\nupstream = \"good\"\n",
        ns.ns_ip,
        good.addr(),
        hole.addr()
    ));
    let observer = Observer::start(gw.pid());
    let runtime = "reference-gateway (tokio)";
    run_scenario(runtime, &observer, gw.port, &ns, &good.addr());
    assert_silent_upstream_is_no_response_only(runtime, &observer, gw.port, &hole);
}

#[test]
fn nginx_with_a_silent_return_path() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = NetNs::create(2);
    let _bad = upstream_in(&ns);
    let good = Upstream::start("good", Behavior::Echo);
    let port = free_port();
    let nginx = Nginx::proxy(
        port,
        &format!(
            "  upstream bad {{ server {}:{UPSTREAM_PORT} max_fails=0; }}\n  upstream good {{ server {}; keepalive 16; }}",
            ns.ns_ip,
            good.addr()
        ),
        "    location /bad/ { proxy_pass http://bad; proxy_read_timeout 1800s; proxy_send_timeout 1800s; }\n    \
         location / { proxy_pass http://good; proxy_http_version 1.1; proxy_set_header Connection \"\"; }",
    );
    let observer = Observer::start(nginx.pid());
    run_scenario("nginx", &observer, port, &ns, &good.addr());
}
