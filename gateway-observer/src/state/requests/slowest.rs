//! The slowest recent inbound requests, each with where its time went: waiting in the socket,
//! the gateway's own work before it called an upstream, the upstream, and writing the response.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::FastHash;

use gateway_observer_http::redact::RequestPath;
use serde::Serialize;

/// Requests listed.
pub const SLOWEST: usize = 20;
/// How long a request stays in the list.
const KEEP_NS: u64 = 60_000_000_000;
/// Upstream exchanges kept per process to explain slow requests (the newest few seconds).
const UPSTREAM_MEMORY: usize = 4096;
const UPSTREAM_KEEP_NS: u64 = 5_000_000_000;
/// How long a peer's last answer is remembered: long enough that a peer silent for minutes is
/// still known to have answered before, bounded so churning peers are forgotten.
const LAST_ANSWER_KEEP_NS: u64 = 600_000_000_000;

/// An upstream exchange, as far as a slow request's breakdown needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamCall {
    /// The thread that wrote the request upstream.
    #[serde(skip)]
    pub tid: u32,
    pub peer: Arc<str>,
    pub status: Option<u16>,
    #[serde(skip)]
    pub request_start_ns: u64,
    #[serde(skip)]
    pub response_end_ns: u64,
}

/// Where a slow request's time went (seconds); `None` where it cannot be told.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Breakdown {
    pub socket_queue_seconds: Option<f64>,
    /// From reading the request to writing the first byte to the upstream.
    pub before_upstream_seconds: Option<f64>,
    /// From writing to the upstream to its response being read in full.
    pub upstream_seconds: Option<f64>,
    /// From the first response byte written to the last.
    pub response_write_seconds: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowRequest {
    pub pid: u32,
    pub process: String,
    pub thread: u32,
    pub method: &'static str,
    pub path: String,
    pub status: Option<u16>,
    pub duration_seconds: f64,
    /// Seconds since it completed.
    pub age_seconds: f64,
    pub breakdown: Breakdown,
    pub upstream: Option<UpstreamCall>,
    #[serde(skip)]
    pub end_ns: u64,
}

/// What the tracker hands over about a finished inbound request.
pub struct Finished<'a> {
    pub pid: u32,
    pub process: &'a str,
    pub thread: u32,
    pub method: &'static str,
    pub path: &'a RequestPath,
    pub status: Option<u16>,
    pub queued_since_ns: Option<u64>,
    pub request_start_ns: u64,
    pub response_start_ns: Option<u64>,
    pub response_end_ns: u64,
}

