//! A full ring buffer loses events, counts every one, and loses nothing else: the daemon is
//! frozen (SIGSTOP) while a target makes far more long-enough blocks than the ring buffer holds,
//! then thawed. The drop count must be positive, the daemon must still serve, and what the
//! kernel keeps in maps, not events, must still match the target's own measurement: the
//! off-CPU totals and the count of long blocks.
//!
//! Only event loops' long blocks are sent one by one, so the storm thread is named an event loop
//! (`[event_loops] include`) and the daemon is frozen once it treats it as one.

use std::time::Duration;

use tests::{
    fixture::Fixture,
    metrics::{parse, sum},
    observer::Observer,
    privileged, serial, wait_for, within,
};

/// Records the 256 KiB ring holds (`Event` is 56 bytes).
const RING_EVENTS: f64 = 4681.0;

#[test]
fn a_full_ring_buffer_counts_its_losses_and_nothing_else_is_lost() {
    if !privileged("a_full_ring_buffer_counts_its_losses_and_nothing_else_is_lost") {
        return;
    }
    let _serial = serial();
    let config = tests::temp_dir("ring-overflow").join("observer.toml");
    std::fs::write(&config, "[event_loops]\ninclude = [\"storm-*\"]\n").expect("write config");
    // 8000 sleeps of 300 µs: over 1.6 times the 256 KiB ring buffer's 4681 events.
    let mut storm = Fixture::start(env!("CARGO_BIN_EXE_sleep-storm"), &["8000", "300"]);
    let daemon = Observer::run(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--target",
        &format!("pid={}", storm.pid()),
        "--block-threshold",
        "100us",
    ]);
    wait_for(Duration::from_secs(10), || {
        let s = parse(&daemon.metrics());
        s.iter()
            .any(|m| {
                m.name == "gateway_observer_event_loop_utilization"
                    && m.labels.get("thread").map(String::as_str) == Some("storm-1")
            })
            .then_some(())
    })
    .unwrap_or_else(|| panic!("storm-1 never taken for an event loop:\n{}", daemon.metrics()));
    // One more tick, so the kernel has been told (the tick that names a loop tells it after).
    std::thread::sleep(Duration::from_millis(500));
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
        let counted =
            sum(&s, "gateway_observer_long_blocks_total", &[("thread_group", "storm-*"), ("reason", "sleep")]);
        (sum(&s, "gateway_observer_bpf_events_lost_total", &[]) > 0.0 && counted >= sleeps as f64 * 0.99).then_some(s)
    })
    .unwrap_or_else(|| {
        panic!("no loss counted, or long blocks not all counted, after a frozen daemon:\n{}", daemon.metrics())
    });
    let lost = sum(&samples, "gateway_observer_bpf_events_lost_total", &[]);
    let counted =
        sum(&samples, "gateway_observer_long_blocks_total", &[("thread_group", "storm-*"), ("reason", "sleep")]);
    eprintln!("{sleeps} sleeps: {counted} long blocks counted, {lost} events lost");
    // Every sleep passes the 100 µs threshold; each sends a block record (and, from the second
    // on, a stack record) into a ring that holds RING_EVENTS.
    assert!(within(counted, sleeps as f64, 0.01), "long blocks counted {counted} vs {sleeps} sleeps");
    assert!(lost >= sleeps as f64 - RING_EVENTS, "lost {lost}: the ring cannot have held more than {RING_EVENTS}");
    assert!(lost <= 2.0 * sleeps as f64, "lost {lost}: more than the {sleeps} sleeps' records");

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
