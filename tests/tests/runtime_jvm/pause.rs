//! 6. A JVM pause: forced full GCs of a large live heap.

use std::{thread, time::Duration};

use serde_json::Value;
use tests::{
    alerts::alerts_of,
    jvm::{self, JvmGateway},
    jvm_scenario::{DETECT_WITHIN, Scenario, Shape, explain},
    metrics,
    observer::Observer,
    privileged, serial,
    summary::{Detection, Start},
    temp_dir,
};

/// What the JVM logged (`-Xlog:gc,safepoint`), in milliseconds: each full collection's pause and
/// each safepoint's total (stop-the-world from the request to the release of every thread).
struct GcLog {
    full: Vec<f64>,
    safepoints: Vec<f64>,
}

impl GcLog {
    fn read(log: &std::path::Path) -> GcLog {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut full = Vec::new();
        let mut safepoints = Vec::new();
        for line in text.lines() {
            if line.contains("Pause Full")
                && let Some(ms) =
                    line.rsplit(' ').next().and_then(|v| v.strip_suffix("ms")).and_then(|v| v.parse().ok())
            {
                full.push(ms);
            }
            if line.contains("Safepoint \"")
                && let Some(ns) = line
                    .rsplit("Total: ")
                    .next()
                    .and_then(|v| v.strip_suffix(" ns"))
                    .and_then(|v| v.parse::<f64>().ok())
            {
                safepoints.push(ns / 1e6);
            }
        }
        GcLog { full, safepoints }
    }

    /// What was logged after `earlier` was read.
    fn since(&self, earlier: &GcLog) -> GcLog {
        GcLog {
            full: self.full[earlier.full.len().min(self.full.len())..].to_vec(),
            safepoints: self.safepoints[earlier.safepoints.len().min(self.safepoints.len())..].to_vec(),
        }
    }

    fn long_safepoints(&self, at_least_ms: f64) -> Vec<f64> {
        self.safepoints.iter().copied().filter(|ms| *ms >= at_least_ms).collect()
    }
}

/// The observer's stop-the-world seconds of JVMs named `java`.
fn jvm_pause_seconds(observer: &Observer) -> f64 {
    metrics::sum(
        &metrics::parse(&observer.metrics()),
        "gateway_observer_jvm_pause_seconds_total",
        &[("process", "java")],
    )
}

