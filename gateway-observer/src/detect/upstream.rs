//! Incident 3: an upstream whose responses never come back while the gateway keeps sending it
//! requests and holding connections or threads for them.
//!
//! `UpstreamNoResponse`: requests written to a peer with no response past a threshold (5 s by
//! default, or a multiple of the peer's recent p99 if that is larger, so a slow-but-working
//! upstream is not flagged). `OneWayStall`: a connection to the peer keeps retransmitting while
//! nothing comes back: the return path is dead, not just the upstream's application. Both are
//! judged from `PeerFacts`, which the request tracker builds; nothing here touches the kernel.

use std::time::Duration;

use serde_json::json;

use crate::alerts::{AlertKind, Finding};
use crate::requests::flows::PeerFacts;

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// An outstanding request older than this (at least) is unanswered.
    pub no_response: Duration,
    /// ...or older than this many times the peer's recent p99, whichever is larger.
    pub p99_multiple: f64,
    /// A connection retransmitting with nothing coming back for this long is one-way.
    pub one_way: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self { no_response: Duration::from_secs(5), p99_multiple: 10.0, one_way: Duration::from_secs(2) }
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The age past which a peer's outstanding request counts as unanswered.
pub fn no_response_threshold_ns(facts: &PeerFacts, config: &UpstreamConfig) -> u64 {
    let floor = u64::try_from(config.no_response.as_nanos()).unwrap_or(u64::MAX);
    let from_p99 = facts.recent_p99_ns.map_or(0, |p99| (p99 as f64 * config.p99_multiple) as u64);
    floor.max(from_p99)
}

/// Other peers of the same process and whether each answers: one bad upstream is told apart from
/// a gateway that is down (then every peer is silent).
fn other_peers(facts: &PeerFacts, all: &[PeerFacts], config: &UpstreamConfig) -> serde_json::Value {
    let others: Vec<serde_json::Value> = all
        .iter()
        .filter(|o| o.pid == facts.pid && o.peer != facts.peer)
        .map(|o| {
            let stuck = o.oldest_age_ns.is_some_and(|age| age >= no_response_threshold_ns(o, config));
            json!({"peer": o.peer, "answered_recently": o.answered_recently, "healthy": o.answered_recently > 0 && !stuck})
        })
        .collect();
    json!(others)
}

pub fn upstream_no_response(all: &[PeerFacts], config: &UpstreamConfig) -> Vec<Finding> {
    all.iter()
        .filter_map(|facts| {
            let oldest = facts.oldest_age_ns?;
            let threshold = no_response_threshold_ns(facts, config);
            if oldest < threshold {
                return None;
            }
            let others = other_peers(facts, all, config);
            let healthy_others = others.as_array().map_or(0, |o| o.iter().filter(|p| p["healthy"] == true).count());
            let summary = format!(
                "upstream {} has not answered {} request(s) for up to {:.1}s ({} connection(s) held; {} other peer(s) healthy)",
                facts.peer,
                facts.outstanding,
                secs(oldest),
                facts.connections_waiting,
                healthy_others
            );
            Some(Finding {
                kind: AlertKind::UpstreamNoResponse,
                pid: facts.pid,
                comm: facts.comm.clone(),
                subject: facts.peer.clone(),
                summary,
                evidence: json!({
                    "peer": facts.peer,
                    "outstanding": facts.outstanding,
                    "oldest_age_seconds": secs(oldest),
                    "threshold_seconds": secs(threshold),
                    "recent_p99_seconds": facts.recent_p99_ns.map(secs),
                    "bytes_sent_since_last_response": facts.bytes_sent_since,
                    "bytes_received_since_last_response": facts.bytes_received_since,
                    "retransmits": facts.retransmits,
                    "connections": facts.connections,
                    "connections_waiting": facts.connections_waiting,
                    "threads_waiting": facts.threads_waiting,
                    "other_peers": others,
                }),
                // Outstanding requests and their age are facts of now.
                active: true,
            })
        })
        .collect()
}

