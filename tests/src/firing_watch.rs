//! The first firing of each alert kind, seen by polling the daemon's alerts from a thread of its
//! own: the time to detect stays the observer's while the test is busy elsewhere (showing that a
//! fault is in effect takes seconds of slow requests when the fault makes requests slow).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::http_client::try_request;

const POLL_EVERY: Duration = Duration::from_millis(50);

/// Kind → when it was first seen firing, and that alert.
type FirstFirings = HashMap<String, (Instant, Value)>;

pub struct FiringWatch {
    first: Arc<Mutex<FirstFirings>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FiringWatch {
    /// Polls the daemon listening on `port` until dropped, or for `at_most`.
    pub fn start(port: u16, at_most: Duration) -> FiringWatch {
        let first: Arc<Mutex<FirstFirings>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (first.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let end = Instant::now() + at_most;
            while !stopped.load(Ordering::Relaxed) && Instant::now() < end {
                let now = Instant::now();
                for alert in firing_alerts(port) {
                    let kind = alert["kind"].as_str().unwrap_or_default().to_owned();
                    seen.lock().unwrap_or_else(|e| e.into_inner()).entry(kind).or_insert((now, alert));
                }
                thread::sleep(POLL_EVERY);
            }
        });
        FiringWatch { first, stop, thread: Some(thread) }
    }

    /// When an alert of `kind` was first seen firing, and that alert.
    pub fn first(&self, kind: &str) -> Option<(Instant, Value)> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).get(kind).cloned()
    }
}

impl Drop for FiringWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Firing alerts of the daemon on `port`; none when it does not answer (the caller's own
/// checks report a daemon that is gone).
fn firing_alerts(port: u16) -> Vec<Value> {
    let Ok(response) = try_request(port, "GET", "/api/v1/alerts", &[], b"", Duration::from_secs(2)) else {
        return Vec::new();
    };
    let body: Value = serde_json::from_str(&response.body).unwrap_or_default();
    body["alerts"].as_array().into_iter().flatten().filter(|a| a["state"] == "firing").cloned().collect()
}
