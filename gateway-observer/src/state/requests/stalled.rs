//! Per process, the inbound requests waiting inside it and what tells whether it still serves
//! (answers since the oldest arrived, requests waiting upstream): the facts `RequestsStalled`
//! judges. Thread states and CPU are the collector's to add.

use std::collections::BTreeMap;

use super::RequestTracker;
use super::stats::Side;
use crate::detect::stalled::{StallFacts, StalledConfig, WaitingRequest};

impl RequestTracker {
    /// Processes with at least one inbound request waiting: read in full, no response begun, and
    /// nothing read on its connection for `config.age` (a client still sending is not waited on).
    pub fn stall_facts(&self, now_ns: u64, config: &StalledConfig) -> Vec<StallFacts> {
        let age = config.age_ns();
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
                        self.stats.answered_since(facts.pid, since, config.prompt_ns());
                }
                facts
            })
            .collect()
    }
}
