//! Finished exchanges folded into what the metrics and the snapshot show: counters by method and
//! status class, latency histograms, and a bounded window of recent latencies for rates and
//! exact quantiles.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::FastHash;
use crate::state::histogram::Log2Histogram;

/// How far back the snapshot's rates and quantiles look.
pub const WINDOW_NS: u64 = 10_000_000_000;
/// Latencies kept for the window: bounded whatever the request rate (100k/s fills it in 2 s,
/// after which rates and quantiles describe the newest 200k requests).
const MAX_RECENT: usize = 200_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// Requests the gateway served (accepted connections).
    Inbound,
    /// Requests the gateway sent upstream (connections it opened).
    Outbound,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Inbound => "inbound",
            Side::Outbound => "outbound",
        }
    }
}

/// `2xx`…, `1xx` for upgrades, `none` when the connection closed before a response.
pub fn status_class(status: Option<u16>) -> &'static str {
    match status {
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        Some(_) => "other",
        None => "none",
    }
}

/// gRPC's status codes by name (grpc/doc/statuscodes.md), `other` past them: a bounded label.
pub fn grpc_code_name(code: u16) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(usize::from(code)).copied().unwrap_or("other")
}

/// One finished exchange as the window keeps it.
#[derive(Debug, Clone, Copy)]
struct Recent {
    end_ns: u64,
    tgid: u32,
    side: Side,
    duration_ns: u64,
    /// The request got no good answer: a 5xx, or no response before the connection closed.
    refused: bool,
    /// Inbound: how long its first bytes waited in the socket.
    queue_ns: Option<u64>,
}

/// Queue waits at least this long count as requests delayed by the gateway (a healthy gateway
/// reads a request well under a millisecond after it arrives).
pub const DELAYED_QUEUE_NS: u64 = 10_000_000;

/// What a process's clients went through over a recent stretch: the evidence detectors attach.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ClientImpact {
    /// Inbound requests completed in the stretch.
    pub requests: u64,
    /// Of them, those whose first bytes waited at least `DELAYED_QUEUE_NS` in the socket.
    pub delayed_in_socket: u64,
    pub max_socket_queue_seconds: f64,
    /// 5xx responses, or connections closed before a response.
    pub refused: u64,
}

/// Rate and latency of one process and side over the window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WindowSummary {
    pub requests: u64,
    pub per_second: f64,
    pub refused: u64,
    pub p50_seconds: f64,
    pub p90_seconds: f64,
    pub p99_seconds: f64,
    pub max_seconds: f64,
}

#[derive(Debug, Default)]
pub struct RequestStats {
    /// Process name → its series. Looked up by the name borrowed (`&str`): counting a request
    /// neither allocates nor touches the name's shared count (two atomic operations per map, a
    /// third of this function's time when the key was cloned for each lookup).
    pub series: BTreeMap<Arc<str>, ProcessSeries>,
    recent: VecDeque<Recent>,
    /// Exchanges recorded since the start: the newest `appended - n` of `recent` are those
    /// recorded after the count was `n`.
    appended: u64,
}