/// A gateway with 1.5 GB live on ParallelGC whose fault forces a full GC as it switches on, then
/// 2 s after each one ends (300-900 ms stop-the-world each here). Every Java thread stops at the
/// safepoint — event loops and pool threads alike — so the only right name for it is a JVM
/// pause, not blocked loops or a saturated pool. One pause is a transient: `JvmPause` fires at
/// the second one (see `detect::jvm_pause`), so about 2 s + two pauses + a tick after the fault.
#[test]
fn jvm_full_gc_pauses_are_a_jvm_pause_not_blocked_loops() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    Detection { runtime: "jvm httpserver", fault: "full gc", kind: "JvmPause", start: Start::Watching }.declare();
    let dir = temp_dir("jvm-gc");
    let log = dir.join("gc.log");
    let log_opt = format!("-Xlog:gc,safepoint:file={}:uptime", log.display());
    let gateway = JvmGateway::start_within(
        "JdkHttpGateway",
        &["growing", "--live-mb", "150", "--ballast-mb", "1350"],
        &["-XX:+UseParallelGC", "-Xms3g", "-Xmx3g", "-Xmn256m", &log_opt],
        Duration::from_secs(60),
    );
    let mut scenario = Scenario::new(
        "gc pause",
        gateway,
        "/api/x",
        &["rpc-pool-*", "HTTP-Dispatcher", "VM Thread", "GC Thread#*", "completer-*"],
        &["rpc-pool-", "HTTP-Dispatcher", "VM Thread"],
    );
    scenario.healthy(Shape { clients: 8, pause: Duration::from_millis(20) });
    let logged_before = GcLog::read(&log);
    let stopped_before = jvm_pause_seconds(scenario.observer());
    let before = scenario.fault("gc");

    // Watch the fault: JvmPause must fire, and none of the kinds a pause must not be taken for.
    let forbidden = ["EventLoopBlocked", "EventLoopBusy", "PoolSaturated"];
    let start = scenario.fault_at.expect("the fault switched on");
    let mut wrong: Vec<String> = Vec::new();
    let mut pause: Option<(Value, Duration)> = None;
    let watch_until = |pause: &Option<(Value, Duration)>| {
        // Once it fired, two more pauses are watched for wrong kinds.
        pause.as_ref().map_or(DETECT_WITHIN, |(_, at)| *at + Duration::from_secs(6))
    };
    while start.elapsed() < watch_until(&pause) {
        let alerts = scenario.observer().alerts();
        for a in alerts.iter().filter(|a| forbidden.iter().any(|k| a["kind"] == *k)) {
            let line = format!("{} {} {}: {}", a["kind"], a["subject"], a["state"], a["summary"]);
            if !wrong.contains(&line) {
                wrong.push(line);
            }
        }
        if pause.is_none() {
            pause = alerts_of(&alerts, "JvmPause", "firing").into_iter().next().map(|a| (a, start.elapsed()));
        }
        thread::sleep(Duration::from_millis(100));
    }
    let during = GcLog::read(&log).since(&logged_before);
    eprintln!("gc pause: full GCs during the fault, as the JVM logged them (ms): {:?}", during.full);
    eprintln!("gc pause: safepoints of 50 ms or more during the fault (ms): {:?}", during.long_safepoints(50.0));
    assert!(
        !during.full.is_empty(),
        "no full GC in {:?} of the fault: the fixture's fault is not in effect",
        start.elapsed()
    );
    let explained = if pause.is_none() || !wrong.is_empty() {
        explain(scenario.observer(), scenario.gateway.pid(), &scenario.groups, &before)
    } else {
        String::new()
    };
    assert!(wrong.is_empty(), "a JVM pause taken for something else: {wrong:#?}\n{explained}");
    let Some((alert, detected)) = pause else {
        panic!("no JvmPause firing {DETECT_WITHIN:?} into forced full GCs of {:?} ms:\n{explained}", during.full);
    };
    eprintln!(
        "gc pause: JvmPause firing {detected:.2?} after the fault: {} evidence {}",
        alert["summary"], alert["evidence"]
    );
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    // Fires at the second pause: the first comes at once, the second 2 s after it ends; the alert
    // shows at the next tick (1 s) and the poll (0.1 s). 0.5 s of slack for a loaded machine.
    let pauses: Vec<f64> = during.long_safepoints(100.0);
    let second_pause_by = 2.0 + pauses.iter().take(2).sum::<f64>() / 1e3;
    assert!(
        detected.as_secs_f64() <= second_pause_by + 1.6,
        "fired {detected:.2?} after the fault, the second pause had ended by {second_pause_by:.2}s"
    );
    // The longest pause the counters prove: at least the threshold, never more than the longest
    // safepoint the JVM logged (1 ms for rounding).
    let longest_ms = alert["evidence"]["longest_pause_seconds"].as_f64().expect("longest pause") * 1e3;
    let logged_max = pauses.iter().copied().fold(0.0, f64::max);
    assert!(
        (100.0..=logged_max + 1.0).contains(&longest_ms),
        "longest pause {longest_ms:.1} ms against the JVM's longest safepoint {logged_max:.1} ms"
    );
    assert!(alert["evidence"]["long_pauses"].as_u64().is_some_and(|n| n >= 2), "{alert:#}");
    assert_eq!(alert["evidence"]["last_gc_cause"], "System.gc()", "{alert:#}");

    let resolved = scenario.healed("JvmPause");
    assert!(resolved <= Duration::from_secs(10), "resolved {resolved:.2?} after the heal");
    // Stop-the-world time: the observer's counter against the JVM's own log over the same stretch.
    // A healthy young collection in the tick before the fault may fall on either side (they take
    // up to 90 ms here): 100 ms and 5 % of tolerance.
    let stopped = jvm_pause_seconds(scenario.observer()) - stopped_before;
    let logged: f64 = GcLog::read(&log).since(&logged_before).safepoints.iter().sum::<f64>() / 1e3;
    eprintln!("gc pause: stop-the-world {stopped:.3}s by the observer's counter, {logged:.3}s by the JVM's log");
    assert!((stopped - logged).abs() <= 0.1 + 0.05 * logged, "stopped {stopped:.3}s, logged {logged:.3}s");
    eprintln!("gc pause: full GCs {:?} ms", during.full);
    Detection { runtime: "jvm httpserver", fault: "full gc", kind: "JvmPause", start: Start::Watching }
        .report(detected, Some(resolved));
    assert!(scenario.finish() > 50, "the load barely ran");
}

