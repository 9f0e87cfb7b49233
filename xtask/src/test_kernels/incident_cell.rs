//! The EventLoopBlocked cell: the one incident each guest runs (`guest/loop.c`). The daemon must
//! raise nothing while the loop is healthy, fire within the bound the end-to-end tests hold it to
//! once the loop blocks, naming the loop's thread, and resolve the alert once the loop idles
//! again.

use super::{
    alert_log::{self, Transition},
    matrix::Cell,
    results::Incident,
};

const LOOP_PROCESS: &str = "kt-loop";
/// The name the fixture gives its loop thread: the alert's subject.
const LOOP_THREAD: &str = "kt-evloop";
/// What the loop blocks in (nanosleep), as the alert's evidence names it.
const LOOP_REASON: &str = "sleep";
/// From the first block to firing, at most: what `tests/tests/incident_event_loop_blocked.rs`
/// allows on the host.
const DETECT_WITHIN: f64 = 5.0;

pub fn judge(incident: &Incident) -> Cell {
    let Some((from, until)) = incident.blocked else {
        return Cell::failed("the loop never blocked");
    };
    let transitions = match incident.alerts.iter().map(|l| alert_log::parse(l)).collect::<anyhow::Result<Vec<_>>>() {
        Ok(transitions) => transitions,
        Err(e) => return Cell::failed("unreadable alert line").with_detail(format!("{e:#}")),
    };
    let listed = |ts: &[&Transition]| -> String {
        let each: Vec<String> = ts.iter().map(|t| format!("{} {} at {:+.1} s", t.event, t.id, t.at - from)).collect();
        format!("alerts (times from the first block): {}", each.join(", "))
    };
    let early: Vec<&Transition> = transitions.iter().filter(|t| t.at < from).collect();
    if !early.is_empty() {
        return Cell::failed("alert while the loop was healthy").with_detail(listed(&early));
    }
    let Some(firing) =
        transitions.iter().find(|t| t.event == "firing" && t.kind == "EventLoopBlocked" && t.comm == LOOP_PROCESS)
    else {
        let unknown = (!incident.known).then(|| format!("the daemon did not list {LOOP_THREAD} as an event loop; "));
        let all: Vec<&Transition> = transitions.iter().collect();
        return Cell::failed("never fired").with_detail(format!("{}{}", unknown.unwrap_or_default(), listed(&all)));
    };
    let detected = firing.at - from;
    let resolved = transitions.iter().find(|t| t.id == firing.id && t.event == "resolved").map(|t| t.at - until);
    let others: Vec<&Transition> = transitions.iter().filter(|t| t.id != firing.id).collect();
    let mut problems = Vec::new();
    if detected > DETECT_WITHIN {
        problems.push(format!("fired {detected:.1} s after the first block, over {DETECT_WITHIN} s"));
    }
    if firing.subject != LOOP_THREAD {
        problems.push(format!("subject {}, not {LOOP_THREAD}", firing.subject));
    }
    if firing.reason.as_deref() != Some(LOOP_REASON) {
        problems.push(format!("blocked in {}, not {LOOP_REASON}", firing.reason.as_deref().unwrap_or("nothing named")));
    }
    if resolved.is_none() {
        problems.push("never resolved while the loop idled again".to_owned());
    }
    if !others.is_empty() {
        problems.push(format!("other {}", listed(&others)));
    }
    let text = format!(
        "fired after {detected:.1} s ({}, {}), resolved {} after; quiet {:.0} s healthy",
        firing.subject,
        firing.reason.as_deref().unwrap_or("?"),
        resolved.map_or("never".to_owned(), |s| format!("{s:.1} s")),
        incident.healthy_for.unwrap_or(0.0),
    );
    if problems.is_empty() { Cell::ok(text) } else { Cell::failed(text).with_detail(problems.join("; ")) }
}

#[cfg(test)]
mod tests {
    use super::super::matrix::Verdict;
    use super::*;

    const FROM: f64 = 1_796_216_701.0;

    fn line(at: &str, event: &str, subject: &str, reason: &str) -> String {
        format!(
            r#"{{"ts":"2026-12-02T13:05:{at}Z","event":"{event}","alert":{{"id":"EventLoopBlocked/42/{subject}",
            "kind":"EventLoopBlocked","process":{{"pid":42,"comm":"kt-loop"}},"subject":"{subject}",
            "evidence":{{"reason":"{reason}"}}}}}}"#
        )
    }

    fn incident(alerts: Vec<String>) -> Incident {
        Incident { healthy_for: Some(9.3), known: true, blocked: Some((FROM, FROM + 6.25)), alerts }
    }

    #[test]
    fn fired_in_time_on_the_loop_and_resolved_is_ok() {
        let cell = judge(&incident(vec![
            line("02.200", "pending", "kt-evloop", "sleep"),
            line("03.200", "firing", "kt-evloop", "sleep"),
            line("13.050", "resolved", "kt-evloop", "sleep"),
        ]));
        assert_eq!(
            (cell.verdict, cell.text.as_str()),
            (Verdict::Ok, "fired after 2.2 s (kt-evloop, sleep), resolved 5.8 s after; quiet 9 s healthy")
        );
    }

    #[test]
    fn an_alert_while_healthy_a_late_one_or_the_wrong_subject_fails() {
        let early = judge(&incident(vec![line("00.500", "pending", "kt-evloop", "sleep")]));
        assert_eq!((early.verdict, early.text.as_str()), (Verdict::Failed, "alert while the loop was healthy"));
        let late = judge(&incident(vec![
            line("07.000", "firing", "main", "other_syscall"),
            line("18.000", "resolved", "main", "other_syscall"),
        ]));
        assert_eq!(late.verdict, Verdict::Failed);
        assert_eq!(
            late.detail.as_deref(),
            Some(
                "fired 6.0 s after the first block, over 5 s; subject main, not kt-evloop; \
                 blocked in other_syscall, not sleep"
            )
        );
        let never = judge(&Incident { known: false, ..incident(Vec::new()) });
        assert_eq!(never.text, "never fired");
        assert!(never.detail.is_some_and(|d| d.starts_with("the daemon did not list kt-evloop")));
    }
}
