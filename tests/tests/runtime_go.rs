//! A Go gateway (`tests/fixtures/go/gateway.go`: net/http, a goroutine per connection on the
//! netpoller), watched from outside while it serves, then broken in the running process: every
//! handler takes one global `sync.Mutex` and holds it 100 ms, so requests queue behind each
//! other. Goroutines park, so the OS threads idle (untimed futex waits, the netpoller in
//! epoll_pwait): nothing in the process is busy or blocked in work, and no thread is the one to
//! blame. What is visible from outside is that requests were read and are not being answered:
//! the in-flight requests age while the process uses no CPU.
//!
//! `RequestsStalled` (subject `inbound`, as RequestQueueing's) names it: requests in flight, read
//! by the process, that keep aging without a response while the process idles. RequestQueueing does not
//! cover it (the requests were read at once: they wait inside the process, not in its sockets),
//! nor PoolSaturated (the threads wait for work: untimed futex), nor EventLoopBlocked (no loop
//! thread is off the CPU in work).

use std::time::Duration;

use tests::{
    alerts::{wait_firing, wait_resolved},
    load::{load_paced, stop, stop_flag},
    observer::Observer,
    privileged,
    runtimes::{LOAD_AT_MOST, RuntimeGateway, Scenario, snapshot_of},
    serial,
    summary::{Detection, Start},
};

const HEALTHY: Duration = Duration::from_secs(6);
/// Issue 13's goals, with room for a loaded 2-core machine: named within 2 s when watching
/// (the requests must wait 500 ms, then the alert is pending for 1 s), within 5 s of attaching
/// mid-fault, resolved within 10 s of the fix (5 s of the condition gone, once the queue drains).
const DETECT_WITHIN: Duration = Duration::from_secs(5);
const DETECT_AFTER_ATTACH_WITHIN: Duration = Duration::from_secs(5);
const RESOLVE_WITHIN: Duration = Duration::from_secs(10);
/// The alert naming in-flight requests that age while the process idles.
const EXPECTED: &str = "RequestsStalled";
/// Clients, each with one request in flight: behind a 100 ms mutex, each request takes about
/// CLIENTS × 100 ms, so requests are in flight for ~1.6 s on average, at ~10 req/s.
const CLIENTS: usize = 16;

#[test]
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect` (a pending EventLoopBlocked in its healthy phase, seen in some runs on 2026-12-05, did not recur in 13 runs on 2026-12-07, 8 beside a CPU burner)"]
fn go_requests_queued_behind_a_mutex_are_named_stalled() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let detection = Detection { runtime: "go", fault: "mutex", kind: EXPECTED, start: Start::Watching };
    detection.declare();
    let gateway = RuntimeGateway::go("gateway.go");
    let mut scenario = Scenario::healthy(gateway, CLIENTS, Duration::from_millis(20), HEALTHY);

    scenario.fault("mutex");
    // Polled at once, so that the time to detect is the observer's, not this test's.
    let (alert, detected) = scenario.detected(EXPECTED, DETECT_WITHIN);
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    let requests = &alert["evidence"]["requests"];
    assert!(requests["in_flight"].as_u64().is_some_and(|n| n >= 4), "requests in flight in the evidence: {alert:#}");
    assert!(
        requests["oldest_in_flight_seconds"].as_f64().is_some_and(|s| s >= 0.5),
        "the oldest request's age in the evidence: {alert:#}"
    );
    // The first request may find the mutex nearly free; once every client waits, one takes about
    // CLIENTS × 100 ms.
    let latency = scenario.gateway.timed_get("/");
    eprintln!("a request behind the queue took {:.0} ms", latency.as_secs_f64() * 1e3);
    assert!(
        latency >= Duration::from_millis(500),
        "a request took {latency:?} behind the mutex: the fault is not in effect"
    );
    // What the observer can say about the requests and threads while they queue.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(1));
        let (process, loops) = snapshot_of(&scenario.observer, scenario.gateway.pid());
        eprintln!(
            "during the fault: cpu {} in_flight {} oldest {}\n  inbound {}\n  thread groups {}\n  listeners {}\n  event loops {:?}\n  open alerts {:?}",
            process["cpu"],
            process["in_flight"],
            process["in_flight_oldest"],
            process["inbound"],
            process["thread_groups"],
            process["listeners"],
            loops,
            tests::runtimes::open_alerts(&scenario.observer),
        );
    }
    assert!(
        !tests::alerts::alerts_of(&scenario.observer.alerts(), EXPECTED, "firing").is_empty(),
        "{EXPECTED} stopped firing while the fault is on"
    );
    let resolved = scenario.healed(EXPECTED, RESOLVE_WITHIN);
    detection.report(detected, Some(resolved));
    assert!(scenario.finish() > 50, "the load barely ran");
}

/// The same fault, already on when the observer starts: the requests read before it attached are
/// unknown to it, the ones read after must be named within DETECT_AFTER_ATTACH_WITHIN.
#[test]
fn go_requests_stalled_before_the_observer_attached_are_named() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let mut gateway = RuntimeGateway::go("gateway.go");
    let done = stop_flag();
    let clients = load_paced(
        gateway.port,
        "/",
        CLIENTS,
        Duration::from_millis(20),
        done.clone(),
        std::time::Instant::now() + LOAD_AT_MOST,
    );
    gateway.fault("mutex");
    // The first request may find the mutex nearly free; by the time it is answered, every client
    // waits behind it.
    gateway.timed_get("/");
    let latency = gateway.timed_get("/");
    assert!(latency >= Duration::from_millis(500), "a request took {latency:?}: the fault is not in effect");
    let observer = Observer::start(gateway.pid());
    let (alert, detected) = wait_firing(&observer, EXPECTED, DETECT_AFTER_ATTACH_WITHIN);
    eprintln!("DETECTED {EXPECTED} {detected:.2?} after the observer was ready: {}", alert["summary"]);
    assert_eq!(alert["process"]["pid"], gateway.pid(), "{alert:#}");
    assert!(alert["evidence"]["waiting"].as_u64().is_some_and(|n| n >= 4), "{alert:#}");
    gateway.heal();
    let resolved = wait_resolved(&observer, EXPECTED, RESOLVE_WITHIN);
    Detection { runtime: "go", fault: "mutex", kind: EXPECTED, start: Start::Attached }
        .report(detected, Some(resolved));
    stop(&done);
    let served: usize = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    assert!(served > 20, "the load barely ran: {served} requests");
}
