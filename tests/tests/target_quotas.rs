//! Per-target quotas: a target that starts far more threads and connections than its quota gets
//! exactly its quota followed (the kernel refuses the rest and counts them), while another
//! target started at the same moment keeps all of its own. Both targets are followed from before
//! their threads and connections exist, so the kernel's fork and connect hooks decide. And a
//! target flooding the socket ring while the daemon cannot drain it leaves another target its
//! share: every request of the other is still seen.

use std::{net::TcpListener, process::Command, time::Duration};

use tests::{
    fixture::Fixture,
    free_port, http_client,
    metrics::{parse, sum},
    nginx::Nginx,
    observer::Observer,
    privileged,
    reference_gateway::Gateway,
    serial, temp_dir,
    upstream::{Behavior, Upstream},
    wait_for,
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

#[test]
fn a_target_flooding_the_socket_ring_leaves_the_others_their_share() {
    if !privileged("a_target_flooding_the_socket_ring_leaves_the_others_their_share") {
        return;
    }
    let _serial = serial();
    let upstream = Upstream::start("items", Behavior::Delay(Duration::ZERO));
    let flooder = Gateway::start(&format!(
        "[upstreams.items]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"items\"\n",
        upstream.addr()
    ));
    let port = free_port();
    let victim = Nginx::proxy(
        port,
        &format!("  upstream items {{ server {}; }}", upstream.addr()),
        "    location / { proxy_pass http://items; }",
    );
    let observer = Observer::start_with_targets(&[&format!("pid={}", flooder.pid()), &format!("pid={}", victim.pid())]);
    let victim_requests = || {
        let s = parse(&observer.metrics());
        sum(&s, "gateway_observer_http_requests_total", &[("process", "nginx"), ("direction", "inbound")])
    };
    // One request seen first: nginx's workers and its connection are followed.
    wait_for(Duration::from_secs(10), || {
        http_client::request(port, "GET", "/items", &[], b"");
        (victim_requests() >= 1.0).then_some(())
    })
    .unwrap_or_else(|| panic!("nginx's requests never seen:\n{}", observer.metrics()));
    // Warm-up requests still being counted are counted before the flood starts.
    std::thread::sleep(Duration::from_secs(1));
    let before = victim_requests();

    // SAFETY: signals to our own child.
    unsafe { libc::kill(observer.pid() as i32, libc::SIGSTOP) };
    // About 600 bytes of ring per transfer and four transfers per request: 3 s of wrk would fill
    // the 8 MiB ring many times over.
    let mut wrk = KillOnDrop(
        Command::new("wrk")
            .args(["-t1", "-c16", "-d3s", &format!("http://127.0.0.1:{}/items", flooder.addr().port())])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run wrk"),
    );
    std::thread::sleep(Duration::from_millis(1500));
    const VICTIM_REQUESTS: usize = 20;
    for _ in 0..VICTIM_REQUESTS {
        assert_eq!(http_client::request(port, "GET", "/items", &[], b"").status, 200);
    }
    let status = wrk.0.wait().expect("wait for wrk");
    // SAFETY: as above.
    unsafe { libc::kill(observer.pid() as i32, libc::SIGCONT) };
    assert!(status.success(), "wrk failed");

    let expected = before + VICTIM_REQUESTS as f64;
    let seen = wait_for(Duration::from_secs(10), || {
        let seen = victim_requests();
        (seen >= expected).then_some(seen)
    });
    let samples = parse(&observer.metrics());
    let shared_out = sum(&samples, "gateway_observer_quota_refused_total", &[("kind", "ring_records")]);
    let lost = sum(&samples, "gateway_observer_bpf_events_lost_total", &[("ring", "sockets")]);
    eprintln!(
        "victim: {seen:?} of {expected} requests seen; flooder: {shared_out} records past its share; {lost} lost to a full ring"
    );
    assert!(shared_out > 0.0, "the flood never met its share of the ring:\n{}", observer.metrics());
    assert_eq!(seen, Some(expected), "the victim's requests during the flood must all be seen");
    assert_eq!(victim_requests(), expected, "no request counted twice");
}

/// A child process killed and reaped when the test ends, also when it fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