/// The observer's reading of a JVM's hsperfdata file, against `jcmd PerfCounter.print` (the JDK's
/// own reading of the same counters, from inside the JVM): the same counter names, and the same
/// values, where jcmd read between two of our readings (a counter that moved lies between them).
#[test]
fn jvm_hsperfdata_counters_match_jcmd() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = JvmGateway::start("JdkHttpGateway", &["growing"], &["-Xmx256m"]);
    let pid = gateway.pid();
    let read = || {
        let location = gateway_observer::host::hsperfdata::file::locate(pid).expect("the JVM's file is found");
        gateway_observer::host::hsperfdata::file::read(pid, &location).expect("the JVM's file parses")
    };
    let ours_before = read();
    let output =
        std::process::Command::new("jcmd").arg(pid.to_string()).arg("PerfCounter.print").output().expect("jcmd");
    let ours_after = read();
    assert!(output.status.success(), "jcmd failed: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    let mut theirs: std::collections::BTreeMap<&str, &str> =
        text.lines().skip(1).filter_map(|line| line.split_once('=')).collect();
    // jcmd adds the prologue's fields (version, used bytes, ...) as sun.perfdata.*: no entries.
    assert_eq!(theirs.get("sun.perfdata.majorVersion"), Some(&"2"), "the layout version the parser knows");
    theirs.retain(|name, _| !name.starts_with("sun.perfdata."));
    use gateway_observer::host::hsperfdata::format::Value as V;
    let mut differ = Vec::new();
    for (name, value) in &theirs {
        let (Some(before), Some(after)) = (ours_before.counters.get(*name), ours_after.counters.get(*name)) else {
            differ.push(format!("{name}: not read"));
            continue;
        };
        let same = match (before, after) {
            (V::Long(b), V::Long(a)) => value.parse::<i64>().is_ok_and(|v| (*b.min(a)..=*b.max(a)).contains(&v)),
            (V::Text(b), V::Text(a)) => {
                let v = value.trim_matches('"');
                v == b || v == a
            }
            _ => false,
        };
        if !same {
            differ.push(format!("{name}: jcmd {value}, ours {before:?} then {after:?}"));
        }
    }
    eprintln!("hsperfdata: {} counters from jcmd, {} read by the observer", theirs.len(), ours_after.counters.len());
    assert!(theirs.len() > 100, "jcmd printed {} counters:\n{text}", theirs.len());
    assert_eq!(theirs.len(), ours_after.counters.len(), "the same names; those that differ: {differ:#?}");
    // A variable counter (a space's used bytes) may go up and back down between our readings.
    assert!(differ.len() <= 3, "counters that differ from jcmd's: {differ:#?}");
    for name in ["sun.os.hrt.frequency", "sun.rt.safepoints", "sun.rt.safepointTime", "sun.gc.collector.0.name"] {
        assert!(!differ.iter().any(|d| d.starts_with(name)), "{name} differs: {differ:#?}");
    }
    let counters =
        gateway_observer::host::hsperfdata::JvmCounters::from_perf_data(&ours_after).expect("pause counters");
    assert!(counters.frequency > 0 && !counters.collectors.is_empty(), "{counters:?}");
}
