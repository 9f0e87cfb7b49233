//! What every detector produces: a [`Finding`] of one [`AlertKind`], the condition holding now.
//! The alert book (`alerts/`) turns findings into alerts with a lifecycle.

pub use crate::api::v1::AlertKind;

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
    pub evidence: crate::api::v1::Evidence,
    /// The condition held in the last tick, not only earlier in the detector's window. Only an
    /// active finding opens an alert, moves it from pending to firing, or keeps it from resolving:
    /// a window that still remembers a condition that ended must not raise or hold an alert.
    pub active: bool,
    /// How long the events themselves show the condition ongoing already (a loop iteration that
    /// has not come back for a second): that much of the pending time is served. Zero for
    /// conditions judged over windows, whose start the detector cannot date.
    pub held_for: std::time::Duration,
    /// The user stack the kernel took of the condition's longest block (`EventLoopBlocked`), for
    /// the tick to name when no stack was unwound live. Not evidence: an id into a kernel map.
    pub stack_id: Option<u32>,
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
