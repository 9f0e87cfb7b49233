//! Inbound connections that may hold requests the gateway has not read yet. The kernel notes
//! when unread bytes first arrived in each followed socket; reading that back costs a map lookup
//! per connection, so only connections not read for at least the threshold are candidates (a
//! socket read more recently cannot hold bytes older than its last read).

use std::collections::{BTreeMap, BTreeSet};

use super::RequestTracker;
use super::stats::Side;

/// A listening port in one network namespace: the same port in two pods is two listeners.
pub type ListenerKey = (u32, u16);

/// An inbound connection not read for a while, and the listener it came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadCandidate {
    pub sk: u64,
    pub listener: ListenerKey,
}

impl RequestTracker {
    /// Each listener with the targets listening on it (several for pre-fork servers such as
    /// nginx, whose master and workers share the socket), lowest pid first.
    pub fn listeners(&self) -> BTreeMap<ListenerKey, BTreeSet<u32>> {
        let mut by_listener: BTreeMap<ListenerKey, BTreeSet<u32>> = BTreeMap::new();
        for (pid, ports) in &self.listen_ports {
            let Some(&netns) = self.netns_of.get(pid) else { continue };
            for port in ports {
                by_listener.entry((netns, *port)).or_default().insert(*pid);
            }
        }
        by_listener
    }

    /// Idle inbound connections through a target's listener whose last read (or handshake) is
    /// at least `idle_ns` old: at most `limit`, continuing after the previous call's, so that every
    /// connection is looked at within a few ticks when there are more.
    pub fn unread_candidates(&mut self, now_ns: u64, idle_ns: u64, limit: usize) -> Vec<UnreadCandidate> {
        let listened: BTreeSet<ListenerKey> = self.listeners().into_keys().collect();
        let mut candidates: Vec<UnreadCandidate> = self
            .conns
            .iter()
            .filter(|(_, c)| c.side == Some(Side::Inbound) && now_ns.saturating_sub(c.last_read_ns) >= idle_ns)
            // A connection whose request is being served holds at most the client's next one
            // (pipelined) or its FIN: the gateway is busy with it, not ignoring it. Upgraded and
            // non-HTTP streams (websockets, tunnels, TLS once seen) pause for their own reasons.
            .filter(|(_, c)| {
                c.http.as_ref().is_none_or(|http| http.exchanges_requests() && http.in_flight().next().is_none())
            })
            .filter_map(|(sk, c)| {
                let netns = c.netns.or_else(|| self.netns_of.get(&c.tgid?).copied())?;
                let listener = (netns, c.local_port?);
                listened.contains(&listener).then_some(UnreadCandidate { sk: *sk, listener })
            })
            .collect();
        if candidates.len() > limit {
            candidates.sort_unstable_by_key(|c| c.sk);
            let start = self.unread_scan_offset % candidates.len();
            candidates.rotate_left(start);
            candidates.truncate(limit);
            self.unread_scan_offset = start + limit;
        }
        candidates
    }
}
