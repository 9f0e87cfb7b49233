//! A token-bucket rate limiter whose `acquire` parks the calling thread, like Guava's
//! `RateLimiter` (SmoothBursty, one second of stored permits).
//!
//! This is the incident 2 mechanism: each caller reserves the next free slot under a short lock,
//! then sleeps (`std::thread::sleep`, a timed `clock_nanosleep`) outside it. With a tiny rate every
//! pool thread ends up asleep and the pool grows to its maximum. Never call it on a tokio worker.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct RateLimiter {
    state: Mutex<State>,
}

struct State {
    /// When the next permit is free without waiting.
    next_free: Instant,
    /// Permits saved up while nobody asked, at most one second's worth.
    stored: f64,
}

impl RateLimiter {
    pub fn new() -> Self {
        Self { state: Mutex::new(State { next_free: Instant::now(), stored: 0.0 }) }
    }

    /// Takes one permit at `permits_per_second`, sleeping until it is due; returns the time slept.
    pub fn acquire(&self, permits_per_second: f64) -> Duration {
        let now = Instant::now();
        let wait_until = {
            let mut s = match self.state.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if now > s.next_free {
                let idle = now.duration_since(s.next_free).as_secs_f64();
                s.stored = (s.stored + idle * permits_per_second).min(permits_per_second);
                s.next_free = now;
            }
            let wait_until = s.next_free;
            let spend = s.stored.min(1.0);
            let fresh = 1.0 - spend;
            s.stored -= spend;
            s.next_free += Duration::from_secs_f64(fresh / permits_per_second);
            wait_until
        };
        let wait = wait_until.saturating_duration_since(now);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_spaced_by_the_rate() {
        let l = RateLimiter::new();
        let start = Instant::now();
        for _ in 0..4 {
            l.acquire(20.0);
        }
        // First permit is free, the next three wait 50 ms each.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(140) && took < Duration::from_millis(400), "{took:?}");
    }
}
