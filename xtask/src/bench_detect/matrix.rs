//! The detection matrix: every run of every round folded into one row per scenario, judged
//! against issue 13's goals, rendered as one Markdown table. Pure: runs in, text out.

use super::output::{RunOutput, Scenario};

/// Seconds from the fault's start to firing, with the observer already watching.
const DETECT_WATCHING_S: f64 = 2.0;
/// Seconds from the observer being ready to firing, attached while the fault is on.
const DETECT_ATTACHED_S: f64 = 5.0;
/// Seconds from the fix to resolved.
const RESOLVE_S: f64 = 10.0;

/// One test run of one round.
pub struct Run {
    /// `suite::test`.
    pub test: String,
    /// Why the run failed (its first panic, a timeout); None when it passed.
    pub failure: Option<String>,
    pub output: RunOutput,
}

/// One scenario over every round.
#[derive(Debug, PartialEq)]
pub struct Row {
    pub test: String,
    /// None when the test named no scenario in any round (it failed before it said which).
    pub scenario: Option<Scenario>,
    pub rounds: usize,
    pub detected: Vec<f64>,
    pub resolved: Vec<f64>,
    /// Rounds whose healthy phase saw alerts, and the kinds seen.
    pub healthy_broken: usize,
    pub false_alert_kinds: Vec<String>,
    /// Why each other round without a measurement (or with a failed test) failed.
    pub failures: Vec<String>,
}

/// Rows in the order tests first ran; a test reporting several scenarios has a row for each.
pub fn rows(runs: &[Run]) -> Vec<Row> {
    let mut tests: Vec<&str> = Vec::new();
    for run in runs {
        if !tests.contains(&run.test.as_str()) {
            tests.push(&run.test);
        }
    }
    let mut rows = Vec::new();
    for test in tests {
        let runs: Vec<&Run> = runs.iter().filter(|r| r.test == test).collect();
        let mut scenarios: Vec<Option<&Scenario>> = Vec::new();
        let named =
            runs.iter().flat_map(|r| r.output.declared.iter().chain(r.output.measured.iter().map(|m| &m.scenario)));
        for scenario in named {
            if !scenarios.contains(&Some(scenario)) {
                scenarios.push(Some(scenario));
            }
        }
        if scenarios.is_empty() {
            scenarios.push(None);
        }
        rows.extend(scenarios.into_iter().map(|scenario| row(test, scenario, &runs)));
    }
    rows
}

fn row(test: &str, scenario: Option<&Scenario>, runs: &[&Run]) -> Row {
    let mut row = Row {
        test: test.to_owned(),
        scenario: scenario.cloned(),
        rounds: runs.len(),
        detected: Vec::new(),
        resolved: Vec::new(),
        healthy_broken: 0,
        false_alert_kinds: Vec::new(),
        failures: Vec::new(),
    };
    for run in runs {
        let measured = run.output.measured.iter().find(|m| Some(&m.scenario) == scenario);
        if let Some(m) = measured {
            row.detected.extend(m.detected_s);
            row.resolved.extend(m.resolved_s);
        }
        if run.output.healthy_broken {
            row.healthy_broken += 1;
            for kind in &run.output.false_alert_kinds {
                if !row.false_alert_kinds.contains(kind) {
                    row.false_alert_kinds.push(kind.clone());
                }
            }
        } else if let Some(failure) = &run.failure {
            row.failures.push(failure.clone());
        } else if measured.is_none() {
            row.failures.push("passed without a SUMMARY line for this scenario (skipped?)".into());
        }
    }
    row
}