#[derive(Debug, Default)]
pub struct Slowest {
    list: Vec<SlowRequest>,
    upstream: HashMap<u32, VecDeque<UpstreamCall>, FastHash>,
    /// When each process's peer last completed a response: (pid → peer → ns).
    last_answer: HashMap<u32, HashMap<Arc<str>, u64, FastHash>, FastHash>,
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Slowest {
    pub fn upstream_finished(&mut self, pid: u32, call: UpstreamCall) {
        if call.status.is_some() {
            let answers = self.last_answer.entry(pid).or_default();
            match answers.get_mut(&*call.peer) {
                Some(at) => *at = (*at).max(call.response_end_ns),
                None => {
                    answers.insert(call.peer.clone(), call.response_end_ns);
                }
            }
        }
        let calls = self.upstream.entry(pid).or_default();
        if calls.len() == UPSTREAM_MEMORY {
            calls.pop_front();
        }
        calls.push_back(call);
    }

    /// Considers a finished inbound request for the list.
    pub fn inbound_finished(&mut self, done: &Finished) {
        let duration = done.response_end_ns.saturating_sub(done.request_start_ns);
        let slow_enough = self.list.len() < SLOWEST
            || self.list.last().is_some_and(|fastest| seconds(duration) > fastest.duration_seconds);
        if !slow_enough {
            return;
        }
        let upstream = self.upstream_of(done);
        let breakdown = Breakdown {
            socket_queue_seconds: done.queued_since_ns.map(|q| seconds(done.request_start_ns.saturating_sub(q))),
            before_upstream_seconds: upstream
                .as_ref()
                .map(|u| seconds(u.request_start_ns.saturating_sub(done.request_start_ns))),
            upstream_seconds: upstream.as_ref().map(|u| seconds(u.response_end_ns.saturating_sub(u.request_start_ns))),
            response_write_seconds: done.response_start_ns.map(|s| seconds(done.response_end_ns.saturating_sub(s))),
        };
        self.list.push(SlowRequest {
            pid: done.pid,
            process: done.process.to_owned(),
            thread: done.thread,
            method: done.method,
            path: done.path.redacted(),
            status: done.status,
            duration_seconds: seconds(duration),
            age_seconds: 0.0,
            breakdown,
            upstream,
            end_ns: done.response_end_ns,
        });
        self.list.sort_by(|a, b| b.duration_seconds.total_cmp(&a.duration_seconds));
        self.list.truncate(SLOWEST);
    }

    /// The upstream call made for this request, a best guess from timing: of the same process's
    /// calls made after the request was read and answered before its response began, one from
    /// the thread that read it if any (event loops and thread-per-request servers make their
    /// calls there), else the one answered last before the response.
    fn upstream_of(&self, done: &Finished) -> Option<UpstreamCall> {
        let answered_by = done.response_start_ns.unwrap_or(done.response_end_ns);
        let calls = self.upstream.get(&done.pid)?;
        let candidates =
            || calls.iter().filter(|c| c.request_start_ns >= done.request_start_ns && c.response_end_ns <= answered_by);
        candidates()
            .filter(|c| c.tid == done.thread)
            .min_by_key(|c| c.request_start_ns)
            .or_else(|| candidates().max_by_key(|c| c.response_end_ns))
            .cloned()
    }

    /// Responses from `peer` to process `pid` in the last few seconds, and their p99 duration.
    pub fn peer_recent(&self, pid: u32, peer: &str) -> (usize, Option<u64>) {
        let Some(calls) = self.upstream.get(&pid) else { return (0, None) };
        let mut durations: Vec<u64> = calls
            .iter()
            .filter(|c| &*c.peer == peer && c.status.is_some())
            .map(|c| c.response_end_ns.saturating_sub(c.request_start_ns))
            .collect();
        if durations.is_empty() {
            return (0, None);
        }
        durations.sort_unstable();
        let rank = (durations.len() * 99).div_ceil(100).clamp(1, durations.len());
        (durations.len(), Some(durations[rank - 1]))
    }

    /// When `peer` last completed a response to process `pid`, within the last 10 minutes.
    pub fn peer_last_answer(&self, pid: u32, peer: &str) -> Option<u64> {
        self.last_answer.get(&pid)?.get(peer).copied()
    }

    /// Drops requests and upstream calls too old to matter and sets ages.
    pub fn expire(&mut self, now_ns: u64) {
        let forgotten = now_ns.saturating_sub(LAST_ANSWER_KEEP_NS);
        self.last_answer.retain(|_, answers| {
            answers.retain(|_, at| *at >= forgotten);
            !answers.is_empty()
        });
        self.list.retain(|r| now_ns.saturating_sub(r.end_ns) < KEEP_NS);
        for r in &mut self.list {
            r.age_seconds = seconds(now_ns.saturating_sub(r.end_ns));
        }
        let oldest = now_ns.saturating_sub(UPSTREAM_KEEP_NS);
        self.upstream.retain(|_, calls| {
            while calls.front().is_some_and(|c| c.response_end_ns < oldest) {
                calls.pop_front();
            }
            crate::heap::shrink_sparse_queue(calls);
            !calls.is_empty()
        });
    }

    pub fn list(&self) -> &[SlowRequest] {
        &self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PATH: std::sync::LazyLock<RequestPath> = std::sync::LazyLock::new(|| RequestPath::from("/x"));

    fn finished(pid: u32, start: u64, end: u64) -> Finished<'static> {
        Finished {
            pid,
            process: "gw",
            thread: pid + 1,
            method: "GET",
            path: &PATH,
            status: Some(200),
            queued_since_ns: Some(start - 2_000),
            request_start_ns: start,
            response_start_ns: Some(end - 1_000),
            response_end_ns: end,
        }
    }

    #[test]
    fn keeps_the_slowest_with_their_upstream_breakdown() {
        let mut slowest = Slowest::default();
        let call = UpstreamCall {
            tid: 2,
            peer: "10.0.0.1:80".into(),
            status: Some(200),
            request_start_ns: 1_300_000,
            response_end_ns: 9_000_000,
        };
        slowest.upstream_finished(1, call.clone());
        // Another process's call is never matched.
        slowest.upstream_finished(2, UpstreamCall { request_start_ns: 1_100_000, ..call.clone() });
        slowest.inbound_finished(&finished(1, 1_000_000, 10_000_000));
        let top = &slowest.list()[0];
        assert_eq!(top.upstream.as_ref(), Some(&call));
        let b = &top.breakdown;
        assert!((b.socket_queue_seconds.unwrap() - 2e-6).abs() < 1e-12);
        assert!((b.before_upstream_seconds.unwrap() - 0.3e-3).abs() < 1e-12);
        assert!((b.upstream_seconds.unwrap() - 7.7e-3).abs() < 1e-12);
        assert!((b.response_write_seconds.unwrap() - 1e-6).abs() < 1e-12);
        assert!((top.duration_seconds - 9e-3).abs() < 1e-12);

        for i in 0..30u64 {
            slowest.inbound_finished(&finished(3, 1_000_000, 1_000_000 + (i + 1) * 100_000));
        }
        assert_eq!(slowest.list().len(), SLOWEST);
        assert!((slowest.list()[0].duration_seconds - 9e-3).abs() < 1e-12, "the slowest stays first");
        assert!(slowest.list().windows(2).all(|w| w[0].duration_seconds >= w[1].duration_seconds));
        assert_eq!(slowest.peer_recent(1, "10.0.0.1:80"), (1, Some(7_700_000)));
        assert_eq!(slowest.peer_recent(1, "10.0.0.2:80"), (0, None));
        assert_eq!(slowest.peer_last_answer(1, "10.0.0.1:80"), Some(9_000_000));
        assert_eq!(slowest.peer_last_answer(3, "10.0.0.1:80"), None);
        slowest.expire(10_000_000 + KEEP_NS);
        assert!(slowest.list().iter().all(|r| r.end_ns > 10_000_000));
        assert_eq!(slowest.peer_last_answer(1, "10.0.0.1:80"), Some(9_000_000), "a minute on, still known");
        slowest.expire(9_000_001 + LAST_ANSWER_KEEP_NS);
        assert_eq!(slowest.peer_last_answer(1, "10.0.0.1:80"), None, "forgotten after ten");
    }
}
