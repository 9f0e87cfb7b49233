//! What each alert kind shows as evidence: one serde type per kind, built by its detector
//! (`detect/`), with the parts the tick adds afterwards (stacks, Java frames, what clients went
//! through) as optional fields the collector fills. On the wire an alert's evidence is an
//! [`AlertEvidence`], tagged by the alert's `kind` key; its object is written through
//! `serde_json::Value` ([`Evidence::to_json`]), so its keys come out sorted, as before they were
//! typed. `top` reads alerts back through these types, and `evidence_golden` holds every kind to
//! its recorded shape, and to reading back as it was written.
//!
//! Fields that are absent until the tick adds them skip serializing when `None`; fields every
//! finding of the kind carries serialize as `null` when unknown.

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    fmt,
};

use serde::{Deserialize, Serialize};

use crate::api::v1;

/// The detector that raised an alert. Its name (the variant name) appears in ids, JSON and metric
/// labels, so renaming a variant is an API change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AlertKind {
    EventLoopBlocked,
    EventLoopBusy,
    PoolSaturated,
    UpstreamNoResponse,
    OneWayStall,
    RequestQueueing,
    RequestsStalled,
    JvmPause,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EventLoopBlocked => "EventLoopBlocked",
            Self::EventLoopBusy => "EventLoopBusy",
            Self::PoolSaturated => "PoolSaturated",
            Self::UpstreamNoResponse => "UpstreamNoResponse",
            Self::OneWayStall => "OneWayStall",
            Self::RequestQueueing => "RequestQueueing",
            Self::RequestsStalled => "RequestsStalled",
            Self::JvmPause => "JvmPause",
        }
    }

    /// Kinds whose condition is itself a duration held, measured from the events (a request's
    /// age, how long a flow has retransmitted into silence): the detector's threshold has
    /// already shown it ongoing for that long, so they fire without a pending time of their own.
    pub fn holds_its_own_duration(self) -> bool {
        matches!(self, Self::UpstreamNoResponse | Self::OneWayStall)
    }
}

impl fmt::Display for AlertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding's evidence, by alert kind; serialized as the kind's object alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    EventLoopBlocked(EventLoopBlocked),
    EventLoopBusy(EventLoopBusy),
    PoolSaturated(PoolSaturated),
    UpstreamNoResponse(UpstreamNoResponse),
    OneWayStall(OneWayStall),
    RequestQueueing(RequestQueueing),
    RequestsStalled(RequestsStalled),
    JvmPause(JvmPause),
}

impl Evidence {
    /// The alert kind whose evidence this is.
    pub fn kind(&self) -> AlertKind {
        match self {
            Self::EventLoopBlocked(_) => AlertKind::EventLoopBlocked,
            Self::EventLoopBusy(_) => AlertKind::EventLoopBusy,
            Self::PoolSaturated(_) => AlertKind::PoolSaturated,
            Self::UpstreamNoResponse(_) => AlertKind::UpstreamNoResponse,
            Self::OneWayStall(_) => AlertKind::OneWayStall,
            Self::RequestQueueing(_) => AlertKind::RequestQueueing,
            Self::RequestsStalled(_) => AlertKind::RequestsStalled,
            Self::JvmPause(_) => AlertKind::JvmPause,
        }
    }

    /// An alert's evidence read back as its kind's type (`top` does), or `None` for a kind this
    /// build does not know or an object without a field the type needs (an older daemon's).
    /// Fields it does not know (a newer daemon's) are ignored.
    pub fn from_json(kind: &str, evidence: &serde_json::Value) -> Option<Self> {
        use serde::de::{IntoDeserializer, value::Error};
        let kind = AlertKind::deserialize(IntoDeserializer::<Error>::into_deserializer(kind)).ok()?;
        let typed = match kind {
            AlertKind::EventLoopBlocked => Deserialize::deserialize(evidence).map(Self::EventLoopBlocked),
            AlertKind::EventLoopBusy => Deserialize::deserialize(evidence).map(Self::EventLoopBusy),
            AlertKind::PoolSaturated => Deserialize::deserialize(evidence).map(Self::PoolSaturated),
            AlertKind::UpstreamNoResponse => Deserialize::deserialize(evidence).map(Self::UpstreamNoResponse),
            AlertKind::OneWayStall => Deserialize::deserialize(evidence).map(Self::OneWayStall),
            AlertKind::RequestQueueing => Deserialize::deserialize(evidence).map(Self::RequestQueueing),
            AlertKind::RequestsStalled => Deserialize::deserialize(evidence).map(Self::RequestsStalled),
            AlertKind::JvmPause => Deserialize::deserialize(evidence).map(Self::JvmPause),
        };
        typed.ok()
    }

