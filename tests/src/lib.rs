//! Helpers for the end-to-end scenarios: privilege gate, the daemon as a child process, scraping
//! and parsing /metrics, bounded polling. Tests never sleep for readiness: they poll with a deadline.

pub mod daemon;
pub mod fixture;
pub mod metrics;

use std::time::{Duration, Instant};

/// True when the test may load probes. Without root it fails under CI (a skipped privileged test
/// is a failure there) and otherwise says why it skipped.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs root to load eBPF programs, and CI=true: a skipped privileged test is a failure"
    );
    eprintln!("SKIPPED {test}: needs root to load eBPF programs (run `sudo cargo xtask test`)");
    false
}

/// Polls `probe` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// Whether `actual` is within `tolerance` (a fraction) of `expected`.
pub fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual - expected).abs() <= expected.abs() * tolerance
}

/// Privileged tests run one at a time: each loads its own probes and measures timing, and
/// parallel daemons and workloads on a 2-core machine would disturb each other's ground truth.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
