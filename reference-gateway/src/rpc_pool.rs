//! A bounded thread pool shaped like incident 2's RPC pool: `core` threads kept, up to `max`,
//! no queue (a task is handed to an idle thread or a new one), rejection when all are busy.
//!
//! This is `ThreadPoolExecutor(core, max, keepAlive, SynchronousQueue, AbortPolicy)` in Rust.
//! Threads are named `rpc-pool-N` so the observer can group them. Owns only its threads.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// Every thread was busy and the pool is at its maximum (there is no queue).
#[derive(Debug, thiserror::Error)]
#[error("rpc pool full ({0} threads busy)")]
pub struct Rejected(pub usize);

#[derive(Clone)]
pub struct RpcPool {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    core: usize,
    max: usize,
    keep_alive: Duration,
    next_id: AtomicUsize,
    rejected: AtomicU64,
}

struct State {
    /// Tasks handed over but not yet picked up; never more than `idle`.
    handoff: VecDeque<Job>,
    idle: usize,
    total: usize,
}

impl RpcPool {
    pub fn new(core: usize, max: usize, keep_alive: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State { handoff: VecDeque::new(), idle: 0, total: 0 }),
                work: Condvar::new(),
                core,
                max,
                keep_alive,
                next_id: AtomicUsize::new(0),
                rejected: AtomicU64::new(0),
            }),
        }
    }

    pub fn submit(&self, job: Job) -> Result<(), Rejected> {
        let mut s = self.inner.lock();
        // Like ThreadPoolExecutor: below core, always start a thread; else hand off; else grow.
        if s.total >= self.inner.core && s.idle > s.handoff.len() {
            s.handoff.push_back(job);
            drop(s);
            self.inner.work.notify_one();
            return Ok(());
        }
        if s.total >= self.inner.max {
            let busy = s.total - s.idle;
            drop(s);
            self.inner.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected(busy));
        }
        s.total += 1;
        drop(s);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name(format!("rpc-pool-{id}"))
            .stack_size(256 * 1024)
            .spawn(move || inner.worker(job));
        if spawned.is_err() {
            self.inner.lock().total -= 1;
            self.inner.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected(self.threads()));
        }
        Ok(())
    }

    pub fn threads(&self) -> usize {
        self.inner.lock().total
    }

    /// (threads, busy threads, rejections so far)
    pub fn stats(&self) -> (usize, usize, u64) {
        let s = self.inner.lock();
        (s.total, s.total - s.idle, self.inner.rejected.load(Ordering::Relaxed))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Jobs run outside the lock and are caught, so a poisoned lock still holds whole counts.
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn worker(&self, first: Job) {
        let _ = catch_unwind(AssertUnwindSafe(first));
        loop {
            let mut s = self.lock();
            s.idle += 1;
            let job = loop {
                if let Some(job) = s.handoff.pop_front() {
                    break Some(job);
                }
                let (g, timeout) = match self.work.wait_timeout(s, self.keep_alive) {
                    Ok(r) => r,
                    Err(p) => p.into_inner(),
                };
                s = g;
                if timeout.timed_out() && s.handoff.is_empty() && s.total > self.core {
                    break None;
                }
            };
            s.idle -= 1;
            let Some(job) = job else {
                s.total -= 1;
                return;
            };
            drop(s);
            let _ = catch_unwind(AssertUnwindSafe(job));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn grows_to_max_then_rejects_without_queueing() {
        let pool = RpcPool::new(1, 3, Duration::from_secs(60));
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        for _ in 0..3 {
            let rx = Arc::clone(&release_rx);
            pool.submit(Box::new(move || {
                let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(5));
            }))
            .unwrap();
        }
        assert_eq!(pool.threads(), 3);
        assert!(pool.submit(Box::new(|| {})).is_err());
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while pool.stats().1 != 0 {
            assert!(std::time::Instant::now() < deadline, "threads never went idle");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Idle threads take new work without growing the pool.
        pool.submit(Box::new(|| {})).unwrap();
        assert_eq!(pool.threads(), 3);
        assert_eq!(pool.stats().2, 1);
    }
}