/// One process's request series.
#[derive(Debug, Default)]
pub struct ProcessSeries {
    /// (side, method, status class) → requests.
    pub counts: BTreeMap<(Side, &'static str, &'static str), u64>,
    /// (side, gRPC status code name) → gRPC calls: their HTTP status is 200 whatever the
    /// outcome, which only the trailers' `grpc-status` tells.
    pub grpc_codes: BTreeMap<(Side, &'static str), u64>,
    /// side → latency histogram.
    pub durations: BTreeMap<Side, Log2Histogram>,
    /// How long inbound requests waited in the socket before the gateway read them.
    pub socket_queue: Option<Log2Histogram>,
}

/// Rate and quantiles of one process and side's latencies in the window.
fn summary(mut durations: Vec<u64>, refused: u64) -> WindowSummary {
    if durations.is_empty() {
        return WindowSummary::default();
    }
    let requests = durations.len();
    // Selection, not a full sort: this runs for every process at every tick.
    // Each quantile is selected among the values above the previous one only (a selection
    // leaves them after it), so the later ones look at a tenth of the window, not all of it.
    let mut below = 0;
    let mut quantile = |q: f64| {
        let rank = ((requests as f64 * q).ceil() as usize).clamp(1, requests);
        let from = below.min(rank - 1);
        let value = match durations.get_mut(from..) {
            Some(rest) if !rest.is_empty() => *rest.select_nth_unstable(rank - 1 - from).1,
            _ => 0,
        };
        below = rank;
        value as f64 / 1e9
    };
    WindowSummary {
        requests: requests as u64,
        per_second: requests as f64 / (WINDOW_NS as f64 / 1e9),
        refused,
        p50_seconds: quantile(0.50),
        p90_seconds: quantile(0.90),
        p99_seconds: quantile(0.99),
        max_seconds: quantile(1.0),
    }
}

impl RequestStats {
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        process: &Arc<str>,
        tgid: u32,
        side: Side,
        method: &'static str,
        status: Option<u16>,
        duration_ns: u64,
        end_ns: u64,
        queue_ns: Option<u64>,
    ) {
        let series = self.series_of(process);
        *series.counts.entry((side, method, status_class(status))).or_default() += 1;
        series.durations.entry(side).or_default().observe(duration_ns);
        if let Some(queue) = queue_ns {
            series.socket_queue.get_or_insert_default().observe(queue);
        }
        if self.recent.len() == MAX_RECENT {
            self.recent.pop_front();
        }
        let refused = status.is_none_or(|s| s >= 500);
        self.recent.push_back(Recent { end_ns, tgid, side, duration_ns, refused, queue_ns });
        self.appended += 1;
    }

    /// A gRPC call's `grpc-status` (a response that carried one: its trailers, or a trailers-only
    /// answer).
    pub fn record_grpc(&mut self, process: &Arc<str>, side: Side, code: u16) {
        *self.series_of(process).grpc_codes.entry((side, grpc_code_name(code))).or_default() += 1;
    }

    /// `process`'s series, made at its first request.
    fn series_of(&mut self, process: &Arc<str>) -> &mut ProcessSeries {
        if !self.series.contains_key(&**process) {
            self.series.insert(process.clone(), ProcessSeries::default());
        }
        self.series.get_mut(&**process).expect("inserted above")
    }

    /// Requests of `process` by side, method and status class (0 when none).
    pub fn count(&self, process: &str, side: Side, method: &'static str, class: &'static str) -> u64 {
        self.series.get(process).and_then(|series| series.counts.get(&(side, method, class))).copied().unwrap_or(0)
    }

    /// Drops window entries older than `now - WINDOW_NS`.
    pub fn expire(&mut self, now_ns: u64) {
        let oldest = now_ns.saturating_sub(WINDOW_NS);
        while self.recent.front().is_some_and(|r| r.end_ns < oldest) {
            self.recent.pop_front();
        }
        crate::heap::shrink_sparse_queue(&mut self.recent);
    }

    /// Rate and quantiles of `tgid`'s `side` over the window ending at `now_ns` (the daemon takes
    /// every process's at once, from [`Self::windows`]).
    #[cfg(test)]
    pub fn window(&self, tgid: u32, side: Side, now_ns: u64) -> WindowSummary {
        self.windows(now_ns).remove(&(tgid, side)).unwrap_or_default()
    }

    /// Rate and quantiles of every process and side over the window ending at `now_ns`, from one
    /// pass over the window (it holds up to 200k latencies, and a pass per process and side was
    /// a tenth of the daemon's work at 10k req/s).
    pub fn windows(&self, now_ns: u64) -> HashMap<(u32, Side), WindowSummary> {
        let oldest = now_ns.saturating_sub(WINDOW_NS);
        // Keys are pids and sides, not attacker-chosen: the fast hash (this runs per entry of
        // the window, up to 200k per tick).
        let mut gathered: HashMap<(u32, Side), (Vec<u64>, u64), FastHash> = HashMap::default();
        for r in self.recent.iter().filter(|r| r.end_ns >= oldest) {
            let (durations, refused) = gathered.entry((r.tgid, r.side)).or_default();
            durations.push(r.duration_ns);
            *refused += u64::from(r.refused);
        }
        gathered.into_iter().map(|(key, (durations, refused))| (key, summary(durations, refused))).collect()
    }

