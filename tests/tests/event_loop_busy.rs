//! EventLoopBusy with the real probes: an epoll loop that stays on CPU 250 ms every tenth
//! iteration is named within seconds, with its longest iteration measured by the kernel, and is
//! not mistaken for a blocked loop.

use std::time::Duration;

use serde_json::Value;
use tests::{
    fixture::Fixture,
    metrics::{self, sum},
    observer::Observer,
    privileged, serial,
    summary::{Detection, Start},
    wait_for,
};

/// The busy-loop fixture (`SECONDS SPIN_MS`) started and watched; returns the first
/// EventLoopBusy alert firing within `within`, with the fixture and daemon and when the loop
/// started.
fn busy_alert(args: &[&str], within: Duration) -> (Value, Fixture, Observer, std::time::Instant) {
    let mut fixture = Fixture::start(env!("CARGO_BIN_EXE_busy-loop"), args);
    let daemon = Observer::run(&["--target", &format!("pid={}", fixture.pid())]);
    fixture.go();
    let started = std::time::Instant::now();
    let alert = wait_for(within, || {
        daemon.alerts().into_iter().find(|a| a["kind"] == "EventLoopBusy" && a["state"] == "firing")
    })
    .unwrap_or_else(|| {
        panic!("no EventLoopBusy firing within {within:?} of the loop starting: {:#?}", daemon.alerts())
    });
    (alert, fixture, daemon, started)
}

/// The fixture's first spin begins after ten 20 ms polls: detection is timed from there. The
/// fault is not fixed (the fixture ends with it).
fn report_busy(fault: &str, loop_started: std::time::Instant) {
    let detected = loop_started.elapsed().saturating_sub(Duration::from_millis(200));
    Detection { runtime: "busy-loop (epoll)", fault, kind: "EventLoopBusy", start: Start::Watching }
        .report(detected, None);
}

#[test]
fn a_loop_that_stays_on_cpu_is_named_busy() {
    if !privileged("a_loop_that_stays_on_cpu_is_named_busy") {
        return;
    }
    let _serial = serial();
    let (alert, mut fixture, daemon, started) = busy_alert(&["8", "250"], Duration::from_secs(6));
    report_busy("250 ms spins, every 10th iteration", started);
    eprintln!("{alert:#}");
    assert_eq!(alert["subject"], "loop-1", "{alert:#}");
    let longest = alert["evidence"]["longest_on_cpu_seconds"].as_f64().expect("longest");
    // A 250 ms spin of wall time gets less CPU on a crowded machine (the exact check, against the
    // thread's own CPU clock, is on the histogram below); never more.
    assert!((0.1..=0.26).contains(&longest), "longest on-CPU iteration {longest:.3} s; the loop spins 0.25 s");
    let blocked: Vec<Value> = daemon.alerts().into_iter().filter(|a| a["kind"] == "EventLoopBlocked").collect();
    assert!(blocked.is_empty(), "a spinning loop is busy, not blocked: {blocked:#?}");

    // The iteration histogram: the spins, and only they, took more than 67 ms on CPU.
    let line = fixture.result_line();
    let numbers: Vec<f64> = line.split_whitespace().skip(1).filter_map(|n| n.parse().ok()).collect();
    let [spins, spin_cpu_ns] = numbers[..] else { panic!("fixture said {line:?}") };
    std::thread::sleep(Duration::from_millis(600));
    let text = daemon.metrics();
    let samples = metrics::parse(&text);
    let name = "gateway_observer_event_loop_iteration_seconds";
    let process = ("process", "busy-loop");
    let all = sum(&samples, &format!("{name}_count"), &[process]);
    let short = sum(&samples, &format!("{name}_bucket"), &[process, ("le", "0.067108864")]);
    let long_sum = sum(&samples, &format!("{name}_sum"), &[process]);
    eprintln!(
        "{spins} spins ({:.2} s CPU); iterations {all}, of them over 67 ms {}; on-CPU sum {long_sum:.2} s",
        spin_cpu_ns / 1e9,
        all - short
    );
    // The last spin's iteration is still open when the thread ends. One more fell below 67 ms once
    // in a loaded CI-form run (16 of 18, the iteration count unchanged): a late-closed off-CPU
    // span is the likely cause (bpf_missed_switches_total), tolerated here.
    assert!((spins - 2.0..=spins).contains(&(all - short)), "long iterations {} vs {spins} spins", all - short);
    // Nine 20 ms polls come between two spins.
    assert!(all >= 9.0 * spins, "the 20 ms polls are iterations too: {all}");
    // Ground truth: the CPU time the spins took by the thread's own clock (on a crowded machine a
    // 250 ms spin gets less), less the last spin's share if its iteration was still open. The
    // short iterations add microseconds each.
    let expected = spin_cpu_ns / 1e9 * (all - short) / spins;
    assert!(
        (long_sum - expected).abs() <= expected * 0.1 + 0.05,
        "on-CPU sum {long_sum:.3} s vs {expected:.3} s by the thread's clock"
    );
    fixture.finish();
}

/// A loop that never comes back to its poll (here for 8 s; in production, an infinite loop) is
/// named while it spins, not when it ends.
#[test]
fn a_loop_spinning_without_end_is_named_while_it_spins() {
    if !privileged("a_loop_spinning_without_end_is_named_while_it_spins") {
        return;
    }
    let _serial = serial();
    // 10 iterations of 20 ms polling, then one 8 s spin.
    let (alert, mut fixture, daemon, started) = busy_alert(&["9", "8000"], Duration::from_secs(5));
    let spun = started.elapsed().as_secs_f64() - 0.2;
    report_busy("endless spin", started);
    eprintln!("firing {spun:.1}s into the spin: {}", alert["summary"]);
    assert_eq!(alert["subject"], "loop-1", "{alert:#}");
    assert_eq!(alert["evidence"]["ongoing"], true, "{alert:#}");
    let so_far = alert["evidence"]["longest_on_cpu_seconds"].as_f64().expect("longest");
    // Measured at a tick before the alert was read; the loop may also have waited
    // for a CPU on this shared machine, which does not count.
    assert!(so_far > 0.1 && so_far <= spun + 0.3, "on CPU so far {so_far:.2} s, {spun:.2} s into the spin");
    let blocked: Vec<Value> = daemon.alerts().into_iter().filter(|a| a["kind"] == "EventLoopBlocked").collect();
    assert!(blocked.is_empty(), "a spinning loop is busy, not blocked: {blocked:#?}");

    let _ = fixture.result_line();
    fixture.finish();
}
