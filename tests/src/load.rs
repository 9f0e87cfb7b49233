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
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && done < 200_000 {
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

pub fn stop_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

pub fn stop(flag: &AtomicBool) {
    flag.store(true, Ordering::Relaxed);
}
