//! Once its programs are attached the daemon keeps CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE,
//! CAP_PERFMON and CAP_BPF only, in every set of every thread, with no-new-privileges, and still
//! does its job with them: targets that appear after the drop, run by another user (so root's uid
//! alone opens nothing of theirs), are followed, their threads' off-CPU time measured, and a
//! `port=` target in another network namespace resolved. Started without one of the four (a
//! systemd unit's bounding set), it keeps the rest and runs.

use std::{collections::BTreeSet, process::Command, time::Duration};

use gateway_observer::host::privileges::kept_mask;
use tests::{
    fixture::Fixture,
    free_port,
    metrics::{parse, sum},
    netns::NetNs,
    observer::Observer,
    privileged,
    python::PythonServer,
    serial, wait_for, within,
};

const FIXTURE: &str = env!("CARGO_BIN_EXE_offcpu-fixture");
/// Targets run as nobody: the daemon's uid 0 owns nothing of theirs.
const AS_NOBODY: [&str; 4] = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];
const CAP_DAC_READ_SEARCH: u32 = 2;

/// One field of /proc/PID/task/TID/status.
fn status_field(status: &str, name: &str) -> String {
    status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned()).unwrap_or_default()
}

/// Every thread's (CapEff, CapPrm, CapBnd, CapInh, CapAmb, NoNewPrivs).
fn thread_privileges(pid: u32) -> Vec<(u32, [String; 6])> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the daemon's threads");
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .map(|tid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap_or_default();
            let fields = ["CapEff:", "CapPrm:", "CapBnd:", "CapInh:", "CapAmb:", "NoNewPrivs:"];
            (tid, fields.map(|f| status_field(&status, f)))
        })
        .collect()
}

fn assert_privileges(pid: u32, expected: u64) {
    let want = format!("{expected:016x}");
    let zero = format!("{:016x}", 0);
    for (tid, fields) in thread_privileges(pid) {
        let expect = [want.clone(), want.clone(), want.clone(), zero.clone(), zero.clone(), "1".to_owned()];
        assert_eq!(fields, expect, "thread {tid}: CapEff, CapPrm, CapBnd, CapInh, CapAmb, NoNewPrivs");
    }
}

/// The pids the daemon's snapshot lists as targets.
fn watched(observer: &Observer) -> BTreeSet<u64> {
    let (_, body) = observer.get("/api/v1/snapshot").expect("snapshot");
    let snapshot: serde_json::Value = serde_json::from_str(&body).expect("snapshot JSON");
    snapshot["processes"].as_array().into_iter().flatten().filter_map(|p| p["pid"].as_u64()).collect()
}

#[test]
fn after_the_drop_only_the_kept_set_remains_and_new_targets_are_still_followed() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let comm = format!("capdrop-{}", std::process::id() % 100_000);
    let port = free_port();
    let ns = NetNs::create(11);
    let daemon = Observer::run(&["--target", &format!("comm={comm}"), "--target", &format!("port={port}")]);
    assert_privileges(daemon.pid(), kept_mask());

    // Both targets start after the drop, as nobody.
    let mut args: Vec<&str> = AS_NOBODY.to_vec();
    args.extend([FIXTURE, "--comm", &comm]);
    let mut fixture = Fixture::start(args[0], &args[1..]);
    // PATH set anew: root's may lead into /root, where nobody cannot go.
    let in_ns: Vec<&str> = ns.exec_prefix().into_iter().chain(AS_NOBODY).chain(["env", "PATH=/usr/bin:/bin"]).collect();
    let listener = PythonServer::start_at(&in_ns, &ns.ns_ip, port);
    let (fixture_pid, listener_pid) = (u64::from(fixture.pid()), u64::from(listener.child.id()));
    // comm= targets are matched at the next tick; port owners are looked up every 5 s.
    let found = wait_for(Duration::from_secs(8), || {
        let seen = watched(&daemon);
        (seen.contains(&fixture_pid) && seen.contains(&listener_pid)).then_some(())
    });
    assert!(
        found.is_some(),
        "watching {:?}, expected the fixture {fixture_pid} (comm={comm}) and the namespace's listener {listener_pid} (port={port})",
        watched(&daemon)
    );

    fixture.go();
    let truth = fixture.truth();
    let collections = |samples: &[tests::metrics::Sample]| sum(samples, "gateway_observer_collections_total", &[]);
    let start = collections(&parse(&daemon.metrics()));
    let samples = wait_for(Duration::from_secs(10), || {
        let samples = parse(&daemon.metrics());
        (collections(&samples) >= start + 2.0).then_some(samples)
    })
    .expect("the daemon completed no collection for 10 s");
    let group = "sleeper-*";
    let slept =
        sum(&samples, "gateway_observer_thread_offcpu_seconds_total", &[("thread_group", group), ("reason", "sleep")]);
    let expected = truth.sleep_ns as f64 / 1e9;
    eprintln!("{group} sleep after the drop: observer {slept:.4} s, fixture {expected:.4} s");
    assert!(within(slept, expected, 0.10), "{group} sleep: observer {slept:.3} s, the fixture {expected:.3} s (±10%)");

    // Still so, in any thread started since (a blocking-pool lookup inherits the reduced sets).
    assert_privileges(daemon.pid(), kept_mask());
    fixture.finish();
}

#[test]
fn a_kept_capability_missing_at_start_stays_missing_and_the_daemon_runs() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    // The systemd unit's bounding set without CAP_DAC_READ_SEARCH, and no CAP_SETPCAP to narrow
    // the bounding set with.
    let prefix = ["setpriv", "--bounding-set=-all,+bpf,+perfmon,+sys_ptrace"];
    let sleeper = Command::new("sleep").arg("60").spawn().expect("sleep");
    let daemon = Observer::run_under(&prefix, &["--target", &format!("pid={}", sleeper.id())]);
    assert_privileges(daemon.pid(), kept_mask() & !(1 << CAP_DAC_READ_SEARCH));
    drop(daemon);
    let mut sleeper = sleeper;
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}
