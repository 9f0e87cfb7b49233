//! The daemon's alert transitions as it writes them on stdout (README, "Alerts"): one JSON line
//! per state change, `{"ts": RFC 3339, "event": "pending"|"firing"|"resolved", "alert": {...}}`.

use std::time::UNIX_EPOCH;

use anyhow::Context as _;
use serde_json::Value;

/// What the test looks at in one transition.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// When it happened, in Unix seconds.
    pub at: f64,
    /// The state the alert entered.
    pub event: String,
    pub id: String,
    pub kind: String,
    /// The process's comm.
    pub comm: String,
    pub subject: String,
    /// The evidence's `reason` (what a loop was blocked in), when it names one.
    pub reason: Option<String>,
}

pub fn parse(line: &str) -> anyhow::Result<Transition> {
    let value: Value = serde_json::from_str(line).with_context(|| format!("not JSON: {line}"))?;
    let text =
        |field: &Value, name: &str| field.as_str().map(str::to_owned).with_context(|| format!("no {name} in {line}"));
    let ts = text(&value["ts"], "ts")?;
    let at = humantime::parse_rfc3339(&ts)
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .with_context(|| format!("not an RFC 3339 time after 1970: {ts}"))?
        .as_secs_f64();
    let alert = &value["alert"];
    Ok(Transition {
        at,
        event: text(&value["event"], "event")?,
        id: text(&alert["id"], "alert.id")?,
        kind: text(&alert["kind"], "alert.kind")?,
        comm: text(&alert["process"]["comm"], "alert.process.comm")?,
        subject: text(&alert["subject"], "alert.subject")?,
        reason: alert["evidence"]["reason"].as_str().map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_test_needs_and_says_what_is_missing() {
        let line = r#"{"ts":"2026-12-02T13:05:02.320Z","event":"firing","alert":{"id":"EventLoopBlocked/42/kt-evloop",
            "kind":"EventLoopBlocked","state":"firing","process":{"pid":42,"comm":"kt-loop"},"subject":"kt-evloop",
            "evidence":{"reason":"sleep","blocked_share":0.8}}}"#;
        let t = parse(line).expect("a transition");
        assert!((t.at - 1_796_216_702.32).abs() < 1e-6, "{}", t.at);
        assert_eq!(
            (t.event.as_str(), t.id.as_str(), t.kind.as_str(), t.comm.as_str(), t.subject.as_str()),
            ("firing", "EventLoopBlocked/42/kt-evloop", "EventLoopBlocked", "kt-loop", "kt-evloop")
        );
        assert_eq!(t.reason.as_deref(), Some("sleep"));
        let error = parse(r#"{"ts":"2026-12-02T13:05:02.320Z","event":"firing"}"#).expect_err("no alert");
        assert!(error.to_string().starts_with("no alert.id"), "{error}");
    }
}
