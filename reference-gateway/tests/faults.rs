//! The incident faults of the reference gateway, against a real Redis and real upstreams:
//! the Redis access check (async and blocking), the saturated rpc pool behind a sleeping rate
//! limiter, and the upstream response timeout switched at run time.

use std::io::{Read, Write};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tests::{http_client::*, redis_server::*, reference_gateway::*, upstream::*, *};

/// x86_64 syscall numbers seen in /proc/PID/task/TID/syscall.
const SYS_READ: i64 = 0;
const SYS_RECVFROM: i64 = 45;
const SYS_NANOSLEEP: i64 = 35;
const SYS_CLOCK_NANOSLEEP: i64 = 230;

fn check_access_filter(mode: &str) {
    let Some(redis) = Redis::start() else { return };
    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start(&access_config(&redis, &up, mode));
    let mut con = redis.conn();
    let _: () = redis::cmd("SET")
        .arg("tok-short")
        .arg(r#"{"userId":"u-1","userName":"Ann"}"#)
        .arg("EX")
        .arg(100)
        .query(&mut con)
        .unwrap();
    let _: () =
        redis::cmd("SET").arg("tok-long").arg(r#"{"userId":"u-2"}"#).arg("EX").arg(20000).query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("tok-nouser").arg(r#"{"name":"x"}"#).query(&mut con).unwrap();

    assert_eq!(request(gw.port, "GET", "/api/x", &[], b"").status, 401);
    assert_eq!(request(gw.port, "GET", "/api/x", &[("Authorization", "Bearer unknown")], b"").status, 401);
    assert_eq!(request(gw.port, "GET", "/api/x", &[("Authorization", "Bearer tok-nouser")], b"").status, 401);

    let r = request(gw.port, "GET", "/api/x", &[("Authorization", "Bearer tok-short"), ("X-User-Id", "spoofed")], b"");
    assert_eq!(r.status, 200, "{r:?}");
    let lower = r.body.to_ascii_lowercase();
    assert!(lower.contains("x-user-id: u-1") && lower.contains("x-user-name: ann"), "{}", r.body);
    assert!(!lower.contains("spoofed"), "client-supplied user header reached the upstream: {}", r.body);
    let ttl: i64 = redis::cmd("TTL").arg("tok-short").query(&mut con).unwrap();
    assert!((14_300..=14_400).contains(&ttl), "TTL not refreshed to 4 h: {ttl}");

    assert_eq!(request(gw.port, "GET", "/api/x", &[("Authorization", "Bearer tok-long")], b"").status, 200);
    let ttl: i64 = redis::cmd("TTL").arg("tok-long").query(&mut con).unwrap();
    assert!(ttl > 14_400, "a TTL above 4 h must be left alone: {ttl}");

    let r = request(gw.port, "GET", "/open", &[("Authorization", "Bearer unknown"), ("X-User-Id", "spoofed")], b"");
    assert_eq!(r.status, 200, "optional route must pass unknown tokens: {r:?}");
    assert!(!r.body.to_ascii_lowercase().contains("x-user-id"), "{}", r.body);
    assert_eq!(gw.metric("reference_gateway_access_checks_total{result=\"allowed\"}"), 2.0);
}

#[test]
fn access_check_async_reads_refreshes_and_injects() {
    check_access_filter("async");
}

#[test]
fn access_check_blocking_behaves_the_same_when_redis_is_fast() {
    check_access_filter("blocking");
}

/// Pauses Redis, sends more protected requests than workers, and reports where the worker
/// threads sat and how long /health took meanwhile.
fn workers_during_redis_pause(mode: &str) -> Option<(usize, Duration)> {
    let redis = Redis::start()?;
    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start_with(&access_config(&redis, &up, mode), "workers = 2");
    let mut con = redis.conn();
    let _: () = redis::cmd("SET").arg("tok").arg(r#"{"userId":"u-1"}"#).query(&mut con).unwrap();
    // Warm both clients' connections so the pause hits a read, not a connect.
    assert_eq!(request(gw.port, "GET", "/api/warm", &[("Authorization", "Bearer tok")], b"").status, 200);

    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(2000).arg("ALL").query(&mut con).unwrap();
    let paused_at = Instant::now();
    let port = gw.port;
    let pid = gw.pid();
    let blocked_in_read = || {
        threads(pid)
            .iter()
            .filter(|(_, n)| n.starts_with("gw-worker-"))
            .filter(|(tid, _)| matches!(thread_syscall(pid, *tid), Some(SYS_READ | SYS_RECVFROM)))
            .count()
    };
    // Keep protected requests coming (bounded in count and time, well inside the pause) until
    // both workers sit in the Redis read. A worker may also end up parked behind the blocked one
    // with nobody polling epoll: tokio cannot steal what the blocked worker holds.
    let mut clients = Vec::new();
    let mut blocked = 0;
    while paused_at.elapsed() < Duration::from_millis(600) && blocked < 2 && clients.len() < 20 {
        clients.push(std::thread::spawn(move || {
            try_request(port, "GET", "/api/p", &[("Authorization", "Bearer tok")], b"", Duration::from_secs(10))
        }));
        std::thread::sleep(Duration::from_millis(30));
        blocked = blocked_in_read();
    }
    let seen: Vec<_> = threads(pid).into_iter().map(|(tid, n)| (n, thread_syscall(pid, tid))).collect();
    eprintln!("threads during the pause ({mode}): {seen:?}");
    let health_start = Instant::now();
    let health = try_request(gw.port, "GET", "/health", &[], b"", Duration::from_secs(10)).unwrap();
    let health_took = health_start.elapsed();
    assert_eq!(health.status, 200);
    for c in clients {
        let r = c.join().unwrap().expect("protected request during the pause");
        assert_eq!(r.status, 200, "{r:?}");
    }
    Some((blocked, health_took))
}

/// Ports come from `free_port` and are free only until someone binds them; tests run in
/// parallel. A server started on a port another test's server took first must be refused, not
/// taken for ours because the other one answers PING or /health there: once, a gateway started
/// that way left this file's warm-up request to another test's gateway, whose Redis did not know
/// the token (401).
#[test]
fn a_port_another_tests_server_holds_is_never_taken_for_ours() {
    let Some(redis) = Redis::start() else { return };
    assert_eq!(Redis::start_on(redis.port).err(), Some(redis.port), "a second Redis on a port a Redis holds");
    let up = Upstream::start("up", Behavior::Echo);
    let gw = Gateway::start(&access_config(&redis, &up, "async"));
    match Gateway::start_on(gw.port, free_port(), "", "") {
        Ok(other) => {
            panic!("a gateway on port {} (held by pid {}) was taken for pid {}", gw.port, gw.pid(), other.pid())
        }
        Err(complaint) => assert!(complaint.contains("Address already in use"), "{complaint}"),
    }
    // The upstream listens in this process, the gateway in its own.
    let me = std::process::id();
    assert!(listens_on(gw.pid(), gw.port) && !listens_on(me, gw.port));
    assert!(listens_on(me, up.port) && !listens_on(gw.pid(), up.port));
}

#[test]
fn blocking_redis_client_parks_the_worker_threads_in_socket_reads() {
    let Some((blocked, health_took)) = workers_during_redis_pause("blocking") else { return };
    assert!(blocked >= 1, "no tokio worker sat in read/recvfrom on the Redis socket");
    assert!(
        health_took >= Duration::from_millis(800),
        "/health answered in {health_took:?} although every worker was blocked"
    );
}

#[test]
fn async_redis_client_leaves_the_workers_free() {
    let Some((blocked, health_took)) = workers_during_redis_pause("async") else { return };
    assert_eq!(blocked, 0, "no worker may block on Redis in async mode");
    assert!(health_took < Duration::from_millis(300), "/health took {health_took:?} in async mode");
}

#[test]
fn pool_fault_grows_to_max_parks_threads_in_sleep_and_rejects_with_503() {
    let gw = Gateway::start(
        r#"
        [faults.pool]
        enabled = true
        core = 2
        max = 4
        permits_per_second = 1.0
        [[routes]]
        path_prefix = "/rpc/"
        handler = "pool"
        "#,
    );
    let n = 12;
    let barrier = Arc::new(Barrier::new(n));
    let port = gw.port;
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                request(port, "GET", "/rpc/call", &[], b"")
            })
        })
        .collect();
    let pid = gw.pid();
    let sleeping = || {
        threads(pid)
            .iter()
            .filter(|(_, name)| name.starts_with("rpc-pool-"))
            .filter(|(tid, _)| matches!(thread_syscall(pid, *tid), Some(SYS_NANOSLEEP | SYS_CLOCK_NANOSLEEP)))
            .count()
    };
    wait_until("rpc pool threads asleep in the rate limiter", Duration::from_secs(3), || sleeping() >= 2);
    // The event loops are free: this fault starves the pool, not the runtime.
    let start = Instant::now();
    assert_eq!(gw.get("/health").status, 200);
    assert!(start.elapsed() < Duration::from_millis(300), "/health took {:?}", start.elapsed());

    let results: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.status == 200).count();
    let rejected: Vec<_> = results.iter().filter(|r| r.status == 503).collect();
    assert_eq!(ok + rejected.len(), n, "{results:?}");
    assert!(rejected.len() >= 3, "only {} of {n} rejected by a 4-thread pool", rejected.len());
    assert!(rejected[0].body.contains("rpc pool full"), "{}", rejected[0].body);
    assert!(
        results
            .iter()
            .any(|r| r.body.contains("\"handled_by\":\"rpc-pool\"") && !r.body.contains("\"limiter_wait_ms\":0"))
    );
    let pool_threads = threads(pid).iter().filter(|(_, name)| name.starts_with("rpc-pool-")).count();
    assert_eq!(pool_threads, 4, "the pool should have grown to its max");
    assert_eq!(gw.metric("reference_gateway_rpc_pool_rejected_total"), rejected.len() as f64);

    // Switched off at run time, the same route answers inline.
    let r = request(gw.admin_port, "PUT", "/admin/faults", &[], br#"{"pool_enabled":false}"#);
    assert_eq!(r.status, 200);
    assert!(gw.get("/rpc/call").body.contains("inline"));
}

