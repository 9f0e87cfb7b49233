//! RequestQueueing end to end, on a gateway nobody here wrote and in another language: Python's
//! single-threaded `http.server`. While it sleeps in one slow request, the others wait in its
//! sockets (accept queue, then unread bytes). The observer, attached from outside, names the
//! queueing with the listener and how long requests waited, and its socket-queue total matches
//! what the clients measured. Under the same server with fast requests only it stays quiet.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use tests::{
    alerts::{assert_likely_cause, assert_quiet, wait_firing, wait_resolved},
    http_client::try_request,
    load::{load, stop, stop_flag},
    metrics::socket_queue_totals,
    observer::Observer,
    privileged,
    python::{PythonServer, SLOW_SECONDS},
    summary::{Detection, Start},
};

/// Clients sending `path` one request at a time until `stop`, each returning the latencies it
/// measured (bounded in count and time).
fn timed_clients(
    port: u16,
    path: &'static str,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<Vec<f64>>> {
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && latencies.len() < 10_000 {
                    let start = Instant::now();
                    let response = try_request(port, "GET", path, &[], b"", Duration::from_secs(10));
                    assert_eq!(response.expect("answered").status, 200);
                    latencies.push(start.elapsed().as_secs_f64());
                }
                latencies
            })
        })
        .collect()
}

#[test]
fn a_server_that_stops_reading_is_named_with_how_long_requests_waited() {
    if !privileged(module_path!()) {
        return;
    }
    let server = PythonServer::start();
    let observer = Observer::start(server.child.id());

    // Healthy: fast requests only, the server keeps up.
    let healthy = stop_flag();
    let clients = load(server.port, "/", 2, healthy.clone(), Instant::now() + Duration::from_secs(30));
    assert_quiet(&observer, Duration::from_secs(10));
    stop(&healthy);
    clients.into_iter().for_each(|c| drop(c.join()));
    thread::sleep(Duration::from_secs(1));

    // Fault: one client keeps the server asleep in /slow; two others' requests queue behind it.
    let (queue_before, count_before) = socket_queue_totals(&observer, "python3");
    let started = Instant::now();
    let done = stop_flag();
    let slow = timed_clients(server.port, "/slow", 1, done.clone());
    let fast = timed_clients(server.port, "/", 2, done.clone());
    let (alert, after) = wait_firing(&observer, "RequestQueueing", Duration::from_secs(8));
    eprintln!("RequestQueueing firing {:.1}s after the slow requests began: {}", after.as_secs_f64(), alert["summary"]);
    let evidence = &alert["evidence"];
    assert_eq!(alert["subject"], "inbound");
    assert_eq!(alert["process"]["comm"], "python3");
    assert_eq!(evidence["listeners"][0]["port"], server.port, "{evidence:#}");
    // Each fast request waits for at most one slow one (plus the other fast one).
    let longest =
        evidence["max_socket_queue_seconds"].as_f64().unwrap().max(evidence["oldest_unread_seconds"].as_f64().unwrap());
    assert!((0.2..=SLOW_SECONDS + 0.3).contains(&longest), "longest wait {longest}: {evidence:#}");
    assert!(
        evidence["waiting_now"].as_u64().unwrap() >= 1 || evidence["delayed"].as_u64().unwrap() >= 3,
        "{evidence:#}"
    );

    // The sleeping server is an event loop blocked in sleep: the likely cause, named.
    assert_likely_cause(&observer, "RequestQueueing", "EventLoopBlocked", Duration::from_secs(6));

    // Stop, let the last requests finish and be collected, and compare the total wait with what
    // the clients measured: a fast request's latency is its wait (service ~1 ms), a slow one's is
    // its wait plus the sleep.
    while started.elapsed() < Duration::from_secs(8) {
        thread::sleep(Duration::from_millis(100));
    }
    stop(&done);
    let stopped = Instant::now();
    let slow: Vec<f64> = slow.into_iter().flat_map(|c| c.join().expect("slow client")).collect();
    let fast: Vec<f64> = fast.into_iter().flat_map(|c| c.join().expect("fast client")).collect();
    thread::sleep(Duration::from_secs(2));
    let (queue_after, count_after) = socket_queue_totals(&observer, "python3");
    let observed = queue_after - queue_before;
    let measured: f64 = fast.iter().sum::<f64>() + slow.iter().map(|l| l - SLOW_SECONDS).sum::<f64>();
    let requests = (slow.len() + fast.len()) as f64;
    eprintln!(
        "{} slow + {} fast requests; observer: {} requests waited {observed:.2}s in the socket in all; clients: {measured:.2}s",
        slow.len(),
        fast.len(),
        count_after - count_before
    );
    assert_eq!(count_after - count_before, requests, "every request's socket wait recorded");
    // Tolerance: the clients' own connect and service time (~5 ms each at most) and 0.1 s; one
    // request's wait missed would be 0.2 s or more.
    let tolerance = requests * 0.005 + 0.1;
    assert!(
        (observed - measured).abs() <= tolerance,
        "observer {observed:.3}s vs clients {measured:.3}s (±{tolerance:.3})"
    );

    wait_resolved(&observer, "RequestQueueing", Duration::from_secs(20));
    let resolved = stopped.elapsed();
    eprintln!("RequestQueueing resolved {:.1}s after the slow requests stopped", resolved.as_secs_f64());
    Detection { runtime: "python http.server", fault: "slow handler", kind: "RequestQueueing", start: Start::Watching }
        .report(after, Some(resolved));
}
