//! The tracker's totals as the metrics and the collector read them: connections followed,
//! bytes that are not HTTP, TLS nobody decrypts, HTTP/2 signals, retransmits, resyncs.

use std::{collections::BTreeMap, sync::Arc};

use gateway_observer_http::Connection;

use super::{RequestTracker, h2_totals::H2Totals};

impl RequestTracker {
    /// Connections followed now (at most the kernel's `MAX_SOCKETS`).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The owners of the followed connections, one entry per connection whose owner is known.
    pub fn connection_owners(&self) -> impl Iterator<Item = u32> + '_ {
        self.conns.values().filter_map(|conn| conn.tgid)
    }

    /// Bytes of connections that are not HTTP, per process name.
    pub fn non_http_bytes(&self) -> &BTreeMap<Arc<str>, u64> {
        &self.non_http_bytes
    }

    /// HTTP/2 signals and flow-control stalls of closed and open connections (as of the last
    /// `settle_h2`).
    pub fn h2_totals(&self) -> &H2Totals {
        &self.h2_totals
    }

    /// Connections known to be TLS whose plaintext is not seen, per process name.
    pub fn tls_unparsed(&self) -> &BTreeMap<Arc<str>, u64> {
        &self.tls_unparsed
    }

    /// Retransmits per (process name, peer).
    pub fn retransmits(&self) -> &BTreeMap<(Arc<str>, String), u64> {
        &self.retransmits
    }

    /// Times the framing was lost and found again, open and closed connections together.
    pub fn parse_resyncs(&self) -> u64 {
        let live: u64 = self.conns.values().filter_map(|c| c.http.as_ref()).map(Connection::lost_sync).sum();
        live + self.counts.closed_resyncs
    }
}
