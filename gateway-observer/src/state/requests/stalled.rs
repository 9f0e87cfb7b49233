//! Per process, the inbound requests waiting inside it and what tells whether it still serves
//! (answers since the oldest arrived, requests waiting upstream): the facts `RequestsStalled`
//! judges. Thread states and CPU are the collector's to add.

use std::collections::BTreeMap;

use super::RequestTracker;
use super::stats::Side;

impl RequestTracker {
    /// Processes with at least one inbound request waiting: read in full, no response begun, and
    /// nothing read on its connection for `age_ns` (a client still sending is not waited on).
    /// Answers within `prompt_ns` of their request are counted apart.
    pub fn stall_facts(&self, now_ns: u64, age_ns: u64, prompt_ns: u64) -> Vec<StallFacts> {
        let age = age_ns;
        let mut by_pid: BTreeMap<u32, StallFacts> = BTreeMap::new();
        for conn in self.conns.values() {
            let (Some(tgid), Some(side), Some(http)) = (conn.tgid, conn.side, &conn.http) else { continue };
            // Upgraded and non-HTTP streams pause for their own reasons.
            if !http.exchanges_requests() {
                continue;
            }
            let facts = by_pid.entry(tgid).or_insert_with(|| StallFacts {
                pid: tgid,
                comm: self.process_name(tgid).to_string(),
                ..StallFacts::default()
            });
            let unanswered = http
                .in_flight()
                .filter(|r| !r.response_started)
                .map(|r| (r, now_ns.saturating_sub(r.request_start_ns)))
                .filter(|(_, waited)| *waited >= age);
            match side {
                Side::Outbound => facts.upstream_waiting += unanswered.count(),
                Side::Inbound => {
                    facts.in_flight += http.in_flight().count();
                    if now_ns.saturating_sub(conn.last_read_ns) < age {
                        continue;
                    }
                    facts.waiting.extend(
                        unanswered.filter(|(r, _)| r.request_complete).map(|(r, age_ns)| WaitingRequest {
                            tid: r.tid,
                            age_ns,
                            reader_blocked_in_work: false,
                        }),
                    );
                }
            }
        }
        by_pid
            .into_values()
            .filter(|facts| !facts.waiting.is_empty())
            .map(|mut facts| {
                if let Some(since) = facts.oldest_waiting_start_ns(now_ns) {
                    (facts.answered_since, facts.prompt_answers) =
                        self.stats.answered_since(facts.pid, since, prompt_ns);
                }
                facts
            })
            .collect()
    }
}

/// An inbound request read in full, with no response begun and nothing read on its connection for
/// at least the age threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingRequest {
    /// The thread that read it.
    pub tid: u32,
    pub age_ns: u64,
    /// That thread is off the CPU in work now (a sleep, socket or disk wait): the request is being
    /// worked on, slowly, which the pool and loop detectors judge.
    pub reader_blocked_in_work: bool,
}

/// One process's inbound requests now, as this detector judges them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StallFacts {
    pub pid: u32,
    pub comm: String,
    /// Inbound requests read and not answered in full.
    pub in_flight: usize,
    pub waiting: Vec<WaitingRequest>,
    /// Requests the process sent upstream, unanswered for at least the age threshold.
    pub upstream_waiting: usize,
    /// Inbound requests that arrived after the oldest waiting one and were answered, and of them
    /// those answered within `prompt`.
    pub answered_since: u64,
    pub prompt_answers: u64,
    /// Cores the process used over the last tick; None until measured twice.
    pub cpu_cores: Option<f64>,
}

impl StallFacts {
    /// Waiting requests no thread is blocked in work for: held by the process itself.
    pub fn held(&self) -> impl Iterator<Item = &WaitingRequest> {
        self.waiting.iter().filter(|w| !w.reader_blocked_in_work)
    }

    /// The start of the oldest waiting request, `now_ns` being now: answers to requests that
    /// arrived after it tell whether the process still serves.
    pub fn oldest_waiting_start_ns(&self, now_ns: u64) -> Option<u64> {
        self.waiting.iter().map(|w| now_ns.saturating_sub(w.age_ns)).min()
    }
}
