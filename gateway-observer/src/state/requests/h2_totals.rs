//! HTTP/2 signals and flow-control stalls, summed per process (and for stalls per direction and
//! sender), for the metrics: open connections' included, so that a REFUSED_STREAM storm or a
//! stalled window shows while the gRPC connection that has it stays open for hours.
//!
//! Each connection's figures are added as they grow: once a tick (`settle`), and a last time
//! when its session ends (closed, evicted, or parsed afresh after lost records: `retire`). What
//! was added is kept with the connection, so nothing is added twice, and a figure that came out
//! lower than one already added (a stall timed up to a tick, whose ending frame was stamped
//! before it) adds nothing: the totals never go down.

use std::{collections::BTreeMap, sync::Arc};

use gateway_observer_http::{
    Role,
    h2::{Signals, Stalls},
};

use super::{Tracked, stats::Side};

#[derive(Default)]
pub struct H2Totals {
    /// Refused and reset streams and GOAWAYs, by process.
    signals: BTreeMap<Arc<str>, Signals>,
    /// Stalls by process, direction and sender (`gateway` or `peer`).
    stalls: BTreeMap<(Arc<str>, Side, &'static str), Stalls>,
}

/// `f` of each figure of `a` and `b`.
fn zip(a: &Signals, b: &Signals, f: fn(u64, u64) -> u64) -> Signals {
    let stalls = |x: Stalls, y: Stalls| Stalls {
        count: f(x.count, y.count),
        stalled_ns: f(x.stalled_ns, y.stalled_ns),
        dropped_streams: f(x.dropped_streams, y.dropped_streams),
    };
    Signals {
        refused_streams: f(a.refused_streams, b.refused_streams),
        reset_streams: f(a.reset_streams, b.reset_streams),
        goaways: f(a.goaways, b.goaways),
        resyncs: f(a.resyncs, b.resyncs),
        gateway_stalls: stalls(a.gateway_stalls, b.gateway_stalls),
        peer_stalls: stalls(a.peer_stalls, b.peer_stalls),
    }
}

impl H2Totals {
    /// Adds what `conn`'s HTTP/2 session shows at `now_ns` (a stall still open timed up to
    /// then) beyond what was added of it before. A session seen for the first time makes its
    /// series, zero until something happens.
    pub(super) fn settle(&mut self, conn: &mut Tracked, now_ns: u64) {
        let (Some(http), Some(process)) = (&conn.http, &conn.process) else { return };
        if !http.is_h2() || conn.h2_settled {
            return;
        }
        conn.h2_settled = !http.h2_stalled();
        let shown = http.h2_signals_at(now_ns);
        let first = conn.h2_added.is_none();
        let added = conn.h2_added.get_or_insert_default();
        let new = zip(&shown, added, u64::saturating_sub);
        if first || new != Signals::default() {
            let side = if http.role() == Role::Server { Side::Inbound } else { Side::Outbound };
            self.add(process, side, &new, first);
            **added = zip(&shown, added, u64::max);
        }
    }

    /// `conn`'s session ends at `end_ns` (its close, or its last record): what it came to is
    /// added, and a session parsed afresh after it starts from nothing.
    pub(super) fn retire(&mut self, conn: &mut Tracked, end_ns: u64) {
        // Its close may have ended a stall without a record.
        conn.h2_settled = false;
        self.settle(conn, end_ns);
        (conn.h2_added, conn.h2_settled) = (None, false);
    }

    /// Adds `s`; only the series it changes are looked up, all of them for a `first` session.
    fn add(&mut self, process: &Arc<str>, side: Side, s: &Signals, first: bool) {
        if first || s.refused_streams | s.reset_streams | s.goaways != 0 {
            let total = self.signals.entry(process.clone()).or_default();
            total.refused_streams = total.refused_streams.saturating_add(s.refused_streams);
            total.reset_streams = total.reset_streams.saturating_add(s.reset_streams);
            total.goaways = total.goaways.saturating_add(s.goaways);
        }
        for (sender, stalls) in [("gateway", s.gateway_stalls), ("peer", s.peer_stalls)] {
            if !first && stalls == Stalls::default() {
                continue;
            }
            let total = self.stalls.entry((process.clone(), side, sender)).or_default();
            total.count = total.count.saturating_add(stalls.count);
            total.stalled_ns = total.stalled_ns.saturating_add(stalls.stalled_ns);
            total.dropped_streams = total.dropped_streams.saturating_add(stalls.dropped_streams);
        }
    }

    /// Keeps the totals of processes `live` says are still followed. A connection of a gone
    /// process left open (its close lost) brings its series back only if its figures grow.
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
