//! Incident 3: an upstream whose responses never come back while the gateway keeps sending it
//! requests and holding connections or threads for them.
//!
//! `UpstreamNoResponse`: requests written to a peer with no response past a threshold, or a
//! multiple of the peer's recent p99 if that is larger, so a slow-but-working upstream is not
//! flagged. A peer gone silent is named after 1 s instead: it answered before, and several
//! requests written to it since its last answer are all unanswered, the oldest of them 1 s old
//! (incident 3's shape; requests in flight when it last answered do not count either way, since
//! a fault cuts some responses off mid-flight). A peer that still answers, a single long poll, or
//! a peer never seen answering (cold, or the observer just attached) waits the 5 s.
//! `OneWayStall`: a connection to the peer keeps retransmitting while
//! nothing comes back: the return path is dead, not just the upstream's application. Both are
//! judged from `PeerFacts`, which the request tracker builds; nothing here touches the kernel.

use std::time::Duration;

use crate::state::requests::flows::PeerFacts;
use crate::{api::v1, detect::finding::Finding};

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

fn from_p99(facts: &PeerFacts, config: &UpstreamConfig) -> u64 {
    facts.recent_p99_ns.map_or(0, |p99| (p99 as f64 * config.p99_multiple) as u64)
}

/// The age past which a peer's outstanding request counts as unanswered.
pub fn no_response_threshold_ns(facts: &PeerFacts, config: &UpstreamConfig) -> u64 {
    nanos(config.no_response).max(from_p99(facts, config))
}

/// How long a peer has been silent, if it has gone silent (see the module's doc): the age of the
/// oldest of the requests written since its last answer, when there are enough of them and it
/// is past 1 s (or the p99 multiple).
fn gone_silent_for(facts: &PeerFacts, config: &UpstreamConfig) -> Option<u64> {
    let age = facts.oldest_since_answer_ns?;
    let threshold = nanos(config.silent_no_response).max(from_p99(facts, config));
    (facts.written_since_answer >= config.silent_outstanding && age >= threshold).then_some(age)
}

/// Other peers of the same process and whether each answers: one bad upstream is told apart from
/// a gateway that is down (then every peer is silent).
fn other_peers(facts: &PeerFacts, all: &[PeerFacts], config: &UpstreamConfig) -> Vec<v1::OtherPeer> {
    all.iter()
        .filter(|o| o.pid == facts.pid && o.peer != facts.peer)
        .map(|o| {
            let stuck = o.oldest_age_ns.is_some_and(|age| age >= no_response_threshold_ns(o, config))
                || gone_silent_for(o, config).is_some();
            let healthy = o.answered_recently > 0 && !stuck;
            v1::OtherPeer { peer: o.peer.clone(), answered_recently: o.answered_recently, healthy }
        })
        .collect()
}

pub fn upstream_no_response(all: &[PeerFacts], config: &UpstreamConfig) -> Vec<Finding> {
    all.iter()
        .filter_map(|facts| {
            let oldest = facts.oldest_age_ns?;
            let threshold = no_response_threshold_ns(facts, config);
            let silent_for = gone_silent_for(facts, config);
            if oldest < threshold && silent_for.is_none() {
                return None;
            }
            let others = other_peers(facts, all, config);
            let healthy_others = others.iter().filter(|p| p.healthy).count();
            let summary = format!(
                "upstream {} has not answered {} request(s) for up to {:.1}s ({} connection(s) held; {} other peer(s) healthy)",
                facts.peer,
                facts.outstanding,
                secs(oldest),
                facts.connections_waiting,
                healthy_others
            );
            Some(Finding {
                pid: facts.pid,
                comm: facts.comm.clone(),
                subject: facts.peer.clone(),
                summary,
                evidence: v1::Evidence::UpstreamNoResponse(v1::UpstreamNoResponse {
                    peer: facts.peer.clone(),
                    outstanding: facts.outstanding,
                    oldest_age_seconds: secs(oldest),
                    threshold_seconds: secs(threshold),
                    gone_silent: silent_for.is_some(),
                    silent_seconds: silent_for.map(secs),
                    written_since_answer: facts.written_since_answer,
                    last_answer_seconds_ago: facts.last_answer_age_ns.map(secs),
                    recent_p99_seconds: facts.recent_p99_ns.map(secs),
                    bytes_sent_since_last_response: facts.bytes_sent_since,
                    bytes_received_since_last_response: facts.bytes_received_since,
                    retransmits: facts.retransmits,
                    connections: facts.connections,
                    connections_waiting: facts.connections_waiting,
                    threads_waiting: facts.threads_waiting.clone(),
                    other_peers: others,
                }),
                // Outstanding requests and their age are facts of now.
                active: true,
                held_for: std::time::Duration::ZERO,
                stack_id: None,
            })
        })
        .collect()
}

