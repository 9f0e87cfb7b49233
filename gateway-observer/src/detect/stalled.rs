//! `RequestsStalled`: requests the process has read keep aging without a response while the
//! process idles: little CPU, the threads that read them waiting for work rather than blocked in
//! it, nothing outstanding upstream, and no newer request answered promptly. Requests queued
//! behind one lock in a runtime that parks them (Go's goroutines on a `sync.Mutex`, async tasks
//! on an async lock or semaphore) look like this: no thread is busy or blocked, so no other
//! detector has anything to name, yet clients wait. Judged from `StallFacts`, which the request
//! tracker and the collector gather each tick; nothing here touches the kernel.
//!
//! Why each condition, and the defaults (config `[requests_stalled]`):
//! - `age` 500 ms: a request read in full, with no response begun and nothing read on its
//!   connection since, is waiting once it is this old. Healthy gateways answer in milliseconds;
//!   half a second is what a user notices, and short enough to name a stall within about two
//!   ticks.
//! - `min_requests` 4: one or two slow requests are an endpoint's business; several waiting at
//!   once is the process holding its clients.
//! - `prompt` 100 ms: one answer that fast to a request that arrived after the oldest waiting one
//!   proves the process serves new requests while the old ones wait for their own reasons
//!   (long-poll, a slow-by-design endpoint, a request among many fast ones), so nothing fires.
//!   A process that serialises its requests answers none that fast once a queue has formed.
//! - `max_cpu_cores` 0.5: a process using half a core or more is working; CPU-bound overload is
//!   for the busy-loop and pool detectors (and shows on CPU graphs).
//! - Requests the process sent upstream that are unanswered for `age` mean the wait is the
//!   upstream's (UpstreamNoResponse names it past its own threshold): nothing fires.
//! - What the other detectors name does not hold this one back (a false one would hide a real
//!   stall); the conditions above already leave out what they name: a busy loop uses CPU, a
//!   thread blocked in work holds its request, an upstream holds its callers. The process's other
//!   alerts now are listed in the evidence (`other_alerts`).
//!
//! Not judged: requests whose response has started (server-sent events, streams), upgraded
//! connections (websockets), requests still being received (uploads, stalled clients). A server
//! of long-polls only, with no other traffic, looks stalled by this definition while its polls
//! wait; any prompt answer (a health check) is enough to tell it apart.

use std::{collections::BTreeSet, time::Duration};

use serde::Deserialize;

pub use crate::state::requests::stalled::{StallFacts, WaitingRequest};
use crate::{
    api::v1,
    detect::finding::{AlertKind, Finding},
};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StalledConfig {
    /// A request unanswered and silent this long is waiting.
    #[serde(with = "humantime_serde")]
    pub age: Duration,
    /// Waiting requests at once that make a stall.
    pub min_requests: usize,
    /// An answer this fast to a newer request shows the process still serves.
    #[serde(with = "humantime_serde")]
    pub prompt: Duration,
    /// The process idles below this many cores.
    pub max_cpu_cores: f64,
}

impl Default for StalledConfig {
    fn default() -> Self {
        Self {
            age: Duration::from_millis(500),
            min_requests: 4,
            prompt: Duration::from_millis(100),
            max_cpu_cores: 0.5,
        }
    }
}

impl StalledConfig {
    /// Why the values cannot work, if they cannot.
    pub fn problem(&self) -> Option<String> {
        if self.age < Duration::from_millis(100) {
            return Some(format!("age {:?} is below 100ms: healthy requests would count as waiting", self.age));
        }
        if self.min_requests == 0 {
            return Some("min_requests must be at least 1".to_owned());
        }
        if self.prompt.is_zero() || self.prompt >= self.age {
            return Some(format!("prompt {:?} must be above zero and below age {:?}", self.prompt, self.age));
        }
        if !(self.max_cpu_cores.is_finite() && self.max_cpu_cores > 0.0) {
            return Some(format!("max_cpu_cores {} must be a positive number", self.max_cpu_cores));
        }
        None
    }

