//! What the tracker shows of requests now: per process, the requests in flight, the upstream
//! peers and the window's rates, for the snapshot, the metrics and the detectors.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::{
    IN_FLIGHT_LISTED, RequestTracker,
    flows::PeerFacts,
    seconds,
    stats::{Side, WindowSummary},
};

/// An upstream peer of one process, now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamPeer {
    pub peer: String,
    pub connections: usize,
    pub outstanding: usize,
    pub oldest_age_seconds: f64,
    /// Retransmits on the peer's open connections.
    pub retransmits: u64,
    /// Open connections to it retransmitting into silence now.
    pub one_way: usize,
}

/// A request the gateway has read and not yet answered in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InFlightRequest {
    pub thread: u32,
    pub method: &'static str,
    pub path: String,
    pub age_seconds: f64,
    pub socket_queue_seconds: Option<f64>,
    pub response_started: bool,
}

/// Requests of one process for the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcessRequests {
    pub inbound: WindowSummary,
    pub outbound: WindowSummary,
    pub in_flight: usize,
    /// The oldest in-flight requests, oldest first.
    pub in_flight_oldest: Vec<InFlightRequest>,
    pub upstreams: Vec<UpstreamPeer>,
}

impl RequestTracker {
    /// Upstream peers of every process: (pid, peers), peers by label.
    pub fn upstreams(&self, now_ns: u64) -> BTreeMap<u32, Vec<UpstreamPeer>> {
        let mut by_peer: BTreeMap<(u32, &str), UpstreamPeer> = BTreeMap::new();
        for conn in self.conns.values() {
            let (Some(tgid), Some(Side::Outbound), Some(peer), Some(http)) =
                (conn.tgid, conn.side, &conn.peer, &conn.http)
            else {
                continue;
            };
            let oldest = http.in_flight().map(|r| r.request_start_ns).min();
            let outstanding = http.in_flight().count();
            let entry = by_peer.entry((tgid, &**peer)).or_insert(UpstreamPeer {
                peer: peer.to_string(),
                connections: 0,
                outstanding: 0,
                oldest_age_seconds: 0.0,
                retransmits: 0,
                one_way: 0,
            });
            entry.connections += 1;
            entry.outstanding += outstanding;
            entry.retransmits += u64::from(conn.flow.retransmits);
            entry.one_way += usize::from(conn.flow.one_way_for(now_ns).is_some());
            if let Some(start) = oldest {
                entry.oldest_age_seconds = entry.oldest_age_seconds.max(seconds(now_ns.saturating_sub(start)));
            }
        }
        let mut out: BTreeMap<u32, Vec<UpstreamPeer>> = BTreeMap::new();
        for ((tgid, _), peer) in by_peer {
            out.entry(tgid).or_default().push(peer);
        }
        out
    }

    /// Every upstream peer of every process, with what the upstream detectors need.
    pub fn peer_facts(&self, now_ns: u64) -> Vec<PeerFacts> {
        let mut by_peer: BTreeMap<(u32, &str), PeerFacts> = BTreeMap::new();
        for conn in self.conns.values() {
            let (Some(tgid), Some(Side::Outbound), Some(peer), Some(http)) =
                (conn.tgid, conn.side, &conn.peer, &conn.http)
            else {
                continue;
            };
            let facts = by_peer.entry((tgid, &**peer)).or_insert_with(|| {
                let (answered_recently, recent_p99_ns) = self.slowest.peer_recent(tgid, peer);
                PeerFacts {
                    pid: tgid,
                    comm: self.process_name(tgid).to_string(),
                    peer: peer.to_string(),
                    answered_recently,
                    recent_p99_ns,
                    last_answer_age_ns: self.slowest.peer_last_answer(tgid, peer).map(|t| now_ns.saturating_sub(t)),
                    ..PeerFacts::default()
                }
            });
            facts.connections += 1;
            // A response that has started (a stream, a long download) is an answer.
            let waiting: Vec<_> = http.in_flight().filter(|r| !r.response_started).collect();
            if !waiting.is_empty() {
                facts.outstanding += waiting.len();
                facts.connections_waiting += 1;
                let oldest = waiting.iter().map(|r| now_ns.saturating_sub(r.request_start_ns)).max();
                facts.oldest_age_ns = facts.oldest_age_ns.max(oldest);
                facts.threads_waiting.extend(waiting.iter().map(|r| r.tid));
                if let Some(answered_at) = facts.last_answer_age_ns.map(|age| now_ns.saturating_sub(age)) {
                    for r in waiting.iter().filter(|r| r.request_start_ns > answered_at) {
                        facts.written_since_answer += 1;
                        let age = now_ns.saturating_sub(r.request_start_ns);
                        facts.oldest_since_answer_ns = facts.oldest_since_answer_ns.max(Some(age));
                    }
                }
                facts.bytes_sent_since += conn.flow.tx_since_response;
                facts.bytes_received_since += conn.flow.rx_since_response;
            }
            let flow = &conn.flow;
            facts.retransmits += flow.stall_retransmits;
            if let Some(stalled) = flow.one_way_for(now_ns) {
                facts.one_way_flows += 1;
                if stalled >= facts.longest_one_way_ns {
                    facts.longest_one_way_ns = stalled;
                    facts.stall_retransmits = flow.stall_retransmits;
                    facts.backoff_ns = flow.backoff_ns;
                    facts.unacked_bytes = flow.unacked_bytes;
                    facts.last_rx_age_ns = flow.rx_last_ns.map(|t| now_ns.saturating_sub(t));
                    facts.last_tx_age_ns = flow.tx_last_ns.map(|t| now_ns.saturating_sub(t));
                }
            }
        }
        by_peer
            .into_values()
            .map(|mut f| {
                f.threads_waiting.sort_unstable();
                f.threads_waiting.dedup();
                f
            })
            .collect()
    }

