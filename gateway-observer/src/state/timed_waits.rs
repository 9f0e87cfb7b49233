//! How each thread's timed futex waits have been ending lately: by their timeout (a sleep) or
//! woken by another thread (a wait for work), weighed by the time waited. The kernel adds each
//! ended wait's time to one of two totals per thread; here they decay with a short half-life,
//! so "lately" means the last few seconds and a pool that was healthy for an hour reads as
//! asleep within a second of starting to sleep. Time, not counts: a rate-limited pool whose
//! threads sleep seconds in the limiter and then wait a moment for the next task ends as many
//! waits each way, but nearly all of its time in sleeps.
//!
//! A thread's own last outcome already names its next wait (`reason::FUTEX_SLEEP`), but not the
//! first sleep of each thread, which lasts as long as the rate limiter makes it (seconds), nor
//! waits already open when the observer attached. Threads of one group behave alike: when a
//! group's timed waits lately all timed out, its waits still open are sleeps too.

use std::{collections::HashMap, time::Instant};

/// Half-life of the decayed totals, in seconds.
const HALF_LIFE_SECONDS: f64 = 2.0;
/// Share of lately ended timed-wait time that may have been woken in a group taken to sleep.
const MAX_WOKEN_SHARE: f64 = 0.2;

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Outcomes {
    /// Decayed seconds of timed waits that timed out, and that were woken.
    pub timeouts: f64,
    pub wakes: f64,
}

impl Outcomes {
    pub fn add(&mut self, other: Outcomes) {
        self.timeouts += other.timeouts;
        self.wakes += other.wakes;
    }

    /// Timed waits of these threads are sleeps: at least `min_seconds` of them lately timed
    /// out, and most of their time ended that way.
    pub fn asleep(&self, min_seconds: f64) -> bool {
        self.timeouts >= min_seconds && self.wakes <= (self.timeouts + self.wakes) * MAX_WOKEN_SHARE
    }
}

#[derive(Debug)]
struct Thread {
    /// The kernel's totals (ns) at the last reading.
    timeouts: u64,
    wakes: u64,
    at: Instant,
    decayed: Outcomes,
}

#[derive(Debug, Default)]
pub struct TimedWaits {
    threads: HashMap<u32, Thread>,
}

impl TimedWaits {
    /// Folds in a thread's totals (ns) as the kernel has them now. The first reading of a
    /// thread sets its base: waits that ended before we looked are not "lately".
    pub fn note(&mut self, tid: u32, timeouts: u64, wakes: u64, now: Instant) {
        let Some(thread) = self.threads.get_mut(&tid) else {
            self.threads.insert(tid, Thread { timeouts, wakes, at: now, decayed: Outcomes::default() });
            return;
        };
        let elapsed = now.saturating_duration_since(thread.at).as_secs_f64();
        let keep = 0.5f64.powf(elapsed / HALF_LIFE_SECONDS);
        let seconds = |now: u64, then: u64| now.saturating_sub(then) as f64 / 1e9;
        thread.decayed.timeouts = thread.decayed.timeouts * keep + seconds(timeouts, thread.timeouts);
        thread.decayed.wakes = thread.decayed.wakes * keep + seconds(wakes, thread.wakes);
        (thread.timeouts, thread.wakes, thread.at) = (timeouts, wakes, now);
    }

    pub fn of(&self, tid: u32) -> Outcomes {
        self.threads.get(&tid).map(|t| t.decayed).unwrap_or_default()
    }

    pub fn forget(&mut self, tid: u32) {
        self.threads.remove(&tid);
        crate::heap::shrink_sparse_map(&mut self.threads);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn the_first_reading_is_a_base_and_later_ones_count() {
        let start = Instant::now();
        let mut waits = TimedWaits::default();
        waits.note(7, 1_000 * SECOND, 500 * SECOND, start);
        assert_eq!(waits.of(7), Outcomes::default(), "what ended before we looked is not lately");
        waits.note(7, 1_003 * SECOND, 500 * SECOND, start + Duration::from_millis(500));
        let lately = waits.of(7);
        assert!((lately.timeouts - 3.0).abs() < 1e-9 && lately.wakes == 0.0, "{lately:?}");
        assert!(lately.asleep(1.0));
    }

    #[test]
    fn outcomes_fade_with_a_two_second_half_life() {
        let start = Instant::now();
        let mut waits = TimedWaits::default();
        waits.note(7, 0, 0, start);
        waits.note(7, 4 * SECOND, 0, start + Duration::from_secs(1));
        waits.note(7, 4 * SECOND, 0, start + Duration::from_secs(3));
        assert!((waits.of(7).timeouts - 2.0).abs() < 1e-9, "{:?}", waits.of(7));
    }

    #[test]
    fn time_decides_not_counts() {
        // A rate-limited pool: as many waits end each way, but seconds asleep against moments
        // waiting for the next task.
        assert!(Outcomes { timeouts: 3.5, wakes: 0.05 }.asleep(1.0));
        // A keep-alive pool handed work: its time is woken waits.
        assert!(!Outcomes { timeouts: 1.0, wakes: 40.0 }.asleep(1.0));
        assert!(!Outcomes { timeouts: 0.5, wakes: 0.0 }.asleep(1.0), "too little to tell");
    }
}