    /// The object alerts show. Through `serde_json::Value`, whose maps sort their keys: the order
    /// the API has always had.
    pub fn to_json(&self) -> serde_json::Value {
        // Cannot fail: every map key is a string and every value a plain number, string or list.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Adds a blocked loop's stack.
    pub fn add_stack(&mut self, frames: Vec<String>, source: StackSource) {
        if let Self::EventLoopBlocked(e) = self {
            e.stack = Some(frames);
            e.stack_source = Some(source);
        }
    }

    /// Adds where a saturated pool's threads wait.
    pub fn add_waiting_at(&mut self, groups: Vec<v1::WaitingGroup>) {
        if let Self::PoolSaturated(e) = self {
            e.waiting_at = Some(groups);
        }
    }

    /// Adds what a JVM's thread dump says: a blocked loop's Java stack, where a pool's threads wait
    /// (in place of their native stacks), or why the dump says nothing.
    pub fn add_java_dump(&mut self, dump: JavaDump) {
        match self {
            Self::EventLoopBlocked(e) => {
                e.java_stack = dump.stack.or(e.java_stack.take());
                e.java_stack_unavailable = dump.unavailable.or(e.java_stack_unavailable.take());
            }
            Self::PoolSaturated(e) => {
                e.waiting_at = dump.waiting_at.or(e.waiting_at.take());
                e.java_stack_unavailable = dump.unavailable.or(e.java_stack_unavailable.take());
            }
            _ => {}
        }
    }

    /// Adds what the process's clients went through in the finding's window, for the kinds that
    /// show it (those about the process's own threads).
    pub fn add_client_impact(&mut self, requests: ClientRequests, refused: u64) {
        let (slot, refusals) = match self {
            Self::EventLoopBlocked(e) => (&mut e.requests, &mut e.refusals),
            Self::EventLoopBusy(e) => (&mut e.requests, &mut e.refusals),
            Self::PoolSaturated(e) => (&mut e.requests, &mut e.refusals),
            Self::RequestsStalled(e) => (&mut e.requests, &mut e.refusals),
            Self::JvmPause(e) => (&mut e.requests, &mut e.refusals),
            Self::UpstreamNoResponse(_) | Self::OneWayStall(_) | Self::RequestQueueing(_) => return,
        };
        *slot = Some(requests);
        *refusals = Some(refused);
    }
}

/// An alert's evidence on the wire, tagged by the alert's kind: written as the alert's `kind` and
/// `evidence` keys. Typed when this build knows the kind and the object reads back whole as its
/// type; kept as sent otherwise, so that a reader shows, and writes back, what a daemon older or
/// newer than itself sent.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertEvidence {
    Typed(Box<Evidence>),
    /// A kind this build does not know, or an object its kind's type does not hold whole.
    Untyped {
        kind: String,
        evidence: serde_json::Value,
    },
}

impl Default for AlertEvidence {
    fn default() -> Self {
        Self::Untyped { kind: String::new(), evidence: serde_json::Value::Null }
    }
}

impl AlertEvidence {
    /// Evidence as read from the wire: typed only if the type gives the object back unchanged.
    pub fn from_wire(kind: String, evidence: serde_json::Value) -> Self {
        match Evidence::from_json(&kind, &evidence) {
            Some(typed) if typed.to_json() == evidence => Self::Typed(Box::new(typed)),
            _ => Self::Untyped { kind, evidence },
        }
    }

    /// The alert's kind, as written in its `kind` key.
    pub fn kind(&self) -> &str {
        match self {
            Self::Typed(evidence) => evidence.kind().as_str(),
            Self::Untyped { kind, .. } => kind,
        }
    }

    /// The `evidence` object as written.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Typed(evidence) => evidence.to_json(),
            Self::Untyped { evidence, .. } => evidence.clone(),
        }
    }

    /// The evidence as its kind's type, where it reads as one: also when it holds keys the type
    /// does not know (a newer daemon's), which [`Self::to_json`] still shows.
    pub fn typed(&self) -> Option<Cow<'_, Evidence>> {
        match self {
            Self::Typed(evidence) => Some(Cow::Borrowed(&**evidence)),
            Self::Untyped { kind, evidence } => Evidence::from_json(kind, evidence).map(Cow::Owned),
        }
    }
}

/// What a thread dump of a JVM adds to a finding (`collector/java_stacks.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JavaDump {
    /// The blocked loop's Java frames, innermost first.
    pub stack: Option<Vec<String>>,
    /// Why the dumps give no stack.
    pub unavailable: Option<String>,
    /// Where the pool's threads wait, by their Java frames.
    pub waiting_at: Option<Vec<v1::WaitingGroup>>,
}

/// The process's inbound requests over a finding's window (`requests` in evidence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRequests {
    pub window_seconds: f64,
    pub completed: u64,
    pub delayed_in_socket: u64,
    pub delayed_threshold_seconds: f64,
    pub max_socket_queue_seconds: f64,
    pub in_flight: usize,
    pub oldest_in_flight_seconds: Option<f64>,
}

