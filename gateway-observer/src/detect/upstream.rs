//! Incident 3: an upstream whose responses never come back while the gateway keeps sending it
//! requests and holding connections or threads for them.
//!
//! `UpstreamNoResponse`: requests written to a peer with no response past a threshold, or a
//! multiple of the peer's recent p99 if that is larger, so a slow-but-working upstream is not
//! flagged. The threshold is 1 s for a peer gone silent: one that answered before, has several
//! requests outstanding, and has answered none of them, nor anything since the oldest was
//! written (incident 3's shape). It stays 5 s for a peer that still answers others, or that was
//! never seen answering (a long-poll or a cold peer). `OneWayStall`: a connection to the peer keeps retransmitting while
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
    /// ...or older than this, when the peer has gone silent (see the module's doc).
    pub silent_no_response: Duration,
    /// Outstanding requests it takes for a peer to count as silent rather than slow on one call.
    pub silent_outstanding: usize,
    /// ...or older than this many times the peer's recent p99, whichever is larger.
    pub p99_multiple: f64,
    /// A connection retransmitting with nothing coming back for this long is one-way.
    pub one_way: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            no_response: Duration::from_secs(5),
            silent_no_response: Duration::from_secs(1),
            silent_outstanding: 2,
            p99_multiple: 10.0,
            one_way: Duration::from_secs(1),
        }
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A peer that answered before and has answered nothing since its oldest outstanding request was
/// written, with several requests waiting on it.
fn gone_silent(facts: &PeerFacts, config: &UpstreamConfig) -> bool {
    let answered_before_oldest =
        facts.last_answer_age_ns.zip(facts.oldest_age_ns).is_some_and(|(last, oldest)| last >= oldest);
    facts.outstanding >= config.silent_outstanding && answered_before_oldest
}

/// The age past which a peer's outstanding request counts as unanswered.
pub fn no_response_threshold_ns(facts: &PeerFacts, config: &UpstreamConfig) -> u64 {
    let floor = nanos(if gone_silent(facts, config) { config.silent_no_response } else { config.no_response });
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
                    "gone_silent": gone_silent(facts, config),
                    "last_answer_seconds_ago": facts.last_answer_age_ns.map(secs),
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
    let threshold = nanos(config.one_way);
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
    fn a_peer_gone_silent_is_named_after_a_second_and_one_still_answering_after_five() {
        let config = UpstreamConfig::default();
        let mut silent = peer("10.0.0.2:8081", Some(2), 0);
        // It answered 2.1 s ago; its three outstanding requests are at most 2 s old.
        silent.last_answer_age_ns = Some(2 * S + S / 10);
        silent.recent_p99_ns = Some(S / 1000);
        let found = upstream_no_response(&[silent.clone()], &config);
        assert_eq!(found.len(), 1, "silent since before its oldest request, 2 s > 1 s");
        assert_eq!(found[0].evidence["gone_silent"], true);
        assert_eq!(found[0].evidence["threshold_seconds"], 1.0);
        // It answered something 0.5 s ago, after the oldest went out: slow, not silent.
        let mut slow = silent.clone();
        slow.last_answer_age_ns = Some(S / 2);
        assert!(upstream_no_response(&[slow], &config).is_empty());
        // One request alone (a long poll) waits the full 5 s.
        let mut single = silent.clone();
        single.outstanding = 1;
        assert!(upstream_no_response(&[single], &config).is_empty());
        // Never seen answering (a cold peer, or attached late): 5 s.
        let mut cold = silent.clone();
        cold.last_answer_age_ns = None;
        assert!(upstream_no_response(&[cold], &config).is_empty());
        // A peer whose p99 is 300 ms waits 3 s even when silent.
        silent.recent_p99_ns = Some(3 * S / 10);
        assert_eq!(no_response_threshold_ns(&silent, &config), 3 * S);
        assert!(upstream_no_response(&[silent], &config).is_empty());
    }

    #[test]
    fn one_way_needs_a_stalled_flow_past_the_threshold() {
        let config = UpstreamConfig::default();
        let mut p = peer("10.0.0.2:8081", Some(3), 0);
        assert!(one_way_stall(&[p.clone()], &config).is_empty(), "no stalled flow: an upstream that only stays silent");
        p.one_way_flows = 2;
        p.longest_one_way_ns = S / 2;
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
