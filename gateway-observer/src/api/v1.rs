//! Version 1 of the local API (README, "Local API"): `GET /api/v1/snapshot` is a [`Snapshot`],
//! `GET /api/v1/alerts` an [`Alerts`]. The daemon serializes these types and `top` deserializes
//! them, so the two cannot drift apart; `tests/data/api/v1/` holds responses recorded from the
//! daemon before it was built on them, and every one must survive a round trip unchanged.
//!
//! Reading is tolerant, writing is exact. Every struct takes a default for a field that is absent
//! and ignores fields it does not know, so `top` still renders an older or a newer daemon. A value
//! a reader may lack is an `Option` and shows as unknown ("-"), never as 0; this daemon sends every
//! field, and null only where a field's doc says so. Units are in the names (`_seconds`, `cpu` in
//! cores). Renaming, removing or retyping a field is a new version.
//!
//! Alert evidence is an object whose keys depend on the alert's kind: one type per kind
//! (`v1/evidence.rs`), which the detectors build and `top` reads back: [`Alert::evidence`] is an
//! [`AlertEvidence`], tagged by the alert's `kind` key, typed where this build knows the kind and
//! kept as sent where it does not, so `top` shows every key it finds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod evidence;
pub use evidence::*;

/// The value of [`Snapshot::version`].
pub const VERSION: u32 = 1;

/// `GET /api/v1/snapshot`: the current state of every target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    pub version: Option<u32>,
    /// Target processes and threads the kernel programs follow.
    pub targets: Option<u64>,
    pub threads: Option<u64>,
    pub event_loops: Vec<EventLoop>,
    /// Every target process, with or without HTTP traffic.
    pub processes: Vec<Process>,
    /// The slowest inbound requests of the last 60 s (20 at most), slowest first.
    pub slowest_requests: Vec<SlowRequest>,
}

/// A thread the daemon found running an event loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventLoop {
    pub pid: u32,
    pub comm: String,
    pub thread: String,
    pub tid: Option<u32>,
    /// 0..1 over the daemon's window.
    pub utilization: Option<f64>,
}

/// One target process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    /// Cores used over the last interval (0.35); null until the daemon has two readings.
    pub cpu: Option<f64>,
    /// Threads by group and state, now.
    pub thread_groups: Vec<ThreadGroup>,
    pub inbound: Window,
    pub outbound: Window,
    pub in_flight: Option<u64>,
    /// The oldest requests in flight, oldest first.
    pub in_flight_oldest: Vec<InFlight>,
    pub upstreams: Vec<Upstream>,
    /// Its listening ports with their accept queues and requests waiting unread.
    pub listeners: Vec<Listener>,
}

/// Threads of one group (`pool-3-thread-*`) by state, now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadGroup {
    #[serde(alias = "thread_group", alias = "group")]
    pub name: String,
    pub threads: Option<u64>,
    pub running: Option<u64>,
    pub runnable: Option<u64>,
    pub blocked: Option<u64>,
    pub idle: Option<u64>,
    /// Off-CPU seconds in work per reason over the window (socket, sleep, futex_timed…). Not sent
    /// by this daemon yet (nor written when empty): `top` has a column waiting for it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub blocked_seconds_by_reason: BTreeMap<String, f64>,
    /// Cores the group used. Not sent by this daemon yet (nor written when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
}

impl ThreadGroup {
    pub fn blocked_seconds(&self) -> f64 {
        self.blocked_seconds_by_reason.values().sum()
    }
}

/// Rate and latency of one direction (inbound: served; outbound: sent upstream) over the last
/// 10 s.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Window {
    pub requests: Option<u64>,
    pub per_second: Option<f64>,
    /// 5xx responses, or connections closed before a response.
    pub refused: Option<u64>,
    pub p50_seconds: Option<f64>,
    pub p90_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
    pub max_seconds: Option<f64>,
}

