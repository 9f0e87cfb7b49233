//! HTTP/2 signals and flow-control stalls of closed connections, summed per process (and for
//! stalls per direction and sender), for the metrics.

use std::{collections::BTreeMap, sync::Arc};

use gateway_observer_http::h2::{Signals, Stalls};

use super::stats::Side;

#[derive(Default)]
pub struct H2Totals {
    /// Refused and reset streams and GOAWAYs, by process.
    signals: BTreeMap<Arc<str>, Signals>,
    /// Stalls by process, direction and sender (`gateway` or `peer`).
    stalls: BTreeMap<(Arc<str>, Side, &'static str), Stalls>,
}

impl H2Totals {
    /// Adds a closed connection's signals, `side` its direction as seen by the gateway.
    pub fn add(&mut self, process: &Arc<str>, side: Side, s: &Signals) {
        let total = self.signals.entry(process.clone()).or_default();
        total.refused_streams = total.refused_streams.saturating_add(s.refused_streams);
        total.reset_streams = total.reset_streams.saturating_add(s.reset_streams);
        total.goaways = total.goaways.saturating_add(s.goaways);
        for (sender, stalls) in [("gateway", s.gateway_stalls), ("peer", s.peer_stalls)] {
            let total = self.stalls.entry((process.clone(), side, sender)).or_default();
            total.count = total.count.saturating_add(stalls.count);
            total.stalled_ns = total.stalled_ns.saturating_add(stalls.stalled_ns);
            total.dropped_streams = total.dropped_streams.saturating_add(stalls.dropped_streams);
        }
    }

    /// Keeps the totals of processes `live` says are still followed.
    pub fn retain_processes(&mut self, live: impl Fn(&str) -> bool) {
        self.signals.retain(|process, _| live(process));
        self.stalls.retain(|(process, ..), _| live(process));
    }

    /// Refused and reset streams and GOAWAYs, per process.
    pub fn signals(&self) -> &BTreeMap<Arc<str>, Signals> {
        &self.signals
    }

    /// Flow-control stalls, per (process, direction, sender).
    pub fn stalls(&self) -> &BTreeMap<(Arc<str>, Side, &'static str), Stalls> {
        &self.stalls
    }
}