    pub fn age_ns(&self) -> u64 {
        u64::try_from(self.age.as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn prompt_ns(&self) -> u64 {
        u64::try_from(self.prompt.as_nanos()).unwrap_or(u64::MAX)
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Whether `facts` is a stall that nothing else explains.
fn stalled(facts: &StallFacts, config: &StalledConfig) -> bool {
    facts.held().count() >= config.min_requests
        && facts.upstream_waiting == 0
        && facts.prompt_answers == 0
        && facts.cpu_cores.is_some_and(|cores| cores < config.max_cpu_cores)
}

/// Findings for the processes whose requests stall now; `others` are this tick's findings of the
/// other detectors, listed in the evidence of their process.
pub fn requests_stalled(all: &[StallFacts], others: &[Finding], config: &StalledConfig) -> Vec<Finding> {
    all.iter()
        .filter(|facts| stalled(facts, config))
        .map(|facts| {
            let mine: Vec<String> = others
                .iter()
                .filter(|o| o.pid == facts.pid && o.active && o.kind() != AlertKind::RequestsStalled)
                .map(|o| format!("{} {}", o.kind(), o.subject))
                .collect();
            finding(facts, mine, config)
        })
        .collect()
}

fn finding(facts: &StallFacts, other_alerts: Vec<String>, config: &StalledConfig) -> Finding {
    let held: Vec<&WaitingRequest> = facts.held().collect();
    let oldest = held.iter().map(|w| w.age_ns).max().unwrap_or(0);
    let threads: BTreeSet<u32> = held.iter().map(|w| w.tid).collect();
    let cores = facts.cpu_cores.unwrap_or(0.0);
    let summary = format!(
        "{} request(s) read and unanswered for up to {:.1}s while the process idles ({cores:.2} cores, \
         no thread blocked in work for them, nothing waiting upstream); {} answered since the oldest arrived, \
         none within {}ms",
        held.len(),
        secs(oldest),
        facts.answered_since,
        config.prompt.as_millis()
    );
    Finding {
        pid: facts.pid,
        comm: facts.comm.clone(),
        subject: "inbound".to_owned(),
        summary,
        evidence: v1::Evidence::RequestsStalled(v1::RequestsStalled {
            waiting: held.len(),
            oldest_waiting_seconds: secs(oldest),
            age_threshold_seconds: config.age.as_secs_f64(),
            reading_threads: threads,
            in_flight: facts.in_flight,
            answered_since_oldest: facts.answered_since,
            prompt_threshold_seconds: config.prompt.as_secs_f64(),
            cpu_cores: cores,
            upstream_waiting: facts.upstream_waiting,
            other_alerts,
            requests: None,
            refusals: None,
        }),
        // Waiting requests and their ages are facts of now.
        active: true,
        held_for: std::time::Duration::ZERO,
        stack_id: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const MS: u64 = 1_000_000;

    fn waiting(n: u32, age_ms: u64) -> Vec<WaitingRequest> {
        (0..n)
            .map(|i| WaitingRequest {
                tid: 100 + i % 3,
                age_ns: (age_ms + u64::from(i) * 100) * MS,
                reader_blocked_in_work: false,
            })
            .collect()
    }

    /// The Go mutex shape: 16 requests in flight, every one read at once and waiting 0.6–2.1 s,
    /// one answered every 100 ms (never promptly), the process at 1 % of a core.
    fn queued_behind_a_lock() -> StallFacts {
        StallFacts {
            pid: 7,
            comm: "go-gateway".into(),
            in_flight: 16,
            waiting: waiting(16, 600),
            upstream_waiting: 0,
            answered_since: 20,
            prompt_answers: 0,
            cpu_cores: Some(0.01),
        }
    }

    fn judge(facts: StallFacts) -> Vec<Finding> {
        requests_stalled(&[facts], &[], &StalledConfig::default())
    }

    #[test]
    fn requests_queued_behind_a_lock_in_an_idle_process_are_stalled() {
        let found = judge(queued_behind_a_lock());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!((f.kind(), f.subject.as_str(), f.pid, f.active), (AlertKind::RequestsStalled, "inbound", 7, true));
        assert_eq!(f.evidence.to_json()["waiting"], 16);
        assert!(
            (f.evidence.to_json()["oldest_waiting_seconds"].as_f64().unwrap() - 2.1).abs() < 1e-9,
            "{:?}",
            f.evidence
        );
        assert_eq!(f.evidence.to_json()["reading_threads"], json!([100, 101, 102]));
        assert_eq!(f.evidence.to_json()["answered_since_oldest"], 20);
        assert!(f.summary.starts_with("16 request(s) read and unanswered for up to 2.1s"), "{}", f.summary);
    }

    #[test]
    fn fewer_waiting_requests_than_the_minimum_are_an_endpoints_business() {
        // One slow request among fast ones, or three: not a stall.
        let facts = StallFacts { in_flight: 3, waiting: waiting(3, 5_000), ..queued_behind_a_lock() };
        assert!(judge(facts).is_empty());
    }

    #[test]
    fn a_prompt_answer_to_a_newer_request_means_the_process_serves() {
        // Long-polls or slow-by-design requests waiting while other requests are answered at once.
        let facts = StallFacts { prompt_answers: 1, waiting: waiting(10, 30_000), ..queued_behind_a_lock() };
        assert!(judge(facts).is_empty());
    }

    #[test]
    fn requests_waiting_for_an_upstream_are_the_upstreams() {
        // The reference gateway proxying to a slow or silent upstream: its requests wait upstream.
        let facts = StallFacts { upstream_waiting: 16, ..queued_behind_a_lock() };
        assert!(judge(facts).is_empty());
        let one_slow_call = StallFacts { upstream_waiting: 1, ..queued_behind_a_lock() };
        assert!(judge(one_slow_call).is_empty(), "any request waiting upstream may be what the others wait for");
    }

    #[test]
    fn a_busy_process_or_one_not_yet_measured_is_not_idle() {
        assert!(judge(StallFacts { cpu_cores: Some(0.9), ..queued_behind_a_lock() }).is_empty());
        assert!(judge(StallFacts { cpu_cores: None, ..queued_behind_a_lock() }).is_empty());
    }

    #[test]
    fn requests_whose_threads_are_blocked_in_work_are_being_worked_on() {
        // A thread per request, each in a slow sleep or socket read: the pool detector's to judge.
        let mut facts = queued_behind_a_lock();
        for w in facts.waiting.iter_mut().skip(2) {
            w.reader_blocked_in_work = true;
        }
        assert!(judge(facts.clone()).is_empty(), "2 held by the process, 14 by blocked threads");
        for w in facts.waiting.iter_mut().take(6) {
            w.reader_blocked_in_work = false;
        }
        assert_eq!(judge(facts).first().map(|f| f.evidence.to_json()["waiting"].clone()), Some(json!(6)));
    }

    #[test]
    fn the_processs_other_alerts_are_listed_not_obeyed() {
        let other = |kind, pid, active, subject: &str| Finding {
            pid,
            active,
            subject: subject.into(),
            ..crate::detect::evidence_golden::bare(kind)
        };
        let others = [
            other(AlertKind::EventLoopBlocked, 7, true, "go-gateway#3"),
            other(AlertKind::PoolSaturated, 7, false, "that ended"),
            other(AlertKind::EventLoopBlocked, 8, true, "another process"),
        ];
        let found = requests_stalled(&[queued_behind_a_lock()], &others, &StalledConfig::default());
        assert_eq!(found.len(), 1, "another detector's finding does not hide the stall");
        assert_eq!(found[0].evidence.to_json()["other_alerts"], json!(["EventLoopBlocked go-gateway#3"]));
    }

    #[test]
    fn a_burst_that_drained_leaves_nothing_waiting() {
        // The requests of a burst were answered: in flight and waiting are back to none.
        let drained = StallFacts { in_flight: 1, waiting: Vec::new(), answered_since: 0, ..queued_behind_a_lock() };
        assert!(judge(drained).is_empty());
    }

    #[test]
    fn the_oldest_waiting_request_started_first() {
        let facts = queued_behind_a_lock();
        assert_eq!(facts.oldest_waiting_start_ns(10_000 * MS), Some((10_000 - 2_100) * MS));
        assert_eq!(StallFacts::default().oldest_waiting_start_ns(5), None);
    }

    #[test]
    fn config_problems_are_named() {
        assert_eq!(StalledConfig::default().problem(), None);
        let short = StalledConfig { age: Duration::from_millis(50), ..StalledConfig::default() };
        assert!(short.problem().unwrap().contains("below 100ms"));
        let prompt = StalledConfig { prompt: Duration::from_secs(1), ..StalledConfig::default() };
        assert!(prompt.problem().unwrap().contains("below age"));
        let none = StalledConfig { min_requests: 0, ..StalledConfig::default() };
        assert!(none.problem().unwrap().contains("min_requests"));
        let cpu = StalledConfig { max_cpu_cores: f64::NAN, ..StalledConfig::default() };
        assert!(cpu.problem().unwrap().contains("max_cpu_cores"));
    }
}