    /// Inbound requests of `tgid` that arrived at or after `since_ns` and were answered: how many,
    /// and how many of them within `within_ns`.
    pub fn answered_since(&self, tgid: u32, since_ns: u64, within_ns: u64) -> (u64, u64) {
        let recent = self.recent.iter().rev().take_while(|r| r.end_ns >= since_ns);
        recent
            .filter(|r| r.tgid == tgid && r.side == Side::Inbound && r.end_ns.saturating_sub(r.duration_ns) >= since_ns)
            .fold((0, 0), |(answered, prompt), r| (answered + 1, prompt + u64::from(r.duration_ns < within_ns)))
    }

    /// The inbound requests of `tgid` that completed since `since_ns`, as clients saw them.
    pub fn impact_since(&self, tgid: u32, since_ns: u64) -> ClientImpact {
        self.impact_of(&[tgid], since_ns, DELAYED_QUEUE_NS)
    }

    /// Like `impact_since`, for requests served by any of `tgids` (a pre-fork server's workers),
    /// counting those that waited at least `delayed_ns` in the socket as delayed.
    pub fn impact_of(&self, tgids: &[u32], since_ns: u64, delayed_ns: u64) -> ClientImpact {
        impact(self.recent.iter().rev().take_while(|r| r.end_ns >= since_ns), tgids, delayed_ns)
    }

    /// Exchanges recorded since the start (see `impact_of_newest`).
    pub fn appended(&self) -> u64 {
        self.appended
    }

    /// Like `impact_of`, over the exchanges recorded after `appended()` was `count`, whenever
    /// they ended: one whose records were drained late is not missed.
    pub fn impact_of_newest(&self, tgids: &[u32], count: u64, delayed_ns: u64) -> ClientImpact {
        let newest = usize::try_from(self.appended.saturating_sub(count)).unwrap_or(usize::MAX);
        impact(self.recent.iter().rev().take(newest), tgids, delayed_ns)
    }
}

