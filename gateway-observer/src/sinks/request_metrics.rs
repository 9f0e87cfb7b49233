//! The request tracker's and the request queues' metrics, rendered from their views each tick.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_observer_http::h2::Stalls;

use super::{
    families,
    prometheus::{Exposition, Family},
};
use crate::state::{request_queues::RequestQueues, requests::RequestTracker};

/// One number of a sender's HTTP/2 flow-control stalls.
type StallValue = fn(&Stalls) -> f64;

/// The request metrics.
pub fn render_requests(tracker: &RequestTracker, e: &mut Exposition, now_ns: u64) {
    let name = &families::HTTP_REQUESTS;
    e.family(name);
    let series = &tracker.stats.series;
    for (process, s) in series {
        for ((side, method, class), count) in &s.counts {
            let labels =
                [("process", &**process), ("direction", side.as_str()), ("method", method), ("status_class", class)];
            e.sample(name, &labels, *count as f64);
        }
    }
    let name = &families::GRPC_RESPONSES;
    e.family(name);
    for (process, s) in series {
        for ((side, code), count) in &s.grpc_codes {
            e.sample(name, &[("process", process), ("direction", side.as_str()), ("code", code)], *count as f64);
        }
    }
    let name = &families::HTTP_REQUEST_DURATION_SECONDS;
    e.family(name);
    for (process, s) in series {
        for (side, hist) in &s.durations {
            e.histogram(name, &[("process", process), ("direction", side.as_str())], hist);
        }
    }
    let name = &families::HTTP_SOCKET_QUEUE_SECONDS;
    e.family(name);
    for (process, hist) in series.iter().filter_map(|(process, s)| Some((process, s.socket_queue.as_ref()?))) {
        e.histogram(name, &[("process", process)], hist);
    }
    // Processes of one name (nginx's workers) share their series: sums, and the oldest age.
    let mut by_name: BTreeMap<(Arc<str>, String), (usize, f64, usize)> = BTreeMap::new();
    for (tgid, peers) in tracker.upstreams(now_ns) {
        for peer in peers {
            let entry = by_name.entry((tracker.process_name(tgid), peer.peer)).or_default();
            entry.0 += peer.outstanding;
            entry.1 = entry.1.max(peer.oldest_age_seconds);
            entry.2 += peer.one_way;
        }
    }
    let name = &families::UPSTREAM_OUTSTANDING_REQUESTS;
    e.family(name);
    for ((process, peer), (outstanding, _, _)) in &by_name {
        e.sample(name, &[("process", process), ("peer", peer)], *outstanding as f64);
    }
    let name = &families::UPSTREAM_OLDEST_REQUEST_AGE_SECONDS;
    e.family(name);
    for ((process, peer), (_, age, _)) in &by_name {
        e.sample(name, &[("process", process), ("peer", peer)], *age);
    }
    let name = &families::TCP_RETRANSMITS;
    e.family(name);
    for ((process, peer), count) in tracker.retransmits() {
        e.sample(name, &[("process", process), ("peer", peer)], *count as f64);
    }
    let name = &families::TCP_ONE_WAY_FLOWS;
    e.family(name);
    for ((process, peer), (_, _, one_way)) in &by_name {
        e.sample(name, &[("process", process), ("peer", peer)], *one_way as f64);
    }
    let name = &families::HTTP_NON_HTTP_BYTES;
    e.family(name);
    for (process, bytes) in tracker.non_http_bytes() {
        e.sample(name, &[("process", process)], *bytes as f64);
    }
    let name = &families::TLS_CONNECTIONS_UNPARSED;
    e.family(name);
    for (process, connections) in tracker.tls_unparsed() {
        e.sample(name, &[("process", process)], *connections as f64);
    }
    let name = &families::HTTP2_STREAM_RESETS;
    e.family(name);
    for (process, s) in tracker.h2_totals().signals() {
        e.sample(name, &[("process", process), ("reason", "refused")], s.refused_streams as f64);
        e.sample(name, &[("process", process), ("reason", "other")], s.reset_streams as f64);
    }
    let name = &families::HTTP2_GOAWAYS;
    e.family(name);
    for (process, s) in tracker.h2_totals().signals() {
        e.sample(name, &[("process", process)], s.goaways as f64);
    }
    let flow: [(&Family, StallValue); 3] = [
        (&families::HTTP2_FLOW_CONTROL_STALLS, |s| s.count as f64),
        (&families::HTTP2_FLOW_CONTROL_STALLED_SECONDS, |s| s.stalled_ns as f64 / 1e9),
        (&families::HTTP2_FLOW_CONTROL_UNTRACKED_STREAMS, |s| s.dropped_streams as f64),
    ];
    for (name, value) in flow {
        e.family(name);
        for ((process, side, sender), s) in tracker.h2_totals().stalls() {
            e.sample(name, &[("process", process), ("direction", side.as_str()), ("sender", sender)], value(s));
        }
    }
    let name = &families::HTTP_PARSE_RESYNCS;
    e.family(name);
    e.sample(name, &[], tracker.parse_resyncs() as f64);
    let name = &families::HTTP_ABANDONED_REQUESTS;
    e.family(name);
    e.sample(name, &[], tracker.counts.abandoned_after_loss as f64);
    let name = &families::HTTP_CONNECTIONS;
    e.family(name);
    e.sample(name, &[], tracker.connections() as f64);
    let name = &families::HTTP_UNATTRIBUTED_RECORDS;
    e.family(name);
    e.sample(name, &[], tracker.counts.unattributed_records as f64);
    let name = &families::TLS_CIPHERTEXT_RECORDS;
    e.family(name);
    e.sample(name, &[], tracker.counts.tls_ciphertext_records as f64);
    let name = &families::KERNEL_TLS_CONNECTIONS;
    e.family(name);
    let counts = &tracker.counts;
    e.sample(name, &[("offload", "both")], counts.kernel_tls_both as f64);
    e.sample(name, &[("offload", "send_only")], counts.kernel_tls_send_only as f64);
}

