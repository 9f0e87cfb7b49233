//! `gateway-observer top` end to end: the real daemon watches the reference gateway through
//! incident 1 (a blocking Redis client on the event loops, Redis made slow with CLIENT PAUSE),
//! `top` runs in a detached tmux pane against the daemon's API, and `capture-pane` must show the
//! blocked thread and the `EventLoopBlocked` alert within seconds of the fault. Privileged (the
//! daemon loads eBPF); loopback only; every wait is bounded.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};
use tests::{
    load::{load, stop, stop_flag},
    observer::Observer,
    privileged,
    redis_server::Redis,
    reference_gateway::{Gateway, access_config},
    tmux::Tmux,
    upstream::{Behavior, Upstream},
};

/// A line that names a blocked gateway worker next to the alert kind.
fn blocked_line(screen: &str) -> Option<&str> {
    screen.lines().find(|l| l.contains("EventLoopBlocked") && l.contains("gw-worker-"))
}

#[test]
fn top_shows_the_blocked_event_loop_and_its_alert_live() {
    if !privileged(module_path!()) {
        return;
    }
    let Some(redis) = Redis::start() else { return };
    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start_with(&access_config(&redis, &up, "blocking"), "workers = 4");
    let mut con = redis.conn();
    let _: () = redis::cmd("SET").arg("tok").arg(r#"{"userId":"u-1"}"#).query(&mut con).expect("SET token");
    let observer = Observer::start(gw.pid());
    let done = stop_flag();
    let clients = load(gw.port, "/api/x", 4, done.clone(), Instant::now() + Duration::from_secs(60));

    let top = format!(
        "{} top --connect http://127.0.0.1:{} --interval 500ms",
        tests::binary("gateway-observer").display(),
        observer.port
    );
    let Some(tmux) = Tmux::start(&top, 120, 40) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tmux not found on PATH and CI=true: apt-get install tmux"
        );
        eprintln!("SKIPPED: tmux not found on PATH (apt-get install tmux)");
        return;
    };
    // Healthy first: top is connected and shows the gateway, and nothing is blocked.
    let (screen, _) = tmux.wait_for("the gateway process on the overview", Duration::from_secs(10), |s| {
        s.contains("reference-gatew") && s.contains("connected")
    });
    assert!(blocked_line(&screen).is_none(), "a blocked event loop before the fault:\n{screen}");

    // Fault: Redis stalls 60 ms of every 80, so the synchronous GETs park the workers in recv.
    let slow = Arc::new(AtomicBool::new(true));
    let slow_redis = {
        let slow = slow.clone();
        let mut con = redis.conn();
        thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(40);
            while slow.load(Ordering::Relaxed) && Instant::now() < end {
                let _: Result<(), _> = redis::cmd("CLIENT").arg("PAUSE").arg(60).arg("ALL").query(&mut con);
                thread::sleep(Duration::from_millis(80));
            }
        })
    };
    let (screen, after) = tmux.wait_for("a blocked gw-worker-N with EventLoopBlocked", Duration::from_secs(10), |s| {
        blocked_line(s).is_some()
    });
    eprintln!("top showed the blocked event loop {after:?} after the fault started:\n{screen}");
    let line = blocked_line(&screen).unwrap_or_default();
    // What top shows is what the daemon concluded: the thread on screen has an open alert.
    let subject = line
        .split_whitespace()
        .find(|w| w.starts_with("gw-worker-"))
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_digit()))
        .unwrap_or_default();
    let alerts = observer.alerts();
    assert!(
        alerts
            .iter()
            .any(|a| a["kind"] == "EventLoopBlocked" && a["subject"] == subject && a["process"]["pid"] == gw.pid()),
        "top shows {subject:?} blocked ({line:?}), the daemon lists {alerts:#?}"
    );

    // The alerts screen has the evidence: the blocking reason.
    tmux.send_keys("5");
    tmux.wait_for("the alert's evidence on the alerts screen", Duration::from_secs(5), |s| {
        s.contains("Evidence: EventLoopBlocked/") && s.contains("reason: socket")
    });

    // q quits and gives the terminal back: the pane's only command ends, so does the session.
    tmux.send_keys("q");
    let end = Instant::now() + Duration::from_secs(5);
    while tmux.alive() {
        assert!(Instant::now() < end, "top still running 5 s after q:\n{}", tmux.capture());
        thread::sleep(Duration::from_millis(100));
    }

    slow.store(false, Ordering::Relaxed);
    let _ = slow_redis.join();
    stop(&done);
    let served: usize = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    assert!(served > 100, "the load made only {served} requests");
}