impl Row {
    /// Each goal the row misses, in words; empty when it meets them all.
    pub fn misses(&self) -> Vec<String> {
        let mut misses = Vec::new();
        if self.healthy_broken > 0 {
            misses.push(format!(
                "alerts while healthy in {}/{} rounds ({})",
                self.healthy_broken,
                self.rounds,
                self.false_alert_kinds.join(", ")
            ));
        }
        if let Some(first) = self.failures.first() {
            misses.push(format!("failed in {}/{} rounds: {first}", self.failures.len(), self.rounds));
        }
        let attached = self.scenario.as_ref().is_some_and(|s| s.start == "attached");
        let detect_goal = if attached { DETECT_ATTACHED_S } else { DETECT_WATCHING_S };
        if let Some(max) = max(&self.detected).filter(|m| *m > detect_goal) {
            misses.push(format!("detected after {max:.2} s > {detect_goal} s"));
        }
        if let Some(max) = max(&self.resolved).filter(|m| *m > RESOLVE_S) {
            misses.push(format!("resolved after {max:.2} s > {RESOLVE_S} s"));
        }
        misses
    }
}

/// The matrix as a Markdown table, then one summary line.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "| runtime | fault | alert | observer | detected after | resolved after | alerts while healthy | result | test |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let mut passing = 0;
    for row in rows {
        let misses = row.misses();
        let result = if misses.is_empty() {
            passing += 1;
            "pass".to_owned()
        } else {
            format!("**FAIL**: {}", misses.join("; "))
        };
        let (runtime, fault, kind, start) = match &row.scenario {
            Some(s) => (s.runtime.as_str(), s.fault.as_str(), s.kind.as_deref().unwrap_or("none"), s.start.as_str()),
            None => ("?", "?", "?", "?"),
        };
        let healthy = if row.healthy_broken == 0 {
            format!("0/{}", row.rounds)
        } else {
            format!("{}/{} ({})", row.healthy_broken, row.rounds, row.false_alert_kinds.join(", "))
        };
        let cells = [
            runtime,
            fault,
            kind,
            start,
            &seconds(&row.detected),
            &seconds(&row.resolved),
            &healthy,
            &result,
            &format!("`{}`", row.test),
        ];
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out.push_str(&format!(
        "\n{passing} of {} scenarios meet every goal (detected ≤ {DETECT_WATCHING_S} s when watching, \
         ≤ {DETECT_ATTACHED_S} s when attached during the fault; resolved ≤ {RESOLVE_S} s after the fix; \
         no alert while healthy; every round passed). Times: median / max over rounds.\n",
        rows.len()
    ));
    out
}