/// What `tgids`' inbound requests among `recent` went through.
fn impact<'a>(recent: impl Iterator<Item = &'a Recent>, tgids: &[u32], delayed_ns: u64) -> ClientImpact {
    let mut impact = ClientImpact::default();
    for r in recent.filter(|r| tgids.contains(&r.tgid) && r.side == Side::Inbound) {
        impact.requests += 1;
        impact.refused += u64::from(r.refused);
        let queue = r.queue_ns.unwrap_or(0);
        impact.delayed_in_socket += u64::from(queue >= delayed_ns);
        impact.max_socket_queue_seconds = impact.max_socket_queue_seconds.max(queue as f64 / 1e9);
    }
    impact
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_histograms_and_window_quantiles() {
        let mut stats = RequestStats::default();
        let gw: Arc<str> = Arc::from("gw");
        // 100 requests of 1..=100 ms, ending 10 ms apart, the last at 1 s.
        for i in 1..=100u64 {
            let status = if i % 10 == 0 { Some(503) } else { Some(200) };
            stats.record(&gw, 7, Side::Inbound, "GET", status, i * 1_000_000, i * 10_000_000, Some(1000));
        }
        assert_eq!(stats.count(&gw, Side::Inbound, "GET", "2xx"), 90);
        assert_eq!(stats.count(&gw, Side::Inbound, "GET", "5xx"), 10);
        assert_eq!(stats.series[&gw].durations[&Side::Inbound].count(), 100);
        assert_eq!(stats.series[&gw].socket_queue.as_ref().map(|h| h.sum_ns), Some(100_000));
        let w = stats.window(7, Side::Inbound, 1_000_000_000);
        assert_eq!((w.requests, w.refused), (100, 10));
        assert!((w.p50_seconds - 0.050).abs() < 1e-9, "{w:?}");
        assert!((w.p99_seconds - 0.099).abs() < 1e-9, "{w:?}");
        assert!((w.per_second - 10.0).abs() < 1e-9);
        assert_eq!(stats.window(7, Side::Outbound, 1_000_000_000), WindowSummary::default());
        assert_eq!(stats.window(8, Side::Inbound, 1_000_000_000).requests, 0);
        // 10.5 s later only the requests that ended in the last 10 s remain.
        stats.expire(10_500_000_000);
        assert_eq!(stats.window(7, Side::Inbound, 10_500_000_000).requests, 51);
        let impact = stats.impact_since(7, 0);
        assert_eq!((impact.requests, impact.refused, impact.delayed_in_socket), (51, 6, 0));
        stats.record(&gw, 7, Side::Inbound, "GET", None, 1, 10_600_000_000, Some(DELAYED_QUEUE_NS));
        stats.record(&gw, 8, Side::Inbound, "GET", None, 1, 10_600_000_000, Some(DELAYED_QUEUE_NS));
        let impact = stats.impact_since(7, 10_550_000_000);
        assert_eq!((impact.requests, impact.refused, impact.delayed_in_socket), (1, 1, 1));
        // Recorded after the count was 100, whenever it ended (even before the others).
        assert_eq!(stats.appended(), 102);
        stats.record(&gw, 7, Side::Inbound, "GET", Some(200), 1, 5_000_000_000, None);
        let newest = stats.impact_of_newest(&[7], 100, DELAYED_QUEUE_NS);
        assert_eq!((newest.requests, newest.delayed_in_socket), (2, 1));
        assert_eq!(stats.impact_of_newest(&[7, 8], 100, DELAYED_QUEUE_NS).requests, 3);
        assert_eq!(stats.impact_of_newest(&[7], 103, DELAYED_QUEUE_NS).requests, 0);
        assert!((impact.max_socket_queue_seconds - 0.010).abs() < 1e-12);
    }

    #[test]
    fn answers_since_a_request_arrived_and_the_prompt_ones() {
        let mut stats = RequestStats::default();
        let gw: Arc<str> = Arc::from("gw");
        // (start, duration) in ms: one answered before 1 s, one started before it, three after.
        for (start, took) in [(100, 50), (900, 400), (1_000, 30), (1_200, 800), (1_500, 99)] {
            let (start, took) = (start * 1_000_000, took * 1_000_000);
            stats.record(&gw, 7, Side::Inbound, "GET", Some(200), took, start + took, None);
        }
        stats.record(&gw, 7, Side::Outbound, "GET", Some(200), 1, 1_600_000_000, None);
        stats.record(&gw, 8, Side::Inbound, "GET", Some(200), 1, 1_600_000_000, None);
        assert_eq!(stats.answered_since(7, 1_000_000_000, 100_000_000), (3, 2));
        assert_eq!(stats.answered_since(7, 1_000_000_001, 100_000_000), (2, 1));
        assert_eq!(stats.answered_since(7, 5_000_000_000, 100_000_000), (0, 0));
    }

    #[test]
    fn grpc_codes_are_named_and_bounded() {
        assert_eq!(grpc_code_name(0), "OK");
        assert_eq!(grpc_code_name(5), "NOT_FOUND");
        assert_eq!(grpc_code_name(14), "UNAVAILABLE");
        assert_eq!(grpc_code_name(16), "UNAUTHENTICATED");
        assert_eq!(grpc_code_name(17), "other");
        assert_eq!(grpc_code_name(u16::MAX), "other");
        let mut stats = RequestStats::default();
        let gw: Arc<str> = Arc::from("gw");
        for code in [0, 0, 5, 99] {
            stats.record_grpc(&gw, Side::Inbound, code);
        }
        let counts: Vec<(&str, u64)> = stats.series[&gw].grpc_codes.iter().map(|((_, code), n)| (*code, *n)).collect();
        assert_eq!(counts, [("NOT_FOUND", 1), ("OK", 2), ("other", 1)]);
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(Some(101)), "1xx");
        assert_eq!(status_class(Some(404)), "4xx");
        assert_eq!(status_class(Some(999)), "other");
        assert_eq!(status_class(None), "none");
    }
}
