//! `top --once`: one fetch, printed for scripts (`--format json`: both API bodies as they came)
//! or for a bug report (`--format text`: the overview and the alerts as plain tables).

use std::fmt::Write as _;

use super::{
    app::{App, Update},
    format::{clock, pct, rate, secs},
    model::Data,
};

/// `{"snapshot": <GET /api/v1/snapshot>, "alerts": [<GET /api/v1/alerts>.alerts…]}`, unparsed,
/// so fields this build does not know are kept.
pub fn json(snapshot: serde_json::Value, mut alerts: serde_json::Value) -> String {
    let alerts = alerts.get_mut("alerts").map(serde_json::Value::take).unwrap_or(alerts);
    let both = serde_json::json!({ "snapshot": snapshot, "alerts": alerts });
    serde_json::to_string_pretty(&both).unwrap_or_else(|_| both.to_string())
}

/// The overview table and the alerts, in plain text without colours.
pub fn text(data: &Data) -> String {
    let mut app = App::new("");
    app.apply(Update::Data(Box::new(data.clone())));
    let mut out = String::new();
    let snap = &data.snapshot;
    let n = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let _ = writeln!(
        out,
        "targets {}  threads {}  event loops {}",
        n(snap.targets),
        n(snap.threads),
        snap.event_loops.len()
    );
    let _ = writeln!(out);
    let rows = app.process_rows();
    if rows.is_empty() {
        let _ = writeln!(out, "no targets: the daemon sees no target process yet");
    } else {
        let _ = writeln!(
            out,
            "{:<16} {:>7} {:>8} {:>7} {:>7} {:>6} {:>6} {:>8} {:>6}",
            "PROCESS", "PID", "REQ/S", "P50", "P99", "IN-FL", "CPU", "LOOP MAX", "ALERTS"
        );
        for r in &rows {
            let inbound = r.process.map(|p| &p.inbound);
            let _ = writeln!(
                out,
                "{:<16} {:>7} {:>8} {:>7} {:>7} {:>6} {:>6} {:>8} {:>6}",
                r.comm,
                r.pid,
                rate(inbound.and_then(|w| w.per_second)),
                secs(inbound.and_then(|w| w.p50_seconds)),
                secs(inbound.and_then(|w| w.p99_seconds)),
                n(r.process.and_then(|p| p.in_flight)),
                r.process.and_then(|p| p.cpu).map_or_else(|| "-".into(), |c| format!("{c:.2}")),
                pct(r.loop_max),
                r.open_alerts,
            );
        }
    }
    let _ = writeln!(out);
    let alerts = app.alert_rows();
    if alerts.is_empty() {
        let _ = writeln!(out, "no alerts");
    } else {
        let _ =
            writeln!(out, "{:<8} {:<18} {:<16} {:<24} {:<8}  SUMMARY", "STATE", "KIND", "SUBJECT", "PROCESS", "SINCE");
        for a in alerts {
            let process = format!("{} ({})", a.process.comm, a.process.pid);
            let _ = writeln!(
                out,
                "{:<8} {:<18} {:<16} {:<24} {:<8}  {}",
                a.state,
                a.kind(),
                a.subject,
                process,
                clock(a.since.as_deref()),
                a.summary
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{}/tests/data/top/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
    }

    #[test]
    fn text_has_the_overview_and_the_alerts() {
        let data = Data::parse(&fixture("blocked_snapshot.json"), &fixture("blocked_alerts.json")).expect("parses");
        let text = text(&data);
        let process_line = text
            .lines()
            .find(|l| l.starts_with("reference-gatew"))
            .unwrap_or_else(|| panic!("no process row:\n{text}"));
        assert!(process_line.contains("547.3"), "req/s of the recorded snapshot: {process_line}");
        assert!(process_line.contains("96%"), "busiest event loop: {process_line}");
        let alert_line =
            text.lines().find(|l| l.contains("gw-worker-0")).unwrap_or_else(|| panic!("no alert row:\n{text}"));
        assert!(alert_line.starts_with("firing   EventLoopBlocked"), "{alert_line}");
        assert!(alert_line.contains("event loop blocked 87%"), "{alert_line}");
    }

    #[test]
    fn names_with_control_characters_are_printed_escaped() {
        // A process may name itself or its threads with escape sequences (prctl(PR_SET_NAME)).
        let swap = |text: String| text.replace("reference-gatew", "r\\u001b[31mgw").replace("gw-worker-0", "w\\u009b0");
        let data = Data::parse(&swap(fixture("blocked_snapshot.json")), &swap(fixture("blocked_alerts.json")))
            .expect("parses");
        let text = text(&data);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reaches the terminal:\n{text:?}"
        );
        assert!(text.contains("r\\x1b[31mgw") && text.contains("w\\u{9b}0"), "{text}");
    }

    #[test]
    fn text_says_when_there_is_nothing() {
        let text = text(&Data::default());
        assert!(text.contains("no targets") && text.contains("no alerts"), "{text}");
    }

    #[test]
    fn json_keeps_unknown_fields_and_unwraps_alerts() {
        let out = json(serde_json::json!({"version": 1, "new": [1]}), serde_json::json!({"alerts": [{"kind": "X"}]}));
        let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
        assert_eq!(v["snapshot"]["new"], serde_json::json!([1]));
        assert_eq!(v["alerts"][0]["kind"], "X");
    }
}