#[test]
fn upstream_response_timeout_fault_is_switched_at_run_time() {
    let hole = Upstream::start("hole", Behavior::BlackHole);
    let gw = Gateway::start(&format!(
        "[timeouts]\nupstream_response = \"30s\"\n[faults]\nupstream_response_timeout = \"1800s\"\n[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n",
        hole.addr()
    ));
    // Incident 3: with 1800 s the request just hangs and stays in flight while the client waits.
    let mut client = std::net::TcpStream::connect(gw.addr()).unwrap();
    client.write_all(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    wait_until("the hung request to show in flight", Duration::from_secs(2), || {
        gw.metric("reference_gateway_in_flight_requests") >= 1.0
    });
    client.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    let mut buf = [0u8; 64];
    let got = client.read(&mut buf);
    assert!(got.is_err(), "expected no answer within 1.5 s, got {got:?}");
    assert_eq!(gw.metric("reference_gateway_in_flight_requests"), 1.0);
    drop(client);

    let r = request(gw.admin_port, "PUT", "/admin/faults", &[], br#"{"upstream_response_timeout":"1s"}"#);
    assert_eq!(r.status, 200, "{r:?}");
    let start = Instant::now();
    let r = gw.get("/now");
    assert_about("switched upstream response timeout", start.elapsed(), Duration::from_secs(1));
    assert_eq!(r.status, 504);
}

#[test]
fn redis_down_is_503_on_protected_routes_and_ignored_on_optional_ones() {
    let up = Upstream::start("up", Behavior::Echo);
    for mode in ["async", "blocking"] {
        let gw = Gateway::start(&format!(
            "[redis]\nurl = \"redis://127.0.0.1:{}/\"\ntimeout = \"300ms\"\n[faults]\nredis_client = \"{mode}\"\n[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\npath_prefix = \"/api/\"\nupstream = \"u\"\naccess_check = \"protected\"\n[[routes]]\nupstream = \"u\"\naccess_check = \"optional\"\n",
            free_port(),
            up.addr()
        ));
        let r = request(gw.port, "GET", "/api/x", &[("Authorization", "Bearer t")], b"");
        assert_eq!(r.status, 503, "{mode}: {r:?}");
        assert!(r.body.contains("access check unavailable"), "{}", r.body);
        let r = request(gw.port, "GET", "/open", &[("Authorization", "Bearer t")], b"");
        assert_eq!(r.status, 200, "{mode}: {r:?}");
        assert_eq!(gw.metric("reference_gateway_access_checks_total{result=\"error\"}"), 2.0);
    }
}
