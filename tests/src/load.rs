//! Bounded client load: threads that send requests until a stop flag, a deadline or a count.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use crate::http_client::try_request;

/// Protected requests from `clients` threads until `stop`, each bounded by a deadline.
pub fn load(
    port: u16,
    path: &'static str,
    clients: usize,
    stop: Arc<AtomicBool>,
    deadline: Instant,
) -> Vec<thread::JoinHandle<usize>> {
    load_paced(port, path, clients, Duration::ZERO, stop, deadline)
}

/// As `load`, each client pausing `pause` between requests (a steady, moderate rate).
pub fn load_paced(
    port: u16,
    path: &'static str,
    clients: usize,
    pause: Duration,
    stop: Arc<AtomicBool>,
    deadline: Instant,
) -> Vec<thread::JoinHandle<usize>> {
    let at_most = max_requests(deadline.saturating_duration_since(Instant::now()));
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && done < at_most {
                    let r = try_request(
                        port,
                        "GET",
                        path,
                        &[("Authorization", "Bearer tok")],
                        b"",
                        Duration::from_secs(30),
                    );
                    done += 1;
                    if !r.is_ok_and(|r| r.status == 200) {
                        thread::sleep(Duration::from_millis(20)); // refused: do not spin
                    }
                    thread::sleep(pause);
                }
                done
            })
        })
        .collect()
}

/// A client's request bound: far more than one client can send in `time`, so the deadline or
/// the stop flag ends the load, never the count. A fixed count once did: a faster CI machine
/// ran through 200,000 requests a client inside a 60 s healthy phase, and the fault then met a
/// gateway nobody was calling.
fn max_requests(time: Duration) -> usize {
    const FASTER_THAN_ANY_CLIENT_PER_SECOND: u64 = 100_000;
    usize::try_from(time.as_secs().max(1).saturating_mul(FASTER_THAN_ANY_CLIENT_PER_SECOND)).unwrap_or(usize::MAX)
}

/// Panics unless every client is still sending: a load that ended early would make a healthy
/// phase quiet for want of traffic, and a fault meet an idle gateway.
pub fn assert_running(clients: &[thread::JoinHandle<usize>]) {
    let ended = clients.iter().filter(|c| c.is_finished()).count();
    assert_eq!(ended, 0, "{ended} of {} load clients ended before the fault", clients.len());
}

pub fn stop_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

pub fn stop(flag: &AtomicBool) {
    flag.store(true, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_bound_outlasts_any_client_within_the_time_bound() {
        assert_eq!(max_requests(Duration::from_secs(120)), 12_000_000);
        assert_eq!(max_requests(Duration::ZERO), 100_000, "a passed deadline still has a bound");
    }
}