/// A request the gateway has read and not yet answered in full.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InFlight {
    /// The thread that read it.
    pub thread: Option<u32>,
    /// Null once the thread is gone.
    pub thread_name: Option<String>,
    pub method: String,
    /// The route only: query, fragment and `;` parameters cut, identifiers and tokens `{id}`.
    pub path: String,
    pub age_seconds: Option<f64>,
    /// How long its first bytes waited in the socket; null where that is not known.
    pub socket_queue_seconds: Option<f64>,
    pub response_started: Option<bool>,
}

/// An upstream peer of one process, now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Upstream {
    /// `ip:port`.
    pub peer: String,
    pub connections: Option<u64>,
    /// Requests written and not answered in full.
    pub outstanding: Option<u64>,
    pub oldest_age_seconds: Option<f64>,
    /// Retransmits on its open connections.
    pub retransmits: Option<u64>,
    /// Connections whose bytes flow one way only (sent, nothing back).
    pub one_way: Option<u64>,
}

/// A port the process listens on, now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Listener {
    pub port: u16,
    /// Connections handshaken and not yet accepted.
    pub accept_queue: Option<u64>,
    /// Connections holding request bytes unread past the RequestQueueing threshold.
    pub waiting: Option<u64>,
    pub oldest_unread_seconds: Option<f64>,
}

/// A slow inbound request of the last 60 s, with where its time went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlowRequest {
    pub pid: u32,
    /// The process's comm.
    pub process: String,
    pub thread: Option<u32>,
    pub method: String,
    pub path: String,
    /// Null when the connection closed before a response.
    pub status: Option<u16>,
    pub duration_seconds: Option<f64>,
    /// Seconds since it completed.
    pub age_seconds: Option<f64>,
    pub breakdown: Breakdown,
    /// The upstream exchange it waited on; null when it made none the daemon saw.
    pub upstream: Option<UpstreamCall>,
}

/// Where a slow request's time went; null where it cannot be told.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Breakdown {
    /// Waiting in the socket before the gateway read it.
    pub socket_queue_seconds: Option<f64>,
    /// From reading the request to writing the first byte to the upstream.
    pub before_upstream_seconds: Option<f64>,
    /// From writing to the upstream to its response being read in full.
    pub upstream_seconds: Option<f64>,
    /// From the first response byte written to the last.
    pub response_write_seconds: Option<f64>,
}

/// The upstream exchange behind a slow request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamCall {
    pub peer: String,
    /// Null when the upstream gave no response the daemon read.
    pub status: Option<u16>,
}

/// `GET /api/v1/alerts`: every alert pending, firing, or resolved in the last 10 minutes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Alerts {
    pub alerts: Vec<Alert>,
}

/// One alert. Kind and state are strings on the wire, not enums, so a reader lists kinds it does
/// not know; the evidence is typed by the kind ([`AlertEvidence`]). Written through [`WireAlert`],
/// in the order its keys have always had.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "WireAlert", into = "WireAlert")]
pub struct Alert {
    /// `{kind}/{pid}/{subject}`, stable across pending, firing, resolved and firing again.
    pub id: String,
    /// `pending`, `firing` or `resolved`.
    pub state: String,
    /// When the condition was first seen: RFC 3339 UTC with milliseconds.
    pub since: Option<String>,
    /// Null until resolved.
    pub resolved_at: Option<String>,
    pub process: AlertProcess,
    /// Thread name, thread group, peer `ip:port`, or `inbound`.
    pub subject: String,
    /// One line, human readable.
    pub summary: String,
    /// The kind (`EventLoopBlocked`, `PoolSaturated`, …: the `kind` key) and its kind-specific
    /// object (the `evidence` key). Stacks in it are arrays of frame names, innermost first
    /// (`EventLoopBlocked`'s `stack`, with `stack_source` `live` or `kernel`), and `PoolSaturated`'s
    /// `waiting_at` an array of `{"threads": N, "frames": [...]}`; a frame never holds an address.
    pub evidence: AlertEvidence,
}

