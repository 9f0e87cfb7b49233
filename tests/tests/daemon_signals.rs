//! The daemon under signals and a closed stdout: SIGHUP (a `systemctl reload`, a terminal that
//! closed) is logged and ignored, not fatal; alert transitions written to a stdout whose reader is
//! gone (a journal that restarted) stop being logged there, and the daemon keeps serving.
//! Privileged (it loads eBPF); a Python asyncio gateway blocks its loop to make an alert.

use std::{
    thread,
    time::{Duration, Instant},
};

use tests::{
    alerts::wait_firing,
    closed_pipe,
    load::{load_paced, stop, stop_flag},
    observer::Observer,
    privileged,
    runtimes::RuntimeGateway,
    serial,
};

#[test]
fn sighup_leaves_the_daemon_serving() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let gateway = RuntimeGateway::python("gateway.py");
    let mut observer = Observer::start(gateway.pid());
    // SAFETY: kill with our own child's pid.
    assert_eq!(unsafe { libc::kill(observer.pid() as libc::pid_t, libc::SIGHUP) }, 0);
    // Two ticks later it must still answer.
    let after = Instant::now() + Duration::from_secs(1);
    while Instant::now() < after {
        assert!(observer.get("/metrics").is_some(), "/metrics unanswered after SIGHUP: the daemon died");
        thread::sleep(Duration::from_millis(100));
    }
    let status = observer.stop();
    assert!(status.success(), "the daemon after SIGHUP: {status}");
}

#[test]
fn a_closed_stdout_leaves_the_daemon_serving() {
    if !privileged(module_path!()) {
        return;
    }
    let _serial = serial();
    let mut gateway = RuntimeGateway::python("gateway.py");
    let mut observer = Observer::start_with_stdout(&[&format!("pid={}", gateway.pid())], closed_pipe());
    // An alert transition goes to the closed stdout.
    let done = stop_flag();
    let deadline = Instant::now() + Duration::from_secs(40);
    let clients = load_paced(gateway.port, "/", 2, Duration::from_millis(5), done.clone(), deadline);
    gateway.fault("sleep");
    let (alert, after) = wait_firing(&observer, "EventLoopBlocked", Duration::from_secs(20));
    eprintln!("{} firing after {after:?}", alert["subject"]);
    gateway.heal();
    stop(&done);
    for c in clients {
        let _ = c.join();
    }
    // A tick after the transition was written.
    thread::sleep(Duration::from_secs(1));
    assert!(observer.get("/metrics").is_some(), "/metrics unanswered after the alert was logged: the daemon died");
    let status = observer.stop();
    assert!(status.success(), "the daemon after writing to a closed stdout: {status}");
}
