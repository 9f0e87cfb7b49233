//! EventLoopBusy with the real probes: an epoll loop that stays on CPU 250 ms every tenth
//! iteration is named within seconds, with its longest iteration measured by the kernel, and is
//! not mistaken for a blocked loop.

use std::time::Duration;

use serde_json::Value;
use tests::{
    daemon::{Daemon, http_get},
    fixture::Fixture,
    privileged, serial, wait_for,
};

fn alerts(daemon: &Daemon) -> Vec<Value> {
    let (status, body) = http_get(daemon.port, "/api/v1/alerts");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).expect("alerts JSON")["alerts"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_loop_that_stays_on_cpu_is_named_busy() {
    if !privileged("a_loop_that_stays_on_cpu_is_named_busy") {
        return;
    }
    let _serial = serial();
    let mut fixture = Fixture::start(env!("CARGO_BIN_EXE_busy-loop"), &["8", "250"]);
    let daemon = Daemon::start(&["--target", &format!("pid={}", fixture.pid())]);
    fixture.go();

    let alert = wait_for(Duration::from_secs(6), || {
        alerts(&daemon).into_iter().find(|a| a["kind"] == "EventLoopBusy" && a["state"] == "firing")
    })
    .unwrap_or_else(|| panic!("no EventLoopBusy firing within 6 s of the loop starting: {:#?}", alerts(&daemon)));
    eprintln!("{alert:#}");
    assert_eq!(alert["subject"], "loop-1", "{alert:#}");
    let longest = alert["evidence"]["longest_on_cpu_seconds"].as_f64().expect("longest");
    assert!((0.2..=0.35).contains(&longest), "longest on-CPU iteration {longest:.3} s; the loop spins 0.25 s");
    let blocked: Vec<Value> = alerts(&daemon).into_iter().filter(|a| a["kind"] == "EventLoopBlocked").collect();
    assert!(blocked.is_empty(), "a spinning loop is busy, not blocked: {blocked:#?}");

    let _ = fixture.result_line();
    fixture.finish();
}
