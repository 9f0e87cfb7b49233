//! A gateway on embedded Tomcat 10.1 (Debian's jars, `tests/fixtures/jvm/TomcatGateway.java`):
//! Tomcat's own NIO connector and its own executor (10 threads growing to 64), watched while it
//! serves, then broken in the same running process, then healed (the course of
//! `tests::jvm_scenario`). Tomcat names its threads `http-nio-127.0.0.1-PORT-Poller` (the
//! selector, the one event loop), `-Acceptor` (a blocking accept) and `-exec-N` (the workers);
//! the kernel keeps 15 bytes of each, `http-nio-127.0.`, so the observer can tell the Poller
//! from the workers only by what it does: it idles in epoll.

use std::{
    collections::BTreeSet,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    jvm::{self, JvmGateway},
    jvm_scenario::{Load, Scenario, Shape, cold_start_is_quiet},
    metrics,
    observer::Observer,
    privileged,
    runtimes::snapshot_of,
    serial,
    summary::{Detection, Start},
    thread_syscall, threads,
};

/// Every Tomcat connector thread's name as the kernel keeps it: the observer's thread group of
/// the exec workers (and of the Acceptor and the Poller).
const GROUP: &str = "http-nio-127.0.";
/// 80 clients, each a request every 500 ms: about 160 requests a second, served in a millisecond
/// or two when healthy, while the limiter's 20 permits a second leave every caller parked in it
/// (80 in flight: the pool grows to its 64 threads and the rest queue).
const POOL_LOAD: Shape = Shape { clients: 80, pause: Duration::from_millis(500) };
/// 128 clients, each a request every 500 ms: a request held 1 s keeps each client in flight two
/// thirds of the time, about 85 at once, so 64 threads hold 64 and the rest queue (80 clients
/// would hold only about 53: the pool would grow to its maximum without ever being full).
const HELD_LOAD: Shape = Shape { clients: 128, pause: Duration::from_millis(500) };
/// How long a saturated pool must stay named after detection, the fault still on: past the
/// growth leaving the 5 s window and the 5 s an alert takes to resolve, so that what keeps it
/// firing is the pool being full, not its having grown.
const HOLD: Duration = Duration::from_secs(10);

fn tomcat() -> JvmGateway {
    JvmGateway::start("TomcatGateway", &["--permits", "20"], &["-Xmx256m"])
}

/// The connector's threads by what /proc says they do: the Poller is the one sleeping in
/// epoll_wait, the others (workers, the Acceptor) never poll.
struct Connector {
    poller: u32,
    others: Vec<u32>,
}