/// Gauges per (process name, port), summed over processes of one name (the same gateway in
/// several pods listens on the same port in each: pids are never labels).
pub fn render_request_queues(queues: &RequestQueues, e: &mut Exposition) {
    let mut sums: BTreeMap<(&str, u16), (u32, u32)> = BTreeMap::new();
    for facts in &queues.last {
        for l in &facts.listeners {
            let sum = sums.entry((facts.comm.as_str(), l.port)).or_default();
            sum.0 += l.accept_queue;
            sum.1 += l.waiting;
        }
    }
    let name = &families::ACCEPT_QUEUE_CONNECTIONS;
    e.family(name);
    for ((process, port), (accept_queue, _)) in &sums {
        e.sample(name, &[("process", process), ("port", &port.to_string())], f64::from(*accept_queue));
    }
    let name = &families::SOCKET_WAITING_CONNECTIONS;
    e.family(name);
    for ((process, port), (_, waiting)) in &sums {
        e.sample(name, &[("process", process), ("port", &port.to_string())], f64::from(*waiting));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::requests::tests::{GW, MS, close, hanging_upstream, proxied_request};

    #[test]
    fn a_hanging_upstream_is_an_outstanding_request_of_its_process_and_peer() {
        let mut tracker = RequestTracker::default();
        hanging_upstream(&mut tracker);
        let mut e = Exposition::default();
        render_requests(&tracker, &mut e, 5_101 * MS);
        let text = e.finish();
        let line = format!("gateway_observer_upstream_outstanding_requests{{process=\"{GW}\",peer=\"10.0.0.1:80\"}} 1");
        assert!(text.contains(&line), "{text}");
    }

    #[test]
    fn series_of_a_gone_process_can_be_dropped() {
        let mut tracker = RequestTracker::default();
        proxied_request(&mut tracker);
        let mut e = Exposition::default();
        render_requests(&tracker, &mut e, 300 * MS);
        assert!(e.finish().contains(&format!("process=\"{GW}\"")));
        tracker.handle(close(1, 200 * MS));
        tracker.handle(close(2, 200 * MS));
        tracker.retain_series(|process| process != GW.to_string(), |_, _| false);
        let mut e = Exposition::default();
        render_requests(&tracker, &mut e, 300 * MS);
        let text = e.finish();
        assert!(!text.contains(&format!("process=\"{GW}\"")), "series of a gone process left:\n{text}");
    }
}