/// Where a blocked loop's stack came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StackSource {
    /// Unwound from userspace while the thread blocked (`stacks/`).
    Live,
    /// The kernel's, of the window's longest block.
    Kernel,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLoopBlocked {
    pub reason: Cow<'static, str>,
    pub thread: String,
    pub tid: u32,
    pub window_seconds: f64,
    pub blocked_seconds: f64,
    pub blocked_share: f64,
    pub blocked_seconds_by_reason: BTreeMap<Cow<'static, str>, f64>,
    pub blocks_over_event_threshold: u32,
    pub blocks_over_single_threshold: u32,
    pub single_block_threshold_seconds: f64,
    pub longest_block_seconds: f64,
    pub syscall: Option<Cow<'static, str>>,
    pub futex_word: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_source: Option<StackSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub java_stack: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub java_stack_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ClientRequests>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLoopBusy {
    pub thread: String,
    pub tid: u32,
    pub long_iterations: u32,
    pub longest_on_cpu_seconds: f64,
    pub ongoing: bool,
    pub on_cpu_seconds_in_long_iterations: f64,
    pub busy_iteration_threshold_seconds: f64,
    pub window_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ClientRequests>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals: Option<u64>,
}

/// A futex word many of a pool's threads waited on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotFutex {
    /// Named by `opaque::futex_word`, never the address.
    pub word: String,
    pub waiters: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSaturated {
    pub thread_group: String,
    pub threads: usize,
    pub created_in_window: usize,
    pub window_seconds: f64,
    pub busy_share: f64,
    pub blocked_share: f64,
    pub runqueue_share: f64,
    pub idle_share: f64,
    pub blocked_seconds_by_reason: BTreeMap<Cow<'static, str>, f64>,
    pub hot_futexes: Vec<HotFutex>,
    pub cpu_cores: f64,
    pub waiting_requests: usize,
    pub held_requests: usize,
    pub queued_requests: usize,
    /// Null until the tick adds the client impact.
    pub refusals: Option<u64>,
    /// Where its threads wait: native stacks, or Java frames once a thread dump is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_at: Option<Vec<v1::WaitingGroup>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub java_stack_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ClientRequests>,
}

/// Another peer of the process, and whether it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherPeer {
    pub peer: String,
    pub answered_recently: usize,
    pub healthy: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamNoResponse {
    pub peer: String,
    pub outstanding: usize,
    pub oldest_age_seconds: f64,
    pub threshold_seconds: f64,
    pub gone_silent: bool,
    pub silent_seconds: Option<f64>,
    pub written_since_answer: usize,
    pub last_answer_seconds_ago: Option<f64>,
    pub recent_p99_seconds: Option<f64>,
    pub bytes_sent_since_last_response: u64,
    pub bytes_received_since_last_response: u64,
    pub retransmits: u32,
    pub connections: usize,
    pub connections_waiting: usize,
    pub threads_waiting: Vec<u32>,
    pub other_peers: Vec<OtherPeer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneWayStall {
    pub peer: String,
    pub one_way_flows: usize,
    pub stalled_seconds: f64,
    pub retransmits: u32,
    pub last_backoff_seconds: f64,
    pub unacked_bytes: u32,
    pub last_received_seconds_ago: Option<f64>,
    pub last_sent_seconds_ago: Option<f64>,
    pub threshold_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestQueueing {
    pub threshold_seconds: f64,
    pub window_seconds: f64,
    pub waiting_now: u32,
    pub oldest_unread_seconds: f64,
    pub listeners: Vec<v1::Listener>,
    pub completed: u64,
    pub delayed: u64,
    pub max_socket_queue_seconds: f64,
    pub refusals: u64,
    pub listen_overflows: u64,
    /// The other findings of the processes sharing the listeners, `"{kind} {subject}"`.
    pub likely_causes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestsStalled {
    pub waiting: usize,
    pub oldest_waiting_seconds: f64,
    pub age_threshold_seconds: f64,
    pub reading_threads: BTreeSet<u32>,
    pub in_flight: usize,
    pub answered_since_oldest: u64,
    pub prompt_threshold_seconds: f64,
    pub cpu_cores: f64,
    pub upstream_waiting: usize,
    /// The process's other active findings, `"{kind} {subject}"`.
    pub other_alerts: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ClientRequests>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals: Option<u64>,
}

/// One garbage collector's collections in a JVM's window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcCollections {
    pub collector: String,
    pub count: u64,
    pub seconds: f64,
}

/// How the kernel saw a JVM's pauses: HotSpot's VM thread releasing the threads it stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseReleases {
    pub vm_thread_releases: usize,
    pub most_threads_released_together: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JvmPause {
    /// Where the pause counters come from: `hsperfdata`.
    pub source: Cow<'static, str>,
    pub threshold_seconds: f64,
    pub window_seconds: f64,
    pub long_pauses: usize,
    pub longest_pause_seconds: f64,
    pub stopped_seconds: f64,
    pub stopped_share: f64,
    pub safepoints: u64,
    pub collections: Vec<GcCollections>,
    pub last_gc_cause: Option<String>,
    pub kernel: PauseReleases,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ClientRequests>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals: Option<u64>,
}