impl Connector {
    /// Samples /proc 20 times 20 ms apart: the Poller may be awake for a moment.
    fn of(pid: u32) -> Connector {
        let mut pollers = BTreeSet::new();
        let mut others = BTreeSet::new();
        for _ in 0..20 {
            for (tid, _) in threads(pid).into_iter().filter(|(_, n)| n == GROUP) {
                // 232 epoll_wait, 281 epoll_pwait.
                if matches!(thread_syscall(pid, tid), Some(232 | 281)) {
                    pollers.insert(tid);
                } else {
                    others.insert(tid);
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(pollers.len(), 1, "one {GROUP} thread idles in epoll, the Poller: {pollers:?}");
        let poller = *pollers.first().expect("one");
        others.remove(&poller);
        Connector { poller, others: others.into_iter().collect() }
    }
}

/// The Poller's label among the observer's event loops. Asserts that it is listed, that no
/// other connector thread is (workers and the Acceptor never poll), and that its label is not
/// the workers' group label.
fn poller_label(observer: &Observer, pid: u32, connector: &Connector) -> String {
    let (process, loops) = snapshot_of(observer, pid);
    let listed: Vec<String> = loops.iter().map(|l| format!("{}({})", l["thread"], l["tid"])).collect();
    let poller = loops
        .iter()
        .find(|l| l["tid"] == connector.poller)
        .unwrap_or_else(|| panic!("the Poller ({}) is not among the event loops: {listed:?}", connector.poller));
    let wrong: Vec<&String> = loops
        .iter()
        .zip(&listed)
        .filter(|(l, _)| connector.others.iter().any(|t| l["tid"] == *t))
        .map(|(_, s)| s)
        .collect();
    assert!(wrong.is_empty(), "workers or the Acceptor taken for event loops: {wrong:?} of {listed:?}");
    let label = poller["thread"].as_str().expect("a label").to_owned();
    let groups: Vec<&str> =
        process["thread_groups"].as_array().into_iter().flatten().filter_map(|g| g["name"].as_str()).collect();
    assert!(groups.contains(&GROUP), "the workers' group {GROUP} in the snapshot: {groups:?}");
    assert_ne!(label, GROUP, "the Poller's label is the workers' group label; loops {listed:?}");
    eprintln!("tomcat: Poller {} labelled {label:?}; workers' group {GROUP:?}; groups {groups:?}", connector.poller);
    label
}

/// No two series of the scrape share a name and a label set (per-thread and per-group series of
/// threads whose kernel names are all alike most of all).
fn assert_series_unique(observer: &Observer) {
    let samples = metrics::parse(&observer.metrics());
    let mut seen = BTreeSet::new();
    let twice: Vec<String> =
        samples.iter().map(|s| format!("{}{:?}", s.name, s.labels)).filter(|key| !seen.insert(key.clone())).collect();
    assert!(twice.is_empty(), "series listed twice: {twice:#?}");
    let loops = samples.iter().filter(|s| s.name == "gateway_observer_event_loop_utilization").count();
    assert!(loops >= 1, "no event loop utilization series");
}

/// The open or past alerts that name the Poller: it serves while the workers are stuck.
fn alerts_on(observer: &Observer, label: &str) -> Vec<String> {
    observer
        .alerts()
        .iter()
        .filter(|a| a["subject"] == label)
        .map(|a| format!("{} {} {}: {}", a["kind"], a["subject"], a["state"], a["summary"]))
        .collect()
}

/// A cold JVM under the full load at once runs its first requests slowly, enough of them at a
/// time that Tomcat grows the pool for them, and idle threads live 60 s: the JIT compiles the
/// serving path under two clients first (3 s or 1000 requests), so the healthy phase starts from
/// the spare threads and the fault has room to fill the pool.
fn warm_gently(gateway: &mut JvmGateway) {
    let load = Load::start(gateway.port, "/rpc/call", Shape { clients: 2, pause: Duration::from_millis(2) });
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end && gateway.stat("served") < 1000 {
        thread::sleep(Duration::from_millis(200));
    }
    let served = load.finish();
    eprintln!("tomcat: warmed up with {served} requests; {:?}", gateway.stats());
}

/// A fault that fills Tomcat's executor: PoolSaturated must name the workers' group, without the
/// Poller in it, keep firing for `HOLD` past detection (past the growth: the full pool must
/// carry it) and resolve after the heal; the Poller is never reported.
fn exec_pool_saturated(test: &str, fault: &str, load: Shape) {
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let kind = "PoolSaturated";
    let fault_name = format!("{fault}, exec pool");
    let detection = Detection { runtime: "jvm tomcat", fault: &fault_name, kind, start: Start::Watching };
    detection.declare();
    let name = format!("tomcat {fault}");
    let mut gateway = tomcat();
    warm_gently(&mut gateway);
    let mut scenario = Scenario::new(&name, gateway, "/rpc/call", &[GROUP], &[GROUP]);
    scenario.healthy(load);
    let pid = scenario.gateway.pid();
    let connector = Connector::of(pid);
    let label = poller_label(scenario.observer(), pid, &connector);
    assert_series_unique(scenario.observer());
    let healthy_pool = scenario.gateway.stat("pool");
    eprintln!("{name}: healthy stats {:?}", scenario.gateway.stats());
    assert!(healthy_pool + 16 <= 64, "the pool is at {healthy_pool} threads before the fault: no room left to fill");

    let before = scenario.fault(fault);
    let (alert, detected) = scenario.detected(kind, &before);
    eprintln!("{name}: stats at detection {:?}; evidence {}", scenario.gateway.stats(), alert["evidence"]);
    assert_eq!(alert["subject"], GROUP, "{alert:#}");
    assert_eq!(alert["evidence"]["thread_group"], GROUP, "{alert:#}");
    assert_eq!(alert["process"]["pid"], pid, "{alert:#}");
    // The pool grew under the fault (ground truth: the executor's own count), and the group the
    // alert counts is the workers and the Acceptor, never more: the Poller was left out.
    let grown = scenario.gateway.stat("pool");
    assert!(
        grown >= healthy_pool + 16,
        "the pool grew from {healthy_pool} to {grown} only: the fault is not in effect"
    );
    let counted = alert["evidence"]["threads"].as_u64().unwrap_or(0);
    let connector_threads = threads(pid).iter().filter(|(_, n)| n == GROUP).count() as u64;
    assert!(
        (16..connector_threads).contains(&counted),
        "the alert counts {counted} threads of {connector_threads} connector threads (the Poller among them)"
    );
    let held = Instant::now();
    let mut most_queued = 0;
    while held.elapsed() < HOLD {
        let pool = scenario.gateway.stat("pool");
        most_queued = most_queued.max(scenario.gateway.stat("queued"));
        assert!(
            firing(scenario.observer(), kind).is_some(),
            "{kind} no longer firing {:.1?} after detection, the fault still on and the pool at {pool} threads: {:#?}",
            held.elapsed(),
            scenario.observer().alerts()
        );
        thread::sleep(Duration::from_millis(500));
    }
    // Ground truth that the pool was full while named: the executor queued tasks behind it.
    assert!(most_queued > 0, "Tomcat's executor queued nothing while {kind} fired: the pool was never full");
    let on_poller = alerts_on(scenario.observer(), &label);
    assert!(on_poller.is_empty(), "the Poller {label} reported while the workers are stuck: {on_poller:#?}");
    assert_series_unique(scenario.observer());

    let resolved = scenario.healed(kind);
    let on_poller = alerts_on(scenario.observer(), &label);
    assert!(on_poller.is_empty(), "the Poller {label} reported: {on_poller:#?}");
    let seen: Vec<String> =
        scenario.observer().alerts().iter().map(|a| format!("{} {} {}", a["kind"], a["subject"], a["state"])).collect();
    eprintln!("{name}: every alert of the run {seen:?}");
    detection.report(detected, Some(resolved));
    assert!(scenario.finish() > 200, "the load barely ran");
}

/// Incident 2 in Tomcat's own executor: the servlet calls Guava's `RateLimiter.acquire()`, every
/// worker sleeps in it (timed waits that run to their timeout), the pool grows from its spare
/// threads to its maximum of 64 and stays full.
#[test]
fn tomcat_rate_limiter_in_the_exec_pool_is_a_saturated_pool() {
    exec_pool_saturated(module_path!(), "ratelimit", POOL_LOAD);
}

/// The servlet waits on `CompletableFuture.get()` that another thread completes 1 s later (an
/// async client's reply awaited without a timeout): `HELD_LOAD` holds more requests than 64
/// threads, so the pool grows to its maximum and stays full, every worker parked in an untimed
/// futex wait, as an idle worker waits for work, and the rest of the requests wait unread. A
/// pool, not a loop: PoolSaturated.
#[test]
#[ignore = "a variant of a scenario CI runs (one per detector and runtime family); runs in `cargo xtask bench detect`"]
fn tomcat_untimed_get_in_the_exec_pool_is_a_saturated_pool() {
    exec_pool_saturated(module_path!(), "untimed-get", HELD_LOAD);
}

/// The observer watches Tomcat from its first request and the load starts cold: class loading,
/// the interpreter and the first compilations on the Poller and the workers, and the pool
/// growing from its spare threads for the first burst. A cold start is not an incident.
#[test]
fn tomcat_cold_start_under_load_is_quiet() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = tomcat();
    let observer = cold_start_is_quiet("jvm tomcat", &gateway, 16);
    let connector = Connector::of(gateway.pid());
    poller_label(&observer, gateway.pid(), &connector);
    assert_series_unique(&observer);
}

/// Whether an alert of `kind` is firing now.
fn firing(observer: &Observer, kind: &str) -> Option<Value> {
    tests::alerts::alerts_of(&observer.alerts(), kind, "firing").into_iter().next()
}