/// `median / max s`, one figure for one round, `—` for none.
fn seconds(values: &[f64]) -> String {
    match (median(values), max(values)) {
        (Some(median), Some(max)) if values.len() > 1 => format!("{median:.2} / {max:.2} s"),
        (Some(only), _) => format!("{only:.2} s"),
        _ => "—".to_owned(),
    }
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

fn max(values: &[f64]) -> Option<f64> {
    values.iter().copied().max_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::{super::output::parse, *};

    fn summary(kind: &str, start: &str, detected: f64, resolved: &str) -> String {
        format!(
            "SUMMARY {{\"runtime\":\"node\",\"fault\":\"f\",\"kind\":\"{kind}\",\"start\":\"{start}\",\"detected_s\":{detected},\"resolved_s\":{resolved}}}\n"
        )
    }

    fn run(test: &str, failure: Option<&str>, text: &str) -> Run {
        Run { test: test.into(), failure: failure.map(Into::into), output: parse(text) }
    }

    #[test]
    fn rounds_of_a_scenario_fold_into_median_and_max() {
        let runs = [
            run("node::a", None, &summary("EventLoopBlocked", "watching", 0.5, "5.0")),
            run("node::a", None, &summary("EventLoopBlocked", "watching", 1.5, "6.0")),
            run("node::a", None, &summary("EventLoopBlocked", "watching", 0.9, "5.5")),
        ];
        let rows = rows(&runs);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].detected, [0.5, 1.5, 0.9]);
        assert!(rows[0].misses().is_empty(), "{:?}", rows[0].misses());
        let table = render(&rows);
        assert!(table.contains("| 0.90 / 1.50 s | 5.50 / 6.00 s | 0/3 | pass |"), "{table}");
        assert!(table.contains("\n1 of 1 scenarios meet every goal"), "{table}");
    }

    #[test]
    fn goals_depend_on_when_the_observer_started() {
        let runs = [
            run("go::watching", None, &summary("RequestsStalled", "watching", 2.5, "3.0")),
            run("go::attached", None, &summary("RequestsStalled", "attached", 2.5, "11.0")),
        ];
        let rows = rows(&runs);
        assert_eq!(rows[0].misses(), ["detected after 2.50 s > 2 s"]);
        assert_eq!(rows[1].misses(), ["resolved after 11.00 s > 10 s"]);
    }

    #[test]
    fn a_failed_round_counts_and_keeps_the_measured_ones() {
        let runs = [
            run("jvm::pool", None, &summary("PoolSaturated", "watching", 1.0, "4.0")),
            run("jvm::pool", Some("no PoolSaturated firing 15s into the fault (x.rs:1:1)"), ""),
        ];
        let rows = rows(&runs);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].detected, [1.0]);
        assert_eq!(rows[0].misses(), ["failed in 1/2 rounds: no PoolSaturated firing 15s into the fault (x.rs:1:1)"]);
    }

    #[test]
    fn a_declared_scenario_that_failed_keeps_its_name() {
        let text = "SCENARIO {\"runtime\":\"node\",\"fault\":\"exec-sync\",\"kind\":\"EventLoopBlocked\",\"start\":\"watching\"}\n";
        let rows = rows(&[run("node::exec", Some("MISSED (r.rs:1:1)"), text)]);
        assert_eq!(rows.len(), 1);
        let table = render(&rows);
        assert!(
            table.contains("| node | exec-sync | EventLoopBlocked | watching | — | — | 0/1 | **FAIL**: failed in 1/1 rounds: MISSED (r.rs:1:1) |"),
            "{table}"
        );
    }

    #[test]
    fn a_test_that_never_reported_is_one_failed_row() {
        let runs = [run("jvm::gc", Some("timed out after 300 s"), "")];
        let rows = rows(&runs);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].scenario, None);
        let table = render(&rows);
        assert!(
            table.contains(
                "| ? | ? | ? | ? | — | — | 0/1 | **FAIL**: failed in 1/1 rounds: timed out after 300 s | `jvm::gc` |"
            ),
            "{table}"
        );
        assert!(table.contains("\n0 of 1 scenarios meet every goal"), "{table}");
    }

    #[test]
    fn a_broken_healthy_phase_is_a_false_alert_not_a_plain_failure() {
        let text = "FALSE_ALERTS {\"kinds\":[\"EventLoopBlocked\"]}\nthread 't' panicked at a.rs:1:1:\nalerts in the healthy phase: [\n";
        let runs = [run("go::mutex", Some("alerts in the healthy phase: [ (a.rs:1:1)"), text)];
        let rows = rows(&runs);
        assert_eq!(rows[0].misses(), ["alerts while healthy in 1/1 rounds (EventLoopBlocked)"]);
        assert!(render(&rows).contains("| 1/1 (EventLoopBlocked) |"));
    }

    #[test]
    fn a_test_with_two_scenarios_has_two_rows_sharing_its_failures() {
        let both =
            summary("UpstreamNoResponse", "watching", 6.0, "1.0") + &summary("OneWayStall", "watching", 3.0, "2.0");
        let runs = [
            run("up::nginx", None, &both),
            run("up::nginx", Some("boom"), &summary("UpstreamNoResponse", "watching", 6.5, "1.0")),
        ];
        let rows = rows(&runs);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].detected, [6.0, 6.5]);
        assert_eq!(rows[1].detected, [3.0]);
        assert_eq!(rows[1].failures, ["boom"]);
        assert_eq!(rows[0].failures, ["boom"], "the test failed after its summary: the round still fails");
    }

    #[test]
    fn cells_cannot_break_the_table() {
        let runs = [run("a::b", Some("left | right"), "")];
        assert!(render(&rows(&runs)).contains("left \\| right"));
    }
}
