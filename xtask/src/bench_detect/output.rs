//! What one end-to-end test run printed, read back: its `SCENARIO {json}` and `SUMMARY {json}`
//! lines (written by `tests::summary`), the alert kinds of a healthy phase that saw alerts (`FALSE_ALERTS {json}`),
//! and its first panic. Pure: text in, values out.

use serde_json::Value;

/// One scenario's measurement, as `tests::summary` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub scenario: Scenario,
    /// Seconds to firing; None for a scenario without a fault.
    pub detected_s: Option<f64>,
    /// Seconds from the fix to resolved; None when the scenario does not fix its fault.
    pub resolved_s: Option<f64>,
}

/// What a scenario is: the same in every round, so rounds are matched by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scenario {
    pub runtime: String,
    pub fault: String,
    /// The alert kind the fault must raise; None for a healthy-only scenario.
    pub kind: Option<String>,
    /// `watching` or `attached`.
    pub start: String,
}

/// Everything read from one run's output.
#[derive(Debug, Default, PartialEq)]
pub struct RunOutput {
    /// Scenarios named before they ran (`SCENARIO`), measured or not.
    pub declared: Vec<Scenario>,
    pub measured: Vec<Measured>,
    /// Whether a healthy phase saw alerts, and their kinds.
    pub healthy_broken: bool,
    pub false_alert_kinds: Vec<String>,
    /// The first panic: its message's first line, after where it panicked.
    pub panic: Option<String>,
    /// `SCENARIO {` and `SUMMARY {` lines that did not read as one.
    pub unreadable: Vec<String>,
}

const SCENARIO: &str = "SCENARIO {";
const SUMMARY: &str = "SUMMARY {";
const FALSE_ALERTS: &str = "FALSE_ALERTS {";

/// Reads a run's output (stderr, where the tests report). A marker may follow other text on the
/// same line (libtest's `test NAME ... ` has no newline before the test's own output).
pub fn parse(text: &str) -> RunOutput {
    let mut out = RunOutput::default();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(json) = after_marker(line, SCENARIO) {
            match serde_json::from_str(json).ok().as_ref().and_then(scenario) {
                Some(s) => out.declared.push(s),
                None => out.unreadable.push(line.trim().to_owned()),
            }
        } else if let Some(json) = after_marker(line, SUMMARY) {
            match measured(json) {
                Some(m) => out.measured.push(m),
                None => out.unreadable.push(line.trim().to_owned()),
            }
        } else if let Some(json) = after_marker(line, FALSE_ALERTS) {
            out.healthy_broken = true;
            let kinds = serde_json::from_str::<Value>(json).ok();
            for kind in kinds.iter().flat_map(|v| v["kinds"].as_array().into_iter().flatten()) {
                if let Some(kind) = kind.as_str().filter(|k| !out.false_alert_kinds.iter().any(|seen| seen == k)) {
                    out.false_alert_kinds.push(kind.to_owned());
                }
            }
        } else if out.panic.is_none()
            && let Some((_, at)) = line.split_once(" panicked at ")
        {
            out.panic = Some(panic_message(at, lines.next()));
        }
    }
    out
}

/// The JSON object starting at `marker`'s brace.
fn after_marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| line[i + marker.len() - 1..].trim_end())
}

fn scenario(v: &Value) -> Option<Scenario> {
    let text = |key: &str| v[key].as_str().map(str::to_owned);
    Some(Scenario { runtime: text("runtime")?, fault: text("fault")?, kind: text("kind"), start: text("start")? })
}

fn measured(json: &str) -> Option<Measured> {
    let v: Value = serde_json::from_str(json).ok()?;
    let scenario = scenario(&v)?;
    let detected_s = v["detected_s"].as_f64();
    if scenario.kind.is_some() && detected_s.is_none() {
        return None;
    }
    Some(Measured { scenario, detected_s, resolved_s: v["resolved_s"].as_f64() })
}

