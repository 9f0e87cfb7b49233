//! EventLoopBusy with the real probes: an epoll loop that stays on CPU 250 ms every tenth
//! iteration is named within seconds, with its longest iteration measured by the kernel, and is
//! not mistaken for a blocked loop.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;
use tests::{
    daemon::{Daemon, http_get},
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
    let mut fixture = Command::new(env!("CARGO_BIN_EXE_busy-loop"))
        .args(["8", "250"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn busy-loop");
    let mut stdin = fixture.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(fixture.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("ready");
    let daemon = Daemon::start(&["--target", &format!("pid={}", fixture.id())]);
    writeln!(stdin, "go").expect("go");

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

    line.clear();
    stdout.read_line(&mut line).expect("done");
    drop(stdin);
    let _ = fixture.wait();
}