/// An [`Alert`] as written: its evidence tagged by the `kind` key beside it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct WireAlert {
    id: String,
    kind: String,
    state: String,
    since: Option<String>,
    resolved_at: Option<String>,
    process: AlertProcess,
    subject: String,
    summary: String,
    evidence: serde_json::Value,
}

impl From<WireAlert> for Alert {
    fn from(w: WireAlert) -> Self {
        Self {
            id: w.id,
            state: w.state,
            since: w.since,
            resolved_at: w.resolved_at,
            process: w.process,
            subject: w.subject,
            summary: w.summary,
            evidence: AlertEvidence::from_wire(w.kind, w.evidence),
        }
    }
}

impl From<Alert> for WireAlert {
    fn from(a: Alert) -> Self {
        Self {
            id: a.id,
            kind: a.evidence.kind().to_owned(),
            state: a.state,
            since: a.since,
            resolved_at: a.resolved_at,
            process: a.process,
            subject: a.subject,
            summary: a.summary,
            evidence: a.evidence.to_json(),
        }
    }
}

/// A place where threads of a pool wait, in `PoolSaturated`'s `waiting_at`: how many threads
/// and the frames they share, innermost first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WaitingGroup {
    pub threads: usize,
    pub frames: Vec<String>,
}

impl Alert {
    /// `EventLoopBlocked`, `PoolSaturated`, …: the evidence's kind.
    pub fn kind(&self) -> &str {
        self.evidence.kind()
    }

    /// Pending or firing.
    pub fn is_open(&self) -> bool {
        self.state != "resolved"
    }

    /// Firing first, then pending, then states this build does not know, then resolved.
    pub fn state_rank(&self) -> u8 {
        match self.state.as_str() {
            "firing" => 0,
            "pending" => 1,
            "resolved" => 3,
            _ => 2,
        }
    }
}

/// The process an alert is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AlertProcess {
    pub pid: u32,
    pub comm: String,
}

