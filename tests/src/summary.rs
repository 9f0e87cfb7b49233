//! What a scenario measured, in one line a machine reads (`cargo xtask bench detect` builds its
//! detection matrix from them): `SCENARIO {json}` naming it before it runs, `SUMMARY {json}`
//! after the same in words once measured, and `FALSE_ALERTS {json}` when a healthy phase sees
//! an alert. Each line goes out in one write, so that the
//! output of the processes a test runs (they share its stderr) cannot split it.

use std::{io::Write as _, time::Duration};

use serde_json::{Value, json};

/// Whether the observer watched the process before the fault began, or attached during it.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    Watching,
    Attached,
}

impl Start {
    fn as_str(self) -> &'static str {
        match self {
            Start::Watching => "watching",
            Start::Attached => "attached",
        }
    }
}

/// One fault and the alert it must raise: what a row of the matrix is.
pub struct Detection<'a> {
    /// The gateway and its runtime: `node`, `jvm netty`, `nginx`.
    pub runtime: &'a str,
    pub fault: &'a str,
    /// The alert kind the fault must raise.
    pub kind: &'a str,
    pub start: Start,
}

impl Detection<'_> {
    /// Names the scenario before it runs (`SCENARIO {json}`), so that a run failing before its
    /// summary is still reported as this scenario.
    pub fn declare(&self) {
        line(&format!("SCENARIO {}", self.json()));
    }

    /// What was measured: `detected`, from the fault's start (watching) or from the observer
    /// being ready (attached) to firing; `resolved`, from the fix to resolved (None when the
    /// scenario does not fix its fault).
    pub fn report(&self, detected: Duration, resolved: Option<Duration>) {
        let resolved_text = resolved.map_or("not measured".to_owned(), |r| format!("{:.2}s", r.as_secs_f64()));
        line(&format!(
            "SUMMARY {} {}: {} detected {:.2}s ({}), resolved {resolved_text}",
            self.runtime,
            self.fault,
            self.kind,
            detected.as_secs_f64(),
            self.start.as_str()
        ));
        line(&format!("SUMMARY {}", self.measured(detected, resolved)));
    }

    fn measured(&self, detected: Duration, resolved: Option<Duration>) -> Value {
        let mut json = self.json();
        json["detected_s"] = seconds(detected).into();
        json["resolved_s"] = resolved.map(seconds).into();
        json
    }

    fn json(&self) -> Value {
        json!({ "runtime": self.runtime, "fault": self.fault, "kind": self.kind, "start": self.start.as_str() })
    }
}

/// A scenario without a fault: `healthy` under some load with no alert (for `fault`, what the
/// load was).
pub fn quiet(runtime: &str, fault: &str, healthy: Duration) {
    line(&format!("SUMMARY {runtime} {fault}: no alert for {:.1}s", healthy.as_secs_f64()));
    let summary = json!({
        "runtime": runtime,
        "fault": fault,
        "kind": Value::Null,
        "start": Start::Watching.as_str(),
        "quiet_s": seconds(healthy),
    });
    line(&format!("SUMMARY {summary}"));
}

/// The kinds of `alerts` (the daemon's alert objects) raised in a healthy phase, before the test
/// fails on them.
pub fn false_alerts(alerts: &[Value]) {
    let mut kinds: Vec<&str> = alerts.iter().filter_map(|a| a["kind"].as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    line(&format!("FALSE_ALERTS {}", json!({ "kinds": kinds })));
}

/// Milliseconds are what a detection time is worth.
fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn line(text: &str) {
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detection_is_one_json_object_in_seconds() {
        let detection =
            Detection { runtime: "node", fault: "atomics-timed", kind: "EventLoopBlocked", start: Start::Attached };
        assert_eq!(
            detection.json().to_string(),
            r#"{"fault":"atomics-timed","kind":"EventLoopBlocked","runtime":"node","start":"attached"}"#
        );
        assert_eq!(
            detection.measured(Duration::from_micros(1_234_567), None).to_string(),
            r#"{"detected_s":1.235,"fault":"atomics-timed","kind":"EventLoopBlocked","resolved_s":null,"runtime":"node","start":"attached"}"#
        );
    }
}
