//! `RequestQueueing`: requests wait in the gateway's socket buffers (arrived, not yet read) past a
//! threshold. This is what clients and health checks feel when a gateway stops reading, whatever
//! the cause (a blocked or busy event loop, too few workers), and it is often the first sign:
//! the gateway's CPU stays low and its own latency, measured from the read, looks fine.
//!
//! Judged from `QueueFacts`, gathered each tick by `crate::state::request_queues`: connections holding
//! unread bytes now (the kernel's per-socket arrival time), the socket queue waits of requests
//! completed in the window, accept queues and listen overflows.

use std::time::Duration;

pub use crate::state::request_queues::{ListenerFacts, QueueFacts};
use crate::{
    api::v1,
    detect::finding::{AlertKind, Finding},
};

#[derive(Debug, Clone)]
pub struct QueueingConfig {
    /// A request whose bytes waited unread this long is queued.
    pub threshold: Duration,
    /// Completed requests alone fire the alert when at least this many waited past the
    /// threshold in the window...
    pub min_delayed: u64,
    /// ...and they are at least this share of the window's requests (a lone straggler is not a
    /// queue).
    pub min_delayed_share: f64,
}

impl Default for QueueingConfig {
    fn default() -> Self {
        Self { threshold: Duration::from_millis(200), min_delayed: 3, min_delayed_share: 0.01 }
    }
}

