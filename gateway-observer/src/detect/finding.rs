//! What every detector produces: a [`Finding`] of one [`AlertKind`], the condition holding now.
//! The alert book (`alerts/`) turns findings into alerts with a lifecycle.

use std::fmt;

use serde::{Deserialize, Serialize};

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

/// What a detector concluded at one evaluation: the condition holds now.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub pid: u32,
    /// Process comm.
    pub comm: String,
    /// Thread name, thread group, or peer `ip:port`.
    pub subject: String,
    /// One line, human readable.
    pub summary: String,
    /// What the detector measured, of the kind's own type; the tick adds stacks and client impact.
    pub evidence: super::evidence::Evidence,
    /// The condition held in the last tick, not only earlier in the detector's window. Only an
    /// active finding opens an alert, moves it from pending to firing, or keeps it from resolving:
    /// a window that still remembers a condition that ended must not raise or hold an alert.
    pub active: bool,
    /// How long the events themselves show the condition ongoing already (a loop iteration that
    /// has not come back for a second): that much of the pending time is served. Zero for
    /// conditions judged over windows, whose start the detector cannot date.
    pub held_for: std::time::Duration,
}

impl Finding {
    /// The detector that raised it: its evidence's kind, so the two cannot disagree.
    pub fn kind(&self) -> AlertKind {
        self.evidence.kind()
    }

    /// The identity of the alert this finding feeds: `{kind}/{pid}/{subject}`. Kind and pid hold
    /// no `/`, so a subject that does (`kworker/0:1`) still yields a unique id.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.kind(), self.pid, self.subject)
    }
}
