//! Alerts: what detectors conclude, turned into alerts with a lifecycle and stable identity.
//!
//! Detectors report [`Finding`]s (the condition holds now, defined with them in
//! `detect::finding`); [`lifecycle::AlertBook`] owns every
//! [`Alert`] and moves it pending → firing → resolved; [`log`] and [`alertmanager`] render
//! transitions and alerts for stdout and Alertmanager. Nothing here reads a clock: every function
//! takes `now`, so tests drive time by hand.

pub mod alertmanager;
pub mod lifecycle;
pub mod log;

use std::{
    fmt,
    time::{Duration, SystemTime},
};

use serde::Serialize;

use crate::api::v1;

pub use crate::detect::finding::{AlertKind, Finding};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    Pending,
    Firing,
    Resolved,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Firing => "firing",
            Self::Resolved => "resolved",
        }
    }
}

impl fmt::Display for AlertState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The process an alert is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
}

/// One alert; the API and the transition log show it as a [`v1::Alert`]. Fields are private
/// because only [`lifecycle::AlertBook`] may change them: the id must keep matching kind, pid and
/// subject, and the state must follow the lifecycle.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    id: String,
    kind: AlertKind,
    state: AlertState,
    since: SystemTime,
    resolved_at: Option<SystemTime>,
    process: Process,
    subject: String,
    summary: String,
    evidence: v1::Evidence,
}

impl Alert {
    /// A new alert in `state` that started at `since`.
    fn new(finding: Finding, state: AlertState, since: SystemTime) -> Self {
        Self {
            id: finding.id(),
            kind: finding.kind(),
            state,
            since,
            resolved_at: None,
            process: Process { pid: finding.pid, comm: finding.comm },
            subject: finding.subject,
            summary: finding.summary,
            evidence: finding.evidence,
        }
    }

    /// `{kind}/{pid}/{subject}`; the same condition on the same subject keeps the same id across
    /// pending, firing, resolved and firing again.
    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn kind(&self) -> AlertKind {
        self.kind
    }
    pub fn state(&self) -> AlertState {
        self.state
    }
    /// When the condition was first seen (the start of pending); firing does not move it.
    pub fn since(&self) -> SystemTime {
        self.since
    }
    pub fn resolved_at(&self) -> Option<SystemTime> {
        self.resolved_at
    }
    pub fn process(&self) -> &Process {
        &self.process
    }
    pub fn pid(&self) -> u32 {
        self.process.pid
    }
    pub fn comm(&self) -> &str {
        &self.process.comm
    }
    pub fn subject(&self) -> &str {
        &self.subject
    }
    pub fn summary(&self) -> &str {
        &self.summary
    }
    pub fn evidence(&self) -> &v1::Evidence {
        &self.evidence
    }
}

impl From<&Alert> for v1::Alert {
    fn from(alert: &Alert) -> Self {
        Self {
            id: alert.id.clone(),
            state: alert.state.as_str().to_owned(),
            since: Some(format_time(alert.since)),
            resolved_at: alert.resolved_at.map(format_time),
            process: v1::AlertProcess { pid: alert.process.pid, comm: alert.process.comm.clone() },
            subject: alert.subject.clone(),
            summary: alert.summary.clone(),
            evidence: v1::AlertEvidence::Typed(Box::new(alert.evidence.clone())),
        }
    }
}

/// A state change of one alert, as [`lifecycle::AlertBook::evaluate`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// Snapshot after the change.
    pub alert: Alert,
    /// `None` for an alert that did not exist before this evaluation (including one that replaces
    /// a resolved alert with the same id).
    pub from: Option<AlertState>,
}

/// RFC 3339 UTC with milliseconds (`2026-12-02T13:05:01.120Z`).
///
/// humantime panics on times before the epoch and fails past year 9999; a wall clock stepped
/// badly must not take the daemon down, so times are clamped into that range first.
pub fn format_time(t: SystemTime) -> String {
    // 9999-12-31T23:59:59.999Z, the last instant humantime formats.
    let last = SystemTime::UNIX_EPOCH + Duration::from_millis(253_402_300_799_999);
    let t = t.clamp(SystemTime::UNIX_EPOCH, last);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_the_variant_names() {
        let kinds = [
            (AlertKind::EventLoopBlocked, "EventLoopBlocked"),
            (AlertKind::EventLoopBusy, "EventLoopBusy"),
            (AlertKind::PoolSaturated, "PoolSaturated"),
            (AlertKind::UpstreamNoResponse, "UpstreamNoResponse"),
            (AlertKind::OneWayStall, "OneWayStall"),
            (AlertKind::RequestQueueing, "RequestQueueing"),
            (AlertKind::RequestsStalled, "RequestsStalled"),
            (AlertKind::JvmPause, "JvmPause"),
        ];
        for (kind, name) in kinds {
            assert_eq!(kind.to_string(), name);
            assert_eq!(serde_json::to_value(kind).expect("serializes"), serde_json::json!(name));
        }
    }

    #[test]
    fn times_are_rfc3339_millis_utc_and_clamped() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_216_701_120);
        assert_eq!(format_time(t), "2026-12-02T13:05:01.120Z");
        let before_epoch = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(format_time(before_epoch), "1970-01-01T00:00:00.000Z");
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(format_time(far), "9999-12-31T23:59:59.999Z");
    }
}
