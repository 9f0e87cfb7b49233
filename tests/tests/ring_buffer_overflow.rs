//! A full ring buffer loses events, counts every one, and loses nothing else: the daemon is
//! frozen (SIGSTOP) while a target makes far more long-enough blocks than the ring buffer holds,
//! then thawed. The drop count must be positive, the daemon must still serve, and the off-CPU
//! totals — kept in maps, not events — must still match the target's own measurement.

use std::time::Duration;

use tests::{
    fixture::Fixture,
    metrics::{parse, sum},
    observer::Observer,
    privileged, serial, wait_for, within,
};

#[test]
fn a_full_ring_buffer_counts_its_losses_and_nothing_else_is_lost() {
    if !privileged("a_full_ring_buffer_counts_its_losses_and_nothing_else_is_lost") {
        return;
    }
    let _serial = serial();
    // 8000 sleeps of 300 µs: over 1.6 times the 256 KiB ring buffer's 4681 events.
    let mut storm = Fixture::start(env!("CARGO_BIN_EXE_sleep-storm"), &["8000", "300"]);
    let daemon = Observer::run(&["--target", &format!("pid={}", storm.pid()), "--block-threshold", "100us"]);
    // SAFETY: signals to our own child.
    unsafe { libc::kill(daemon.pid() as i32, libc::SIGSTOP) };
    storm.go();
    let line = storm.result_line();
    // SAFETY: as above.
    unsafe { libc::kill(daemon.pid() as i32, libc::SIGCONT) };
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let (sleeps, total_ns) = (fields[0], fields[1]);

    let samples = wait_for(Duration::from_secs(10), || {
        let s = parse(&daemon.metrics());
        (sum(&s, "gateway_observer_bpf_events_lost_total", &[]) > 0.0
            && sum(&s, "gateway_observer_long_blocks_total", &[("thread_group", "storm-*")]) > 0.0)
            .then_some(s)
    })
    .unwrap_or_else(|| panic!("no loss counted after a frozen daemon:\n{}", daemon.metrics()));
    let lost = sum(&samples, "gateway_observer_bpf_events_lost_total", &[]);
    let received =
        sum(&samples, "gateway_observer_long_blocks_total", &[("thread_group", "storm-*"), ("reason", "sleep")]);
    eprintln!("{sleeps} sleeps: {received} block events received, {lost} lost");
    assert!(
        received + lost >= sleeps as f64 * 0.95,
        "received {received} + lost {lost} account for the {sleeps} sleeps"
    );
    assert!(received < sleeps as f64, "a frozen reader cannot have received every event");

    let observed = sum(
        &samples,
        "gateway_observer_thread_offcpu_seconds_total",
        &[("thread_group", "storm-*"), ("reason", "sleep")],
    );
    let observed_with_wakeup = observed
        + sum(
            &samples,
            "gateway_observer_thread_offcpu_seconds_total",
            &[("thread_group", "storm-*"), ("reason", "runqueue")],
        );
    let truth = total_ns as f64 / 1e9;
    // Short sleeps: the thread's own measurement includes the wakeup-to-run delay, so compare it
    // with sleep + runqueue; sleep alone must not exceed it.
    assert!(
        within(observed_with_wakeup, truth, 0.10),
        "storm off-CPU {observed_with_wakeup:.3} s vs measured {truth:.3} s"
    );
    assert!(observed <= truth * 1.01, "sleep {observed:.3} s exceeds wall time {truth:.3} s");
    storm.finish();
}
