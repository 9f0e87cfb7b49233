//! Kernel maps hold cumulative counters per key (a thread, a bucket of one process), and keys go
//! away when threads and processes do. Prometheus wants counters per label that never go down.
//! `DeltaCounters` turns the first into the second: it adds each key's growth to its label and
//! keeps the label's total when the key is forgotten.

use std::{
    collections::{BTreeMap, HashMap},
    hash::Hash,
};

#[derive(Debug)]
pub struct DeltaCounters<K, L> {
    /// Keyed by thread (and bucket): thousands of entries looked up every tick.
    last: HashMap<K, u64, foldhash::fast::RandomState>,
    totals: LabelTotals<L>,
}

impl<K, L> Default for DeltaCounters<K, L> {
    fn default() -> Self {
        Self { last: HashMap::default(), totals: LabelTotals::default() }
    }
}

/// Per-label totals that never go down, for counters whose last values are kept elsewhere
/// (`thread_counters`) or by [`DeltaCounters`].
#[derive(Debug)]
pub struct LabelTotals<L> {
    totals: BTreeMap<L, u64>,
}

impl<L> Default for LabelTotals<L> {
    fn default() -> Self {
        Self { totals: BTreeMap::new() }
    }
}

impl<L: Ord> LabelTotals<L> {
    /// Adds `delta` under `label`; the label exists from then on, also with a delta of 0.
    pub fn add(&mut self, label: L, delta: u64) {
        *self.totals.entry(label).or_insert(0) += delta;
    }

    /// Drops the totals of labels `keep` refuses (what they name is gone).
    pub fn retain_labels(&mut self, mut keep: impl FnMut(&L) -> bool) {
        self.totals.retain(|label, _| keep(label));
    }

    pub fn totals(&self) -> &BTreeMap<L, u64> {
        &self.totals
    }
}

impl<K: Eq + Hash, L: Ord> DeltaCounters<K, L> {
    /// Records the kernel's current cumulative `value` for `key`, counted under `label`.
    /// A value below the last one means the key was deleted and re-created: all of it is new.
    pub fn observe(&mut self, key: K, value: u64, label: L) {
        self.observe_lazy(key, value, || label);
    }

    /// `observe` with the label built only when it is needed: most keys of a tick have not
    /// grown, and a label is an allocation (it holds the process's name).
    pub fn observe_lazy(&mut self, key: K, value: u64, label: impl FnOnce() -> L) {
        let last = match self.last.get_mut(&key) {
            Some(last) if *last == value => return,
            Some(last) => std::mem::replace(last, value),
            None => {
                self.last.insert(key, value);
                0
            }
        };
        let delta = if value >= last { value - last } else { value };
        self.totals.add(label(), delta);
    }

    /// Forgets a key that the kernel no longer has; its label keeps what it counted. The table
    /// gives its room back once a quarter full: 2,000 threads that came and went leave
    /// megabytes of per-bucket keys' room otherwise, for the daemon's whole life.
    pub fn forget(&mut self, key: &K) {
        self.last.remove(key);
        crate::heap::shrink_sparse_map(&mut self.last);
    }

    /// Drops the totals of labels `keep` refuses (what they name is gone). Their keys must be
    /// forgotten already: a key still observed would bring its label back from its next growth.
    pub fn retain_labels(&mut self, keep: impl FnMut(&L) -> bool) {
        self.totals.retain_labels(keep);
    }

    pub fn totals(&self) -> &BTreeMap<L, u64> {
        self.totals.totals()
    }

    pub fn tracked_keys(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use super::DeltaCounters;

    #[test]
    fn growth_is_added_to_the_label() {
        let mut c = DeltaCounters::default();
        c.observe(1u32, 100, "group-*");
        c.observe(2u32, 50, "group-*");
        c.observe(1u32, 130, "group-*");
        assert_eq!(c.totals()["group-*"], 180);
    }

    #[test]
    fn forgetting_a_key_keeps_the_total_monotonic() {
        let mut c = DeltaCounters::default();
        c.observe(1u32, 100, "a");
        c.forget(&1);
        assert_eq!(c.totals()["a"], 100);
        // The same tid reused by a new thread starts from zero in the kernel.
        c.observe(1u32, 20, "a");
        assert_eq!(c.totals()["a"], 120);
        assert_eq!(c.tracked_keys(), 1);
    }

    #[test]
    fn forgotten_keys_give_their_room_back() {
        let mut c = DeltaCounters::default();
        for tid in 0..100_000u32 {
            c.observe(tid, 1, "a");
        }
        let full = c.last.capacity();
        for tid in 0..99_990u32 {
            c.forget(&tid);
        }
        assert_eq!(c.tracked_keys(), 10);
        assert!(c.last.capacity() <= crate::heap::KEEP_ROOM, "room {} of {full} kept for 10 keys", c.last.capacity());
        assert_eq!(c.totals()["a"], 100_000);
    }

    #[test]
    fn labels_of_what_is_gone_can_be_dropped() {
        let mut c = DeltaCounters::default();
        c.observe(1u32, 100, ("churn-gateway", "gw-worker-*"));
        c.observe(2u32, 50, ("reference-gatew", "gw-worker-*"));
        c.forget(&1);
        c.retain_labels(|(process, _)| *process != "churn-gateway");
        assert_eq!(c.totals().len(), 1);
        assert_eq!(c.totals()[&("reference-gatew", "gw-worker-*")], 50);
    }

    #[test]
    fn a_reset_key_counts_its_new_value() {
        let mut c = DeltaCounters::default();
        c.observe(1u32, 100, "a");
        c.observe(1u32, 10, "a");
        assert_eq!(c.totals()["a"], 110);
    }

    #[test]
    fn a_thread_renamed_counts_under_its_new_group() {
        let mut c = DeltaCounters::default();
        c.observe(1u32, 100, "Thread-*");
        c.observe(1u32, 160, "pool-1-thread-*");
        assert_eq!(c.totals()["Thread-*"], 100);
        assert_eq!(c.totals()["pool-1-thread-*"], 60);
    }
}
