//! Alert transitions as JSON lines for stdout or a log file, one line per state change:
//! `{"ts": "...", "event": "pending"|"firing"|"resolved", "alert": <v1::Alert, as the API shows it>}`.
//! Only formats; the caller decides where the line goes.

use std::time::SystemTime;

use serde::Serialize;

use super::{AlertState, Transition, format_time};
use crate::api::v1;

#[derive(Serialize)]
struct Line {
    ts: String,
    event: AlertState,
    alert: v1::Alert,
}

/// One JSON line (without the trailing newline) for transition `t` observed at `now`. `event` is
/// the state the alert entered.
pub fn transition_line(now: SystemTime, t: &Transition) -> String {
    let line = Line { ts: format_time(now), event: t.alert.state(), alert: v1::Alert::from(&t.alert) };
    match serde_json::to_string(&line) {
        Ok(text) => text,
        // Unreachable with today's types (string keys, infallible timestamps), but a log line
        // must never take the daemon down: say what was lost, still as one JSON line.
        Err(e) => format!(
            r#"{{"ts":{},"event":"{}","alert_id":{},"error":{}}}"#,
            serde_json::Value::from(format_time(now)),
            t.alert.state(),
            serde_json::Value::from(t.alert.id()),
            serde_json::Value::from(e.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::alerts::{
        AlertKind, Finding,
        lifecycle::{AlertBook, LifecycleConfig},
    };

    #[test]
    fn one_json_line_per_transition() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_216_701_120);
        let mut book = AlertBook::new(LifecycleConfig::default());
        let finding = Finding {
            pid: 77,
            comm: "gateway".into(),
            subject: "rpc-pool-*".into(),
            summary: "pool rpc-pool-* saturated: 64 threads".into(),
            evidence: crate::detect::evidence_golden::bare(AlertKind::PoolSaturated).evidence,
            active: true,
            held_for: std::time::Duration::ZERO,
            stack_id: None,
        };
        let mut lines = Vec::new();
        for (ms, findings) in [(0, vec![finding.clone()]), (1000, vec![finding]), (6000, vec![])] {
            let now = t0 + Duration::from_millis(ms);
            for t in book.evaluate(now, findings) {
                lines.push(transition_line(now, &t));
            }
        }
        assert_eq!(lines.len(), 3, "{lines:#?}");
        for line in &lines {
            assert!(!line.contains('\n'), "not one line: {line}");
        }
        let parsed: Vec<serde_json::Value> =
            lines.iter().map(|l| serde_json::from_str(l).expect("valid JSON")).collect();
        let events: Vec<&str> = parsed.iter().map(|v| v["event"].as_str().expect("event")).collect();
        assert_eq!(events, ["pending", "firing", "resolved"]);
        let ts: Vec<&str> = parsed.iter().map(|v| v["ts"].as_str().expect("ts")).collect();
        assert_eq!(ts, ["2026-12-02T13:05:01.120Z", "2026-12-02T13:05:02.120Z", "2026-12-02T13:05:07.120Z"]);
        let first = parsed[0].as_object().expect("object");
        let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["alert", "event", "ts"]);
        assert_eq!(parsed[2]["alert"]["id"], "PoolSaturated/77/rpc-pool-*");
        assert_eq!(parsed[2]["alert"]["state"], "resolved");
        assert_eq!(parsed[2]["alert"]["resolved_at"], "2026-12-02T13:05:07.120Z");
        assert_eq!(parsed[2]["alert"]["since"], "2026-12-02T13:05:01.120Z");
    }
}
