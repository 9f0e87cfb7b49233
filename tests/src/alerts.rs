//! Polling the daemon's alerts: firing within a deadline, resolved after a fix, quiet when healthy.

use std::{
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::observer::Observer;

/// Alerts of one kind in one state.
pub fn alerts_of(alerts: &[Value], kind: &str, state: &str) -> Vec<Value> {
    alerts.iter().filter(|a| a["kind"] == kind && a["state"] == state).cloned().collect()
}

/// Polls the alerts of `kind` until `pick` finds something in one's evidence; panics after
/// `within` with the alerts seen. Returns it with how long it took.
pub fn wait_for_evidence<T>(
    observer: &Observer,
    kind: &str,
    within: Duration,
    pick: impl Fn(&Value) -> Option<T>,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        let alerts = observer.alerts();
        if let Some(found) = alerts.iter().filter(|a| a["kind"] == kind).find_map(|a| pick(&a["evidence"])) {
            return (found, start.elapsed());
        }
        assert!(start.elapsed() < within, "nothing sought in {kind} evidence within {within:?}: {alerts:#?}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The stack of an `EventLoopBlocked` evidence when it was unwound from userspace (issue 17).
pub fn live_stack(evidence: &Value) -> Option<Vec<String>> {
    if evidence["stack_source"] != "live" {
        return None;
    }
    serde_json::from_value::<Vec<String>>(evidence["stack"].clone()).ok().filter(|s| !s.is_empty())
}

/// The frame positions of `first` and of `then` below it (outer), if both are in `stack`.
pub fn frames_in_order(stack: &[String], first: &str, then: &str) -> Option<(usize, usize)> {
    let inner = stack.iter().position(|f| f.contains(first))?;
    let outer = stack.iter().skip(inner + 1).position(|f| f.contains(then))? + inner + 1;
    Some((inner, outer))
}

/// The user stack in the evidence of the first `EventLoopBlocked` that has one.
pub fn blocked_stack(alerts: &[Value]) -> Option<Vec<String>> {
    alerts
        .iter()
        .filter(|a| a["kind"] == "EventLoopBlocked")
        .find_map(|a| serde_json::from_value::<Vec<String>>(a["evidence"]["stack"].clone()).ok())
        .filter(|s| !s.is_empty())
}

/// Polls until a firing alert of `kind` carries `evidence[key]`, for at most `within`; the
/// evidence value, or the last such alert's whole evidence as the error.
pub fn wait_evidence(observer: &Observer, kind: &str, key: &str, within: Duration) -> Result<Value, Value> {
    let start = Instant::now();
    loop {
        let firing = alerts_of(&observer.alerts(), kind, "firing");
        if let Some(value) = firing.iter().map(|a| &a["evidence"][key]).find(|v| !v.is_null()) {
            return Ok(value.clone());
        }
        if start.elapsed() >= within {
            return Err(firing.first().map(|a| a["evidence"].clone()).unwrap_or_default());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Polls until an alert of `kind` fires, or panics after `within` with what the observer saw.
pub fn wait_firing(observer: &Observer, kind: &str, within: Duration) -> (Value, Duration) {
    wait_firing_about(observer, kind, None, within)
}

/// As `wait_firing`, for an alert about `subject` only when one is given.
pub fn wait_firing_about(
    observer: &Observer,
    kind: &str,
    subject: Option<&str>,
    within: Duration,
) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let firing = alerts_of(&observer.alerts(), kind, "firing");
        if let Some(alert) = firing.into_iter().find(|a| subject.is_none_or(|s| a["subject"] == s)) {
            return (alert, start.elapsed());
        }
        if start.elapsed() >= within {
            let (_, snapshot) = observer.get("/api/v1/snapshot").unwrap_or_default();
            panic!(
                "no {kind} firing about {subject:?} {within:?} into the fault; alerts {:#?}\nsnapshot {snapshot}",
                observer.alerts()
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Polls until no alert of `kind` is open and at least one resolved, or panics after `within`.
pub fn wait_resolved(observer: &Observer, kind: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let alerts = observer.alerts();
        let open: Vec<&Value> = alerts.iter().filter(|a| a["kind"] == kind && a["state"] != "resolved").collect();
        if open.is_empty() && !alerts_of(&alerts, kind, "resolved").is_empty() {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{kind} still open {within:?} after the fix: {open:#?}");
        thread::sleep(Duration::from_millis(250));
    }
}

/// Polls until an alert of `kind` names `cause` among its evidence's likely causes, or panics
/// after `within` with the causes it named.
pub fn assert_likely_cause(observer: &Observer, kind: &str, cause: &str, within: Duration) {
    let end = Instant::now() + within;
    let causes = loop {
        let alerts = observer.alerts();
        let causes = alerts.iter().find(|a| a["kind"] == kind).map(|a| a["evidence"]["likely_causes"].to_string());
        if causes.as_deref().is_some_and(|c| c.contains(cause)) || Instant::now() > end {
            break causes;
        }
        thread::sleep(Duration::from_millis(250));
    };
    assert!(causes.as_deref().is_some_and(|c| c.contains(cause)), "{kind}: likely causes {causes:?}, no {cause}");
}

/// Asserts no alert is raised for `duration`, polling.
pub fn assert_quiet(observer: &Observer, duration: Duration) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let raised = observer.alerts();
        if !raised.is_empty() {
            crate::summary::false_alerts(&raised);
            panic!("alerts in the healthy phase: {raised:#?}");
        }
        thread::sleep(Duration::from_millis(500));
    }
}