pub fn one_way_stall(all: &[PeerFacts], config: &UpstreamConfig) -> Vec<Finding> {
    let threshold = u64::try_from(config.one_way.as_nanos()).unwrap_or(u64::MAX);
    all.iter()
        .filter(|facts| facts.one_way_flows > 0 && facts.longest_one_way_ns >= threshold)
        .map(|facts| Finding {
            kind: AlertKind::OneWayStall,
            pid: facts.pid,
            comm: facts.comm.clone(),
            subject: facts.peer.clone(),
            summary: format!(
                "{} connection(s) to {} send with nothing coming back for up to {:.1}s ({} retransmits, {} bytes unacknowledged)",
                facts.one_way_flows,
                facts.peer,
                secs(facts.longest_one_way_ns),
                facts.stall_retransmits,
                facts.unacked_bytes
            ),
            evidence: json!({
                "peer": facts.peer,
                "one_way_flows": facts.one_way_flows,
                "stalled_seconds": secs(facts.longest_one_way_ns),
                "retransmits": facts.stall_retransmits,
                "last_backoff_seconds": secs(facts.backoff_ns),
                "unacked_bytes": facts.unacked_bytes,
                "last_received_seconds_ago": facts.last_rx_age_ns.map(secs),
                "last_sent_seconds_ago": facts.last_tx_age_ns.map(secs),
                "threshold_seconds": secs(threshold),
            }),
            // The stalled flows are those of now.
            active: true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn peer(name: &str, oldest_s: Option<u64>, answered: usize) -> PeerFacts {
        PeerFacts {
            pid: 7,
            comm: "gw".into(),
            peer: name.into(),
            connections: 4,
            outstanding: usize::from(oldest_s.is_some()) * 3,
            oldest_age_ns: oldest_s.map(|s| s * S),
            answered_recently: answered,
            recent_p99_ns: (answered > 0).then_some(S / 100),
            connections_waiting: usize::from(oldest_s.is_some()) * 3,
            threads_waiting: vec![11, 12],
            ..PeerFacts::default()
        }
    }

    #[test]
    fn an_unanswered_peer_is_named_and_a_healthy_one_is_not() {
        let config = UpstreamConfig::default();
        let peers = [peer("10.0.0.2:8081", Some(6), 0), peer("127.0.0.1:9000", None, 500)];
        let found = upstream_no_response(&peers, &config);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!((f.kind, f.subject.as_str()), (AlertKind::UpstreamNoResponse, "10.0.0.2:8081"));
        assert_eq!(f.evidence["outstanding"], 3);
        assert_eq!(f.evidence["other_peers"][0]["healthy"], true, "{}", f.evidence);
        assert!(f.summary.contains("1 other peer(s) healthy"), "{}", f.summary);
        // Under the threshold: nothing.
        assert!(upstream_no_response(&[peer("10.0.0.2:8081", Some(4), 0)], &config).is_empty());
    }

    #[test]
    fn a_slow_peer_gets_a_threshold_from_its_own_p99() {
        let config = UpstreamConfig::default();
        let mut slow = peer("10.0.0.3:80", Some(6), 100);
        slow.recent_p99_ns = Some(S); // answers in about 1 s: 10 s before it counts as unanswered
        assert_eq!(no_response_threshold_ns(&slow, &config), 10 * S);
        assert!(upstream_no_response(&[slow.clone()], &config).is_empty());
        slow.oldest_age_ns = Some(11 * S);
        assert_eq!(upstream_no_response(&[slow], &config).len(), 1);
    }

    #[test]
    fn one_way_needs_a_stalled_flow_past_the_threshold() {
        let config = UpstreamConfig::default();
        let mut p = peer("10.0.0.2:8081", Some(3), 0);
        assert!(one_way_stall(&[p.clone()], &config).is_empty(), "no stalled flow: an upstream that only stays silent");
        p.one_way_flows = 2;
        p.longest_one_way_ns = S;
        assert!(one_way_stall(&[p.clone()], &config).is_empty());
        p.longest_one_way_ns = 3 * S;
        p.stall_retransmits = 4;
        p.unacked_bytes = 80;
        let found = one_way_stall(&[p], &config);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].evidence["retransmits"], 4);
        assert_eq!(found[0].evidence["unacked_bytes"], 80);
    }
}