/// A response body. Serializing these types cannot fail (string keys only, no serializer of
/// our own that errs; non-finite floats are written as null); should that change, the body says
/// so as JSON instead of the tick that publishes it stopping.
pub fn body<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"error\":{}}}", serde_json::Value::from(format!("cannot serialize: {e}"))))
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::Value;

    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/api/v1");
    const PHASES: [&str; 4] = ["healthy", "blocked", "pool", "upstream"];

    fn fixture(name: &str) -> Value {
        let path = format!("{FIXTURES}/{name}");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The first place where `a` and `b` differ, as a JSON path, with both values.
    fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                keys.into_iter().find_map(|k| {
                    let (va, vb) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                    match (x.contains_key(k), y.contains_key(k)) {
                        (true, true) => first_difference(&format!("{path}.{k}"), va, vb),
                        (had, _) => Some(format!("{path}.{k}: only in the {}", if had { "fixture" } else { "typed" })),
                    }
                })
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                x.iter().zip(y).enumerate().find_map(|(i, (va, vb))| first_difference(&format!("{path}[{i}]"), va, vb))
            }
            _ if a == b => None,
            _ => Some(format!("{path}: fixture {a} != typed {b}")),
        }
    }

    /// Fixture → typed → JSON must give the fixture back: same fields, nesting and number types
    /// (an integer read into an f64 would come back as `1.0`).
    fn round_trip<T: Serialize + DeserializeOwned>(name: &str, recorded: Value) -> T {
        let typed: T = serde_json::from_value(recorded.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let back = serde_json::from_str::<Value>(&body(&typed)).expect("the body is JSON");
        if let Some(difference) = first_difference("", &recorded, &back) {
            panic!("{name} does not survive the round trip: {difference}");
        }
        typed
    }

    #[test]
    fn recorded_snapshots_round_trip() {
        for phase in PHASES {
            let name = format!("{phase}_snapshot.json");
            let snapshot: Snapshot = round_trip(&name, fixture(&name));
            assert_eq!(snapshot.version, Some(VERSION), "{name}");
            let process = snapshot.processes.first().unwrap_or_else(|| panic!("{name}: no process"));
            assert_eq!(process.comm, "reference-gatew", "{name}");
            assert!(!process.thread_groups.is_empty() && !process.listeners.is_empty(), "{name}: {process:?}");
            assert!(process.inbound.requests.is_some_and(|n| n > 0), "{name}: {:?}", process.inbound);
            assert!(!snapshot.slowest_requests.is_empty(), "{name}");
        }
    }

    #[test]
    fn recorded_alerts_round_trip() {
        let mut kinds = std::collections::BTreeSet::new();
        for phase in PHASES {
            let name = format!("{phase}_alerts.json");
            let alerts: Alerts = round_trip(&name, fixture(&name));
            for alert in &alerts.alerts {
                let typed = matches!(alert.evidence, AlertEvidence::Typed(_));
                assert!(typed, "{name}: {}'s evidence does not read as its kind's type", alert.id);
            }
            kinds.extend(alerts.alerts.into_iter().map(|a| (a.kind().to_owned(), a.state)));
        }
        let kinds: Vec<(&str, &str)> = kinds.iter().map(|(k, s)| (k.as_str(), s.as_str())).collect();
        for expected in [
            ("EventLoopBlocked", "firing"),
            ("EventLoopBlocked", "resolved"),
            ("PoolSaturated", "firing"),
            ("RequestQueueing", "resolved"),
            ("UpstreamNoResponse", "firing"),
        ] {
            assert!(kinds.contains(&expected), "the fixtures hold no {expected:?}: {kinds:?}");
        }
    }

    #[test]
    fn evidence_its_type_does_not_hold_whole_is_kept_as_sent() {
        let mut alert = fixture("blocked_alerts.json")["alerts"][0].take();
        alert["evidence"]["from_a_newer_daemon"] = Value::from(1);
        let newer: Alert = round_trip("newer evidence", alert.clone());
        assert!(matches!(newer.evidence, AlertEvidence::Untyped { .. }), "{newer:?}");
        let typed = newer.evidence.typed().expect("still read as its kind's type");
        assert_eq!((typed.kind().as_str(), newer.kind()), ("EventLoopBlocked", "EventLoopBlocked"));
        alert["kind"] = Value::from("NewKind");
        let unknown: Alert = round_trip("unknown kind", alert);
        assert_eq!(unknown.kind(), "NewKind");
        assert!(unknown.evidence.typed().is_none());
    }

    /// The daemon's stdout transitions carry the same alert object.
    #[test]
    fn recorded_transitions_carry_v1_alerts() {
        let path = format!("{FIXTURES}/transitions.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(text.lines().count() >= 10, "{path}: too few lines");
        for (i, line) in text.lines().enumerate() {
            let mut line: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
            let _: Alert = round_trip(&format!("transitions.jsonl:{} alert", i + 1), line["alert"].take());
        }
    }

    #[test]
    fn fields_this_daemon_does_not_send_are_not_written() {
        let group = ThreadGroup { name: "w-*".into(), threads: Some(2), ..ThreadGroup::default() };
        let json = serde_json::to_value(&group).expect("serializes");
        let keys: Vec<&str> = json.as_object().expect("object").keys().map(String::as_str).collect();
        assert!(!keys.contains(&"cpu") && !keys.contains(&"blocked_seconds_by_reason"), "{keys:?}");
        assert_eq!(json["idle"], Value::Null, "a field it sends is written, null when unknown");
    }

    #[test]
    fn a_body_is_json_even_for_non_finite_numbers() {
        let window = Window { per_second: Some(f64::NAN), p99_seconds: Some(f64::INFINITY), ..Window::default() };
        let back: Value = serde_json::from_str(&body(&window)).expect("JSON");
        assert_eq!((&back["per_second"], &back["p99_seconds"]), (&Value::Null, &Value::Null));
    }
}