pub fn one_way_stall(all: &[PeerFacts], config: &UpstreamConfig) -> Vec<Finding> {
    let threshold = nanos(config.one_way);
    all.iter()
        .filter(|facts| facts.one_way_flows > 0 && facts.longest_one_way_ns >= threshold)
        .map(|facts| Finding {
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
            evidence: v1::Evidence::OneWayStall(v1::OneWayStall {
                peer: facts.peer.clone(),
                one_way_flows: facts.one_way_flows,
                stalled_seconds: secs(facts.longest_one_way_ns),
                retransmits: facts.stall_retransmits,
                last_backoff_seconds: secs(facts.backoff_ns),
                unacked_bytes: facts.unacked_bytes,
                last_received_seconds_ago: facts.last_rx_age_ns.map(secs),
                last_sent_seconds_ago: facts.last_tx_age_ns.map(secs),
                threshold_seconds: secs(threshold),
            }),
            // The stalled flows are those of now.
            active: true,
            held_for: std::time::Duration::ZERO,
            stack_id: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::finding::AlertKind;

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
        assert_eq!((f.kind(), f.subject.as_str()), (AlertKind::UpstreamNoResponse, "10.0.0.2:8081"));
        assert_eq!(f.evidence.to_json()["outstanding"], 3);
        assert_eq!(f.evidence.to_json()["other_peers"][0]["healthy"], true, "{:?}", f.evidence);
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
        // It answered 2.1 s ago; one request in flight then (2.2 s old) and three written since
        // (the oldest 2 s old) are all unanswered.
        let mut silent = peer("10.0.0.2:8081", Some(2), 0);
        silent.oldest_age_ns = Some(2 * S + S / 5);
        silent.outstanding = 4;
        silent.last_answer_age_ns = Some(2 * S + S / 10);
        silent.written_since_answer = 3;
        silent.oldest_since_answer_ns = Some(2 * S);
        silent.recent_p99_ns = Some(S / 1000);
        let found = upstream_no_response(&[silent.clone()], &config);
        assert_eq!(found.len(), 1, "silent for 2 s > 1 s");
        assert_eq!(found[0].evidence.to_json()["gone_silent"], true);
        assert_eq!(found[0].evidence.to_json()["silent_seconds"], 2.0);
        // It answered 0.5 s ago: what was written since is younger than a second.
        let mut answering = silent.clone();
        answering.last_answer_age_ns = Some(S / 2);
        answering.oldest_since_answer_ns = Some(S / 2 - 1);
        assert!(upstream_no_response(&[answering], &config).is_empty(), "a peer that still answers");
        // One request alone since (a long poll) waits the full 5 s.
        let mut single = silent.clone();
        single.written_since_answer = 1;
        assert!(upstream_no_response(&[single], &config).is_empty());
        // Never seen answering (a cold peer, or attached late): nothing counts as since.
        let mut cold = silent.clone();
        (cold.last_answer_age_ns, cold.written_since_answer, cold.oldest_since_answer_ns) = (None, 0, None);
        assert!(upstream_no_response(&[cold], &config).is_empty());
        // A peer whose p99 is 300 ms is silent only after 3 s.
        silent.recent_p99_ns = Some(3 * S / 10);
        assert!(upstream_no_response(&[silent.clone()], &config).is_empty());
        silent.oldest_since_answer_ns = Some(3 * S);
        assert_eq!(upstream_no_response(&[silent], &config).len(), 1);
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
        assert_eq!(found[0].evidence.to_json()["retransmits"], 4);
        assert_eq!(found[0].evidence.to_json()["unacked_bytes"], 80);
    }
}