/// `thread 'x' panicked at FILE:LINE:COL:` is followed by the message on the next line (Rust
/// ≥ 1.73); older toolchains put `'MESSAGE', FILE:LINE:COL` on the same line.
fn panic_message(at: &str, next: Option<&str>) -> String {
    match at.strip_suffix(':') {
        Some(place) => format!("{} ({place})", next.unwrap_or("").trim()),
        None => at.trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSED: &str = "\
node gateway.js: pid 4242 ready on port 40000
test node_atomics_wait_with_a_timeout_is_a_blocked_loop ... DETECTED EventLoopBlocked node-main after 0.61s
RESOLVED EventLoopBlocked 5.52s after heal; still open: []
SUMMARY node atomics-timed: EventLoopBlocked detected 0.61s (watching), resolved 5.52s
SUMMARY {\"detected_s\":0.612,\"fault\":\"atomics-timed\",\"kind\":\"EventLoopBlocked\",\"resolved_s\":5.521,\"runtime\":\"node\",\"start\":\"watching\"}
2026-01-01T00:00:00Z INFO gateway_observer: stopping
";

    #[test]
    fn a_summary_line_is_one_measurement() {
        let out = parse(PASSED);
        assert_eq!(
            out.measured,
            vec![Measured {
                scenario: Scenario {
                    runtime: "node".into(),
                    fault: "atomics-timed".into(),
                    kind: Some("EventLoopBlocked".into()),
                    start: "watching".into(),
                },
                detected_s: Some(0.612),
                resolved_s: Some(5.521),
            }]
        );
        assert!(!out.healthy_broken && out.panic.is_none() && out.unreadable.is_empty(), "{out:?}");
    }

    #[test]
    fn a_declared_scenario_is_named_without_a_measurement() {
        let text = "SCENARIO {\"fault\":\"exec-sync\",\"kind\":\"EventLoopBlocked\",\"runtime\":\"node\",\"start\":\"watching\"}\nSCENARIO {\"fault\":1}\n";
        let out = parse(text);
        assert_eq!(out.declared.len(), 1, "{out:?}");
        assert_eq!(out.declared[0].fault, "exec-sync");
        assert!(out.measured.is_empty());
        assert_eq!(out.unreadable, ["SCENARIO {\"fault\":1}"]);
    }

    #[test]
    fn a_marker_after_other_text_is_still_read() {
        let text = "test x ... SUMMARY {\"runtime\":\"go\",\"fault\":\"mutex\",\"kind\":\"RequestsStalled\",\"start\":\"attached\",\"detected_s\":2.1,\"resolved_s\":null}";
        let out = parse(text);
        assert_eq!(out.measured.len(), 1, "{out:?}");
        assert_eq!(out.measured[0].detected_s, Some(2.1));
        assert_eq!(out.measured[0].resolved_s, None);
        assert_eq!(out.measured[0].scenario.start, "attached");
    }

    #[test]
    fn a_quiet_scenario_has_no_kind_and_no_detection() {
        let out = parse(
            "SUMMARY {\"fault\":\"full load, no fault\",\"kind\":null,\"quiet_s\":15.0,\"runtime\":\"node\",\"start\":\"watching\"}",
        );
        assert_eq!(out.measured.len(), 1, "{out:?}");
        assert_eq!(out.measured[0].scenario.kind, None);
        assert_eq!(out.measured[0].detected_s, None);
    }

    #[test]
    fn a_broken_healthy_phase_names_the_kinds_and_the_panic() {
        let text = "\
FALSE_ALERTS {\"kinds\":[\"EventLoopBlocked\",\"PoolSaturated\"]}
FALSE_ALERTS {\"kinds\":[\"EventLoopBlocked\"]}

thread 'go_requests_queued' panicked at tests/src/alerts.rs:57:13:
alerts in the healthy phase: [
    Object {
thread 'go_requests_queued' panicked at tests/tests/other.rs:1:1:
a later panic
";
        let out = parse(text);
        assert!(out.healthy_broken);
        assert_eq!(out.false_alert_kinds, ["EventLoopBlocked", "PoolSaturated"]);
        assert_eq!(out.panic.as_deref(), Some("alerts in the healthy phase: [ (tests/src/alerts.rs:57:13)"));
    }

    #[test]
    fn an_old_style_panic_is_read_on_its_line() {
        let out = parse("thread 'main' panicked at 'no EventLoopBlocked firing', tests/tests/x.rs:3:5\n");
        assert_eq!(out.panic.as_deref(), Some("'no EventLoopBlocked firing', tests/tests/x.rs:3:5"));
    }

    #[test]
    fn malformed_summaries_are_kept_apart_not_guessed() {
        let text = "\
SUMMARY {\"runtime\":\"node\"
SUMMARY {\"runtime\":\"node\",\"fault\":\"x\",\"kind\":\"EventLoopBlocked\",\"start\":\"watching\",\"detected_s\":null}
SUMMARY netty timed-get: EventLoopBlocked detected 1.2s
";
        let out = parse(text);
        assert!(out.measured.is_empty(), "{out:?}");
        assert_eq!(out.unreadable.len(), 2, "{out:?}");
    }
}