/// Requests that queued unread, for every process sharing each listener: connections holding
/// unread bytes past the threshold now, and the window's requests whose bytes waited that long.
/// A full thread-per-request pool reads a request whenever a worker frees up, so its queue
/// comes and goes from tick to tick: the window says whether requests wait for its threads.
pub fn queued_by_process(facts: &[QueueFacts]) -> std::collections::HashMap<u32, usize> {
    let mut out = std::collections::HashMap::new();
    for f in facts {
        let queued = f.waiting() as usize + f.delayed as usize;
        if queued == 0 {
            continue;
        }
        for pid in f.sharers.iter().chain(std::iter::once(&f.pid)) {
            *out.entry(*pid).or_insert(0) = queued;
        }
    }
    out
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Whether requests queue now: some wait unread past the threshold, or enough of the window's
/// requests did.
fn queueing(facts: &QueueFacts, config: &QueueingConfig) -> bool {
    let delayed_enough = facts.delayed >= config.min_delayed
        && facts.delayed as f64 >= config.min_delayed_share * facts.completed.max(1) as f64;
    facts.waiting() > 0 || delayed_enough
}

/// Findings for the processes whose requests queue now. `others` are this tick's findings of the
/// other detectors: those of the processes sharing a finding's listeners (a pre-fork server's
/// workers too) are the likely reasons the gateway stopped reading (a blocked loop, a saturated
/// pool), listed in its evidence.
pub fn request_queueing(all: &[QueueFacts], others: &[Finding], config: &QueueingConfig) -> Vec<Finding> {
    all.iter()
        .filter(|facts| queueing(facts, config))
        .map(|facts| finding(facts, likely_causes(facts, others), config))
        .collect()
}

fn likely_causes(facts: &QueueFacts, others: &[Finding]) -> Vec<String> {
    others
        .iter()
        .filter(|f| f.kind() != AlertKind::RequestQueueing)
        .filter(|f| f.pid == facts.pid || facts.sharers.contains(&f.pid))
        .map(|f| format!("{} {}", f.kind(), f.subject))
        .collect()
}

fn finding(facts: &QueueFacts, likely_causes: Vec<String>, config: &QueueingConfig) -> Finding {
    let ports: Vec<String> = facts.listeners.iter().filter(|l| l.waiting > 0).map(|l| format!(":{}", l.port)).collect();
    let now = if facts.waiting() > 0 {
        format!(
            "{} connection(s) hold requests unread for up to {:.1}s on {}; ",
            facts.waiting(),
            secs(facts.oldest_unread_ns()),
            ports.join(", ")
        )
    } else {
        String::new()
    };
    let summary = format!(
        "requests wait in socket buffers before the gateway reads them: {now}{} of {} completed in the last {:.0}s waited over {}ms (longest {:.2}s)",
        facts.delayed,
        facts.completed,
        secs(facts.window_ns),
        config.threshold.as_millis(),
        secs(facts.max_queue_ns)
    );
    let listeners: Vec<v1::Listener> = facts.listeners.iter().map(ListenerFacts::to_wire).collect();
    Finding {
        pid: facts.pid,
        comm: facts.comm.clone(),
        subject: "inbound".to_owned(),
        summary,
        evidence: v1::Evidence::RequestQueueing(v1::RequestQueueing {
            threshold_seconds: config.threshold.as_secs_f64(),
            window_seconds: secs(facts.window_ns),
            waiting_now: facts.waiting(),
            oldest_unread_seconds: secs(facts.oldest_unread_ns()),
            listeners,
            completed: facts.completed,
            delayed: facts.delayed,
            max_socket_queue_seconds: secs(facts.max_queue_ns),
            refusals: facts.refused,
            listen_overflows: facts.listen_overflows,
            likely_causes,
        }),
        // Requests unread now, or delayed ones completed in the last tick: a window that still
        // holds a burst which ended (a warm-up) is not a queue.
        active: facts.waiting() > 0 || facts.delayed_last_tick > 0,
        held_for: std::time::Duration::ZERO,
        stack_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn facts(waiting: u32, completed: u64, delayed: u64) -> QueueFacts {
        QueueFacts {
            pid: 7,
            comm: "gw".into(),
            sharers: vec![7, 9],
            listeners: vec![
                ListenerFacts { port: 8080, accept_queue: 2, waiting, oldest_unread_ns: u64::from(waiting) * 900 * MS },
                ListenerFacts { port: 9090, ..ListenerFacts::default() },
            ],
            window_ns: 5_000 * MS,
            completed,
            delayed,
            max_queue_ns: delayed * 400 * MS,
            ..QueueFacts::default()
        }
    }

    fn judge(facts: QueueFacts) -> Vec<Finding> {
        request_queueing(&[facts], &[], &QueueingConfig::default())
    }

    fn evidence(f: &Finding) -> &v1::RequestQueueing {
        let v1::Evidence::RequestQueueing(evidence) = &f.evidence else { panic!("{f:?}") };
        evidence
    }

    #[test]
    fn requests_unread_now_fire_with_their_listener() {
        let found = judge(facts(2, 0, 0));
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!((f.kind(), f.subject.as_str(), f.pid), (AlertKind::RequestQueueing, "inbound", 7));
        assert_eq!(evidence(f).waiting_now, 2);
        assert!((evidence(f).oldest_unread_seconds - 1.8).abs() < 1e-9);
        assert_eq!(evidence(f).listeners[0].accept_queue, Some(2));
        assert!(f.summary.contains("2 connection(s) hold requests unread for up to 1.8s on :8080;"), "{}", f.summary);
    }

    #[test]
    fn a_burst_that_ended_is_not_active() {
        let ended = judge(facts(0, 100, 3));
        assert!(!ended[0].active, "the window holds 3 delayed requests, none in the last tick, none unread now");
        let ongoing = QueueFacts { delayed_last_tick: 1, ..facts(0, 100, 3) };
        assert!(judge(ongoing)[0].active);
        assert!(judge(facts(1, 0, 0))[0].active, "unread now");
    }

    #[test]
    fn completed_requests_fire_only_when_enough_waited() {
        // 3 of 100 waited: enough. 2 of 100: a straggler or two. 3 of 1000: under 1 %.
        assert_eq!(judge(facts(0, 100, 3)).len(), 1);
        assert!(judge(facts(0, 100, 2)).is_empty());
        assert!(judge(facts(0, 1000, 3)).is_empty());
        assert!(judge(facts(0, 0, 0)).is_empty());
    }

    #[test]
    fn likely_causes_are_the_same_process_findings() {
        let other = crate::detect::evidence_golden::other;
        let mut others = vec![other(7), other(8), other(9)];
        // Another queue is no cause of this one.
        others.extend(judge(facts(1, 10, 5)));
        let found = request_queueing(&[facts(1, 10, 5)], &others, &QueueingConfig::default());
        assert_eq!(
            evidence(&found[0]).likely_causes,
            ["EventLoopBusy loop-7", "EventLoopBusy loop-9"],
            "a worker sharing the listener, not pid 8"
        );
    }
}
