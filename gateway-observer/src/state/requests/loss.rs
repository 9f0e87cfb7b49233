//! Socket records the kernel lost: the connections whose framing may have gone with them parse
//! afresh from their next message, forgetting their requests in flight.

use super::{H2Totals, RequestTracker, Tracked, TrackerCounts, new_connection};

impl RequestTracker {
    /// Connections with requests in flight (at most `limit`): after the kernel lost socket
    /// records, the ones to ask whether theirs were among them.
    pub fn sockets_in_flight(&self, limit: usize) -> Vec<u64> {
        self.conns
            .iter()
            .filter(|(_, conn)| conn.http.as_ref().is_some_and(|http| http.in_flight().next().is_some()))
            .map(|(sk, _)| *sk)
            .take(limit)
            .collect()
    }

    /// The kernel's counts of lost data records for connections with requests in flight (None:
    /// no longer followed, its close among the records lost). A connection whose count moved,
    /// or that is gone, forgets its requests in flight (its response may have been lost, and
    /// they would look unanswered forever) and parses again from its next message. Connections
    /// whose records all arrived keep theirs. Returns how many requests were abandoned.
    pub fn after_loss(&mut self, lost_counts: &[(u64, Option<u32>)]) -> u64 {
        let mut abandoned = 0;
        for (sk, lost) in lost_counts {
            let Some(conn) = self.conns.get_mut(sk) else { continue };
            if lost.is_some_and(|lost| lost as u16 == conn.lost_seen) {
                continue;
            }
            conn.lost_seen = lost.map_or(conn.lost_seen, |lost| lost as u16);
            abandoned += parse_afresh(conn, &mut self.counts, &mut self.h2_totals);
        }
        self.counts.abandoned_after_loss += abandoned;
        abandoned
    }

    /// The kernel lost socket records and which connections' is unknown: every connection's
    /// requests in flight are forgotten and parsing starts again at the next message. Returns
    /// how many requests were abandoned.
    pub fn resync_after_loss(&mut self) -> u64 {
        let mut abandoned = 0;
        for conn in self.conns.values_mut() {
            abandoned += parse_afresh(conn, &mut self.counts, &mut self.h2_totals);
        }
        self.counts.abandoned_after_loss += abandoned;
        abandoned
    }
}

/// Parses `conn` afresh from its next message, its framing perhaps lost with records the
/// kernel dropped: its requests in flight are forgotten (returned: how many), its HTTP/2
/// signals so far stay in the totals.
pub(super) fn parse_afresh(conn: &mut Tracked, counts: &mut TrackerCounts, h2_totals: &mut H2Totals) -> u64 {
    let end_ns = conn.last_active_ns;
    h2_totals.retire(conn, end_ns);
    let (Some(side), Some(http)) = (conn.side, conn.http.as_mut()) else { return 0 };
    counts.closed_resyncs += http.lost_sync();
    let abandoned = http.in_flight().count() as u64;
    *http = new_connection(side);
    abandoned
}