    /// Inbound requests in flight for `min_age_ns` or more, per process.
    pub fn waiting_inbound(&self, now_ns: u64, min_age_ns: u64) -> HashMap<u32, usize> {
        let mut out = HashMap::new();
        for conn in self.conns.values() {
            let (Some(tgid), Some(Side::Inbound), Some(http)) = (conn.tgid, conn.side, &conn.http) else { continue };
            let old = http.in_flight().filter(|r| now_ns.saturating_sub(r.request_start_ns) >= min_age_ns).count();
            if old > 0 {
                *out.entry(tgid).or_insert(0) += old;
            }
        }
        out
    }

    /// Inbound requests in flight for at least `min_age_ns`, per thread that read them: what a
    /// thread-per-request pool's parked threads hold.
    pub fn waiting_inbound_by_thread(&self, now_ns: u64, min_age_ns: u64) -> HashMap<u32, usize> {
        let mut out = HashMap::new();
        for conn in self.conns.values() {
            let (Some(Side::Inbound), Some(http)) = (conn.side, &conn.http) else { continue };
            for request in http.in_flight().filter(|r| now_ns.saturating_sub(r.request_start_ns) >= min_age_ns) {
                *out.entry(request.tid).or_insert(0) += 1;
            }
        }
        out
    }

    /// Inbound requests in flight per process, oldest first (at most `IN_FLIGHT_LISTED`), and
    /// their total.
    pub fn in_flight(&self, now_ns: u64) -> BTreeMap<u32, (usize, Vec<InFlightRequest>)> {
        let mut out: BTreeMap<u32, (usize, Vec<(u64, InFlightRequest)>)> = BTreeMap::new();
        for conn in self.conns.values() {
            let (Some(tgid), Some(Side::Inbound), Some(http)) = (conn.tgid, conn.side, &conn.http) else { continue };
            let entry = out.entry(tgid).or_default();
            for request in http.in_flight() {
                entry.0 += 1;
                entry.1.push((
                    request.request_start_ns,
                    InFlightRequest {
                        thread: request.tid,
                        method: request.method.as_str(),
                        path: request.path.redacted(),
                        age_seconds: seconds(now_ns.saturating_sub(request.request_start_ns)),
                        socket_queue_seconds: request
                            .queued_since_ns
                            .map(|q| seconds(request.request_start_ns.saturating_sub(q))),
                        response_started: request.response_started,
                    },
                ));
            }
        }
        out.into_iter()
            .map(|(tgid, (count, mut list))| {
                list.sort_by_key(|(start, _)| *start);
                list.truncate(IN_FLIGHT_LISTED);
                (tgid, (count, list.into_iter().map(|(_, r)| r).collect()))
            })
            .collect()
    }

    /// Per process: window summaries, in-flight and upstreams.
    pub fn per_process(&self, now_ns: u64) -> BTreeMap<u32, ProcessRequests> {
        let mut upstreams = self.upstreams(now_ns);
        let mut in_flight = self.in_flight(now_ns);
        let mut pids: BTreeSet<u32> = upstreams.keys().chain(in_flight.keys()).copied().collect();
        pids.extend(self.conns.values().filter_map(|c| c.tgid));
        let mut windows = self.stats.windows(now_ns);
        // Processes whose connections all closed still have their window's requests.
        pids.extend(windows.keys().map(|(tgid, _)| *tgid));
        let mut window = |tgid: u32, side: Side| windows.remove(&(tgid, side)).unwrap_or_default();
        pids.into_iter()
            .map(|tgid| {
                let (count, oldest) = in_flight.remove(&tgid).unwrap_or_default();
                let requests = ProcessRequests {
                    inbound: window(tgid, Side::Inbound),
                    outbound: window(tgid, Side::Outbound),
                    in_flight: count,
                    in_flight_oldest: oldest,
                    upstreams: upstreams.remove(&tgid).unwrap_or_default(),
                };
                (tgid, requests)
            })
            .collect()
    }
}
