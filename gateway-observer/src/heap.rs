//! Giving freed heap back to the system. glibc's allocator keeps what the daemon frees inside
//! its arenas for reuse, so memory once needed (the kernel's BTF parsed at start, the state of
//! 10,000 connections that have since closed) would stay resident for the daemon's whole life.

use std::{
    collections::{HashMap, VecDeque},
    hash::{BuildHasher, Hash},
    time::{Duration, Instant},
};

/// How often freed heap is given back: `malloc_trim` walks the arenas (a few hundred µs on the
/// daemon's heap), and what it frees builds up over seconds, not ticks.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Allocations this large get a mapping of their own, unmapped whole when freed.
const MMAP_THRESHOLD: i32 = 1 << 20;
/// A thread's arena unmaps its free top once the top is this large.
const TRIM_THRESHOLD: i32 = 2 << 20;

/// Pins glibc's two thresholds, which it otherwise raises for good on the first free of a large
/// mapped block (the kernel's BTF, parsed at start and dropped: several MB) to that block's size
/// and twice it. Past that, a burst's megabytes sit on the free top of a thread's arena, which
/// `malloc_trim` does not reach (it unmaps only the main arena's top): CI's churn test saw 10 MB
/// stay resident so. Called first thing, before any thread.
pub fn pin_thresholds() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets the allocator's parameters; it has no preconditions.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns the allocator's free pages to the system (resident memory falls; nothing in use moves).
pub fn give_back_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases memory that is free; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Heap bytes (in use by live allocations, kept free by the allocator), over every arena;
/// allocations served by their own mapping count as in use.
pub fn usage() -> Option<(u64, u64)> {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters; it has no preconditions.
        let info = unsafe { libc::mallinfo2() };
        Some(((info.uordblks + info.hblkhd) as u64, info.fordblks as u64))
    }
    #[cfg(not(target_env = "gnu"))]
    None
}

/// Below this many slots a container keeps its room: shrinking it would only cost reallocations.
pub const KEEP_ROOM: usize = 1024;

/// A queue gives back its room once under a quarter full. Containers never shrink by themselves,
/// so the 130,000 requests of a 5 s burst otherwise keep 6 MiB of window for good (`bench churn`).
pub fn shrink_sparse_queue<T>(queue: &mut VecDeque<T>) {
    if queue.capacity() > KEEP_ROOM && queue.len() * 4 < queue.capacity() {
        queue.shrink_to(queue.len() * 2);
    }
}

/// The same for a map: 10,000 closed connections otherwise keep 20 MiB of table.
pub fn shrink_sparse_map<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > KEEP_ROOM && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Gives freed heap back at most once per `TRIM_EVERY`.
#[derive(Debug)]
pub struct Trimmer {
    last: Instant,
}

impl Trimmer {
    pub fn new(now: Instant) -> Self {
        Self { last: now }
    }

    /// Trims if `TRIM_EVERY` has passed since the last trim; returns whether it did.
    pub fn maybe_trim(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last) < TRIM_EVERY {
            return false;
        }
        self.last = now;
        give_back_freed();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_containers_give_back_their_room() {
        // Its containers' MBs would move the RSS the other tests read.
        let _serial = RSS_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut queue: VecDeque<u64> = (0..100_000).collect();
        queue.drain(..99_000);
        shrink_sparse_queue(&mut queue);
        assert!(queue.capacity() < 4_000, "capacity {}", queue.capacity());
        assert_eq!(queue.len(), 1_000, "nothing in use is lost");
        let mut small: VecDeque<u64> = VecDeque::with_capacity(1000);
        shrink_sparse_queue(&mut small);
        assert_eq!(small.capacity(), 1000, "small containers keep their room");
        let mut map: HashMap<u64, u64> = (0..100_000).map(|k| (k, k)).collect();
        map.retain(|k, _| *k < 10);
        shrink_sparse_map(&mut map);
        assert!(map.capacity() < 100, "capacity {}", map.capacity());
        assert_eq!(map.len(), 10);
    }

    #[test]
    fn trims_once_per_period() {
        let t0 = Instant::now();
        let mut trimmer = Trimmer::new(t0);
        assert!(!trimmer.maybe_trim(t0 + Duration::from_secs(9)));
        assert!(trimmer.maybe_trim(t0 + TRIM_EVERY));
        assert!(!trimmer.maybe_trim(t0 + TRIM_EVERY + Duration::from_secs(1)));
        assert!(trimmer.maybe_trim(t0 + TRIM_EVERY * 2));
    }

    /// The tests that read the process's RssAnon run one at a time: each frees tens of MB, which
    /// the other would read as its own.
    static RSS_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn rss_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    }

    #[cfg(target_env = "gnu")]
    #[test]
    fn a_burst_in_a_thread_arena_leaves_when_freed_after_a_large_block_was() {
        let _serial = RSS_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pin_thresholds();
        let burst = || {
            std::thread::spawn(|| {
                // A large block mapped and freed, as the kernel's BTF at start: without pinned
                // thresholds it lifts them to 8 and 16 MB.
                drop(std::hint::black_box(vec![1u8; 8 << 20]));
                // 12 MB in blocks under the mmap threshold, on the top of this thread's arena.
                let blocks: Vec<Vec<u8>> = (0..48).map(|i| vec![i as u8; 256 << 10]).collect();
                let held = rss_anon_kib();
                drop(blocks);
                held.saturating_sub(rss_anon_kib())
            })
            .join()
            .expect("the burst's thread")
        };
        // No malloc_trim here: the free itself unmaps most of the arena's top (without pinned
        // thresholds nothing leaves, in every try). Other test threads move the process's RSS
        // by a few MB, once in a while past the 12 MB freed: the best of three tries counts.
        let released = (0..3).map(|_| burst()).max().unwrap_or(0);
        assert!(released >= 5_000, "RssAnon fell by at most {released} kB after freeing 12 MB, in 3 tries");
    }

    #[cfg(target_env = "gnu")]
    #[test]
    fn freed_heap_leaves_resident_memory() {
        let _serial = RSS_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Many small blocks (below the mmap threshold, so they live in the arena), then all but
        // the last freed: without a trim glibc keeps their pages, since the last block pins the
        // top of the heap.
        let mut blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 2048]).collect();
        let pinned = blocks.pop();
        let held = rss_anon_kib();
        drop(blocks);
        give_back_freed();
        let after = rss_anon_kib();
        drop(pinned);
        // 40 MB were freed: at least 20 MB of it must leave (test threads share the process, so
        // its RSS moves by a few MB on its own).
        assert!(held.saturating_sub(after) >= 20_000, "RssAnon {held} kB -> {after} kB after the trim");
    }
}
