//! Per-target quotas: a target that starts far more threads and connections than its quota gets
//! exactly its quota followed (the kernel refuses the rest and counts them), while another
//! target started at the same moment keeps all of its own. Both targets are followed from before
//! their threads and connections exist, so the kernel's fork and connect hooks decide.

use std::{net::TcpListener, time::Duration};

use tests::{
    fixture::Fixture,
    metrics::{parse, sum},
    observer::Observer,
    privileged, serial, temp_dir, wait_for,
};

const THREAD_QUOTA: usize = 50;
const CONNECTION_QUOTA: usize = 20;
/// Two CPUs racing past the last unit of a budget each take one (`take_from_budget`).
const OVERSHOOT: f64 = 2.0;

#[test]
fn a_target_past_its_quota_is_cut_off_and_the_others_keep_theirs() {
    if !privileged("a_target_past_its_quota_is_cut_off_and_the_others_keep_theirs") {
        return;
    }
    let _serial = serial();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    // Accepted connections stay in the listener's backlog (up to 128): none is read.
    let mut hog = Fixture::start(env!("CARGO_BIN_EXE_thread-hog"), &["quota-hog", "120", &port, "60"]);
    let mut modest = Fixture::start(env!("CARGO_BIN_EXE_thread-hog"), &["quota-modest", "30", &port, "10"]);
    let dir = temp_dir("quotas");
    let config = dir.join("quotas.toml");
    std::fs::write(
        &config,
        format!("max_threads_per_target = {THREAD_QUOTA}\nmax_connections_per_target = {CONNECTION_QUOTA}\n"),
    )
    .expect("write config");
    let observer = Observer::start_with(
        &[&format!("pid={}", hog.pid()), &format!("pid={}", modest.pid())],
        &["--config", config.to_str().expect("utf-8")],
    );
    let followed =
        |samples: &[_], process: &str| sum(samples, "gateway_observer_pool_threads", &[("process", process)]);
    // Both main threads followed: the targets are in the kernel's map before they start more.
    wait_for(Duration::from_secs(10), || {
        let s = parse(&observer.metrics());
        (followed(&s, "quota-hog") >= 1.0 && followed(&s, "quota-modest") >= 1.0).then_some(())
    })
    .unwrap_or_else(|| panic!("targets never followed:\n{}", observer.metrics()));
    hog.go();
    modest.go();
    assert_eq!(hog.result_line().trim(), "spawned 120 60");
    assert_eq!(modest.result_line().trim(), "spawned 30 10");

    // Expected: the hog holds its quotas (its main thread counts), the modest target everything.
    let threads_refused = (121 - THREAD_QUOTA) as f64;
    let connections_refused = (60 - CONNECTION_QUOTA) as f64;
    let samples = wait_for(Duration::from_secs(10), || {
        let s = parse(&observer.metrics());
        let refused = |kind| sum(&s, "gateway_observer_quota_refused_total", &[("kind", kind)]);
        (followed(&s, "quota-modest") >= 31.0
            && refused("threads") >= threads_refused - OVERSHOOT
            && refused("connections") >= connections_refused - OVERSHOOT)
            .then_some(s)
    })
    .unwrap_or_else(|| panic!("quotas not applied as expected:\n{}", observer.metrics()));
    let refused = |kind| sum(&samples, "gateway_observer_quota_refused_total", &[("kind", kind)]);
    let hog_threads = followed(&samples, "quota-hog");
    eprintln!(
        "hog: {hog_threads} threads followed, refused {} threads and {} connections; modest: {} threads followed",
        refused("threads"),
        refused("connections"),
        followed(&samples, "quota-modest")
    );
    assert!(
        (THREAD_QUOTA as f64 - OVERSHOOT..=THREAD_QUOTA as f64 + OVERSHOOT).contains(&hog_threads),
        "the hog has {hog_threads} threads followed, its quota is {THREAD_QUOTA}"
    );
    assert!(refused("threads") <= threads_refused + OVERSHOOT, "more threads refused than the hog's excess");
    assert!(
        refused("connections") <= connections_refused + OVERSHOOT,
        "more connections refused than the hog's excess"
    );
    assert_eq!(followed(&samples, "quota-modest"), 31.0, "the modest target keeps all its threads");
    drop(observer);
    hog.finish();
    modest.finish();
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
}
