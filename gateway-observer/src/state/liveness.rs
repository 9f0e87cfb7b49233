//! When each label value (a process, a thread group, an event-loop thread, a peer) was last seen
//! alive, so that series of what is gone leave `/metrics` after `keep` rather than staying for
//! the daemon's life: a host that restarts its gateways or runs short-lived processes would
//! otherwise gather their counters without end. `keep` lets a scrape or two read the last value.

use std::{collections::HashMap, hash::Hash, time::Duration, time::Instant};

/// How long the series of a process, thread group, event-loop thread, peer or resolved alert
/// stay after it is gone: a scrape or two (15–30 s apart) still reads their last values.
pub const GONE_SERIES_KEEP: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Liveness<K> {
    seen: HashMap<K, Instant>,
    keep: Duration,
}

impl<K: Eq + Hash> Liveness<K> {
    pub fn new(keep: Duration) -> Self {
        Self { seen: HashMap::new(), keep }
    }

    /// `key` is alive at `now`.
    pub fn note(&mut self, key: K, now: Instant) {
        self.seen.insert(key, now);
    }

    /// `key` has series now: if it was never seen alive (it lived and died between two looks,
    /// or while the daemon was stopped), it counts as alive from now, so that its series are
    /// kept `keep` like any other's instead of dropped before anyone could read them.
    pub fn note_if_new(&mut self, key: K, now: Instant) {
        self.seen.entry(key).or_insert(now);
    }

    /// Forgets what has not been alive for `keep`.
    pub fn expire(&mut self, now: Instant) {
        let keep = self.keep;
        self.seen.retain(|_, at| now.saturating_duration_since(*at) < keep);
    }

    /// Alive within `keep` of the last `expire`.
    pub fn is_live<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.seen.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_not_seen_for_keep_is_gone() {
        let t0 = Instant::now();
        let mut live = Liveness::new(Duration::from_secs(30));
        live.note("churn-gateway".to_owned(), t0);
        live.note("reference-gatew".to_owned(), t0);
        live.expire(t0 + Duration::from_secs(29));
        assert!(live.is_live("churn-gateway"), "kept while a scrape may still read it");
        live.note("reference-gatew".to_owned(), t0 + Duration::from_secs(29));
        live.expire(t0 + Duration::from_secs(31));
        assert!(!live.is_live("churn-gateway"));
        assert!(live.is_live("reference-gatew"));
        assert_eq!(live.len(), 1, "what is gone is not remembered either");
    }

    #[test]
    fn a_value_never_seen_alive_is_kept_from_its_first_series() {
        let t0 = Instant::now();
        let mut live = Liveness::new(Duration::from_secs(30));
        live.note("gateway".to_owned(), t0);
        live.note_if_new("storm-*".to_owned(), t0 + Duration::from_secs(10));
        live.note_if_new("gateway".to_owned(), t0 + Duration::from_secs(20));
        live.expire(t0 + Duration::from_secs(31));
        assert!(live.is_live("storm-*"), "kept 30 s from when its series appeared");
        assert!(!live.is_live("gateway"), "a later series does not renew what was seen alive");
    }
}
