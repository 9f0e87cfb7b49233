//! The alert lifecycle: pending → firing → resolved, with dedup by id and hysteresis.
//!
//! [`AlertBook`] is the only owner of alerts. It is a pure state machine over the findings of
//! each evaluation and the `now` it is given; it never reads a clock, so a stepped wall clock
//! only ever delays a transition (elapsed times that come out negative count as zero).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::{Duration, SystemTime},
};

use super::{Alert, AlertState, Finding, Transition};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// The condition must hold this long before the alert fires (pending until then). Zero fires
    /// at the first finding.
    pub fire_after: Duration,
    /// A firing alert resolves only once its condition has been absent this long, so a condition
    /// that flickers between ticks stays one alert instead of a page per tick.
    pub resolve_after: Duration,
    /// Resolved alerts stay listed this long (`/api/v1/alerts` shows the last 10 minutes).
    pub keep_resolved: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            fire_after: Duration::from_secs(1),
            resolve_after: Duration::from_secs(5),
            keep_resolved: Duration::from_secs(10 * 60),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    alert: Alert,
    /// The last evaluation whose findings held this alert's id.
    last_seen: SystemTime,
}

/// Every pending, firing and recently resolved alert, keyed by id.
#[derive(Debug, Clone)]
pub struct AlertBook {
    config: LifecycleConfig,
    entries: HashMap<String, Entry>,
}

impl AlertBook {
    pub fn new(config: LifecycleConfig) -> Self {
        Self { config, entries: HashMap::new() }
    }

    /// One evaluation at `now` with every finding of the detectors' windows. Returns every state
    /// change: alerts created (pending, or firing when `fire_after` is zero), pending → firing,
    /// and firing → resolved. Pending alerts whose condition went away are dropped without a
    /// transition: they never fired, so nobody was told about them.
    ///
    /// Only active findings (the condition held in the last tick) create alerts, promote them, or
    /// keep firing ones from resolving; an inactive one (its window still remembers a condition
    /// that ended) only keeps a pending alert pending and refreshes evidence.
    pub fn evaluate(&mut self, now: SystemTime, findings: Vec<Finding>) -> Vec<Transition> {
        // Last finding per id wins; a BTreeMap keeps the order of transitions deterministic.
        let mut found: BTreeMap<String, Finding> = BTreeMap::new();
        for finding in findings {
            found.insert(finding.id(), finding);
        }

        // Ids whose alert this evaluation holds as it is (not judged absent); absence is judged by
        // this, not by `last_seen == now`, which would also match an earlier evaluation given the
        // same `now`.
        let mut held: HashSet<String> = HashSet::new();
        let mut transitions = Vec::new();
        for (id, finding) in found {
            let active = finding.active;
            let fire_after =
                if finding.kind().holds_its_own_duration() { Duration::ZERO } else { self.config.fire_after };
            // The condition began `held_for` ago by the events' own clock, or at the alert's
            // `since`, whichever is earlier.
            let served = finding.held_for >= fire_after;
            match self.entries.get_mut(&id) {
                Some(entry) if entry.alert.state != AlertState::Resolved => {
                    let alert = &mut entry.alert;
                    // An inactive finding keeps a pending alert pending, but does not keep a
                    // firing one from resolving.
                    if active || alert.state == AlertState::Pending {
                        held.insert(id);
                    }
                    if active {
                        entry.last_seen = now;
                    }
                    alert.process.comm = finding.comm;
                    alert.summary = finding.summary;
                    alert.evidence = finding.evidence.clone();
                    if active
                        && alert.state == AlertState::Pending
                        && (served || held_for(alert.since, now, fire_after))
                    {
                        alert.state = AlertState::Firing;
                        transitions.push(Transition { alert: alert.clone(), from: Some(AlertState::Pending) });
                    }
                }
                // A condition the window remembers but that no longer holds opens nothing.
                _ if !active => {}
                // New, or back after resolving: a new alert under the same id.
                _ => {
                    let state = if served { AlertState::Firing } else { AlertState::Pending };
                    let alert = Alert::new(finding, state, now);
                    transitions.push(Transition { alert: alert.clone(), from: None });
                    held.insert(id.clone());
                    self.entries.insert(id, Entry { alert, last_seen: now });
                }
            }
        }

        let config = self.config;
        self.entries.retain(|id, entry| {
            if held.contains(id) {
                return true;
            }
            let alert = &mut entry.alert;
            match alert.state {
                AlertState::Pending => false,
                AlertState::Firing => {
                    if held_for(entry.last_seen, now, config.resolve_after) {
                        alert.state = AlertState::Resolved;
                        alert.resolved_at = Some(now);
                        transitions.push(Transition { alert: alert.clone(), from: Some(AlertState::Firing) });
                    }
                    true
                }
                AlertState::Resolved => {
                    let resolved_at = alert.resolved_at.unwrap_or(entry.last_seen);
                    elapsed(resolved_at, now) < config.keep_resolved
                }
            }
        });
        transitions
    }

    /// Pending, firing, and resolved-within-keep alerts: firing first, then pending, then
    /// resolved, each oldest `since` first (id breaks ties, so the order is stable).
    pub fn alerts(&self) -> Vec<&Alert> {
        let mut alerts: Vec<&Alert> = self.entries.values().map(|e| &e.alert).collect();
        alerts.sort_by(|a, b| (rank(a.state), a.since, &a.id).cmp(&(rank(b.state), b.since, &b.id)));
        alerts
    }
}

fn rank(state: AlertState) -> u8 {
    match state {
        AlertState::Firing => 0,
        AlertState::Pending => 1,
        AlertState::Resolved => 2,
    }
}

/// `now - then`, zero when the wall clock went backwards in between.
fn elapsed(then: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or(Duration::ZERO)
}

/// How far short of a whole number of ticks two evaluations may be dated. The daemon dates each
/// evaluation at its tick's scheduled time (ticks on a fixed grid), read from the wall clock
/// less the monotonic time since: two such readings a second apart can differ from 1 s by a few
/// microseconds either way, and 0.999999 s must not wait one more tick.
const CLOCK_SLACK: Duration = Duration::from_micros(500);

/// Whether `span` has passed from `then` to `now`, within `CLOCK_SLACK`.
fn held_for(then: SystemTime, now: SystemTime, span: Duration) -> bool {
    elapsed(then, now) + CLOCK_SLACK >= span
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        alerts::AlertKind,
        api::v1,
        detect::evidence_golden::{bare, blocked_evidence},
    };

    const T0_MS: u64 = 1_796_216_701_120; // 2026-12-02T13:05:01.120Z

    fn at(ms_after_t0: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(T0_MS + ms_after_t0)
    }

    fn blocked(subject: &str, summary: &str) -> Finding {
        Finding {
            pid: 1234,
            comm: "java".into(),
            subject: subject.into(),
            summary: summary.into(),
            evidence: blocked_evidence(Some("futex")),
            active: true,
            held_for: std::time::Duration::ZERO,
            stack_id: None,
        }
    }

    /// The same finding from a window that still holds it after it ended.
    fn remembered(subject: &str) -> Finding {
        Finding { active: false, ..blocked(subject, "s") }
    }

    fn book() -> AlertBook {
        AlertBook::new(LifecycleConfig::default())
    }

    fn states(transitions: &[Transition]) -> Vec<(Option<AlertState>, AlertState)> {
        transitions.iter().map(|t| (t.from, t.alert.state)).collect()
    }

    #[test]
    fn pending_then_firing_after_fire_after() {
        let mut book = book();
        let t = book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        assert_eq!(states(&t), [(None, AlertState::Pending)]);
        assert_eq!(t[0].alert.id(), "EventLoopBlocked/1234/nio-2");

        let t = book.evaluate(at(500), vec![blocked("nio-2", "s")]);
        assert!(t.is_empty(), "fired after 500 ms, fire_after is 1 s: {t:?}");

        let t = book.evaluate(at(1000), vec![blocked("nio-2", "s")]);
        assert_eq!(states(&t), [(Some(AlertState::Pending), AlertState::Firing)]);
        assert_eq!(t[0].alert.since(), at(0), "firing must keep the pending start as since");
        assert_eq!(book.alerts()[0].state(), AlertState::Firing);
    }

    /// A loop iteration that has not come back for a second has shown its condition for a
    /// second: no more pending; one that has for 600 ms waits the other 400 ms.
    #[test]
    fn a_condition_the_events_date_serves_its_pending_time() {
        let mut book = book();
        let stuck = Finding { held_for: Duration::from_secs(1), ..blocked("nio-1", "s") };
        let t = book.evaluate(at(0), vec![stuck]);
        assert_eq!(states(&t), [(None, AlertState::Firing)]);

        let mut book = self::book();
        let part = |ms| Finding { held_for: Duration::from_millis(ms), ..blocked("nio-1", "s") };
        let t = book.evaluate(at(0), vec![part(600)]);
        assert_eq!(states(&t), [(None, AlertState::Pending)]);
        let t = book.evaluate(at(300), vec![part(900)]);
        assert!(t.is_empty(), "fired after 900 ms of a 1 s pending: {t:?}");
        let t = book.evaluate(at(400), vec![part(1000)]);
        assert_eq!(states(&t), [(Some(AlertState::Pending), AlertState::Firing)]);
    }

    #[test]
    fn ticks_a_hair_short_of_a_second_apart_fire_and_resolve() {
        // Two 500 ms ticks dated from two clocks: 999.998 ms apart is one second of ticks.
        let hair = Duration::from_micros(2);
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        book.evaluate(at(500), vec![blocked("nio-2", "s")]);
        let t = book.evaluate(at(1000) - hair, vec![blocked("nio-2", "s")]);
        assert_eq!(states(&t), [(Some(AlertState::Pending), AlertState::Firing)]);
        let t = book.evaluate(at(6000) - hair, vec![]);
        assert_eq!(states(&t), [(Some(AlertState::Firing), AlertState::Resolved)]);
        // A tick short of the span is still short.
        let mut early = self::book();
        early.evaluate(at(0), vec![blocked("nio-2", "s")]);
        let t = early.evaluate(at(990), vec![blocked("nio-2", "s")]);
        assert!(t.is_empty(), "fired 990 ms into a 1 s pending: {t:?}");
    }

    #[test]
    fn zero_fire_after_fires_at_once() {
        let mut book = AlertBook::new(LifecycleConfig { fire_after: Duration::ZERO, ..LifecycleConfig::default() });
        let t = book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        assert_eq!(states(&t), [(None, AlertState::Firing)]);
    }

    #[test]
    fn a_condition_that_measures_its_own_duration_fires_at_once() {
        // An unanswered request's age is already the time the condition held.
        let mut book = book();
        let unanswered = Finding { pid: 1234, subject: "10.0.0.2:8081".into(), ..bare(AlertKind::UpstreamNoResponse) };
        let t = book.evaluate(at(0), vec![unanswered.clone(), blocked("nio-2", "s")]);
        assert_eq!(states(&t), [(None, AlertState::Pending), (None, AlertState::Firing)], "{t:?}");
        assert_eq!(t[1].alert.id(), "UpstreamNoResponse/1234/10.0.0.2:8081");
        // It resolves like any other: 5 s after the condition was last seen.
        let t = book.evaluate(at(4_500), vec![]);
        assert!(t.iter().all(|t| t.alert.state != AlertState::Resolved), "{t:?}");
        let t = book.evaluate(at(5_000), vec![]);
        assert_eq!(states(&t), [(Some(AlertState::Firing), AlertState::Resolved)]);
    }

    #[test]
    fn pending_that_goes_away_is_dropped_silently() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        let t = book.evaluate(at(500), vec![]);
        assert!(t.is_empty(), "a pending alert that never fired reported {t:?}");
        assert!(book.alerts().is_empty());
    }

    #[test]
    fn gap_shorter_than_resolve_after_does_not_resolve() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        book.evaluate(at(1000), vec![blocked("nio-2", "s")]);
        for ms in [2000, 3000, 4000, 5000] {
            let t = book.evaluate(at(ms), vec![]);
            assert!(t.is_empty(), "resolved {} ms after last seen: {t:?}", ms - 1000);
        }
        // Back within the window: still the same firing alert, no transition.
        let t = book.evaluate(at(5500), vec![blocked("nio-2", "s")]);
        assert!(t.is_empty(), "{t:?}");
        let alerts = book.alerts();
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].state(), AlertState::Firing);
        assert_eq!(alerts[0].since(), at(0));
    }

    #[test]
    fn gap_of_resolve_after_resolves_with_resolved_at() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        book.evaluate(at(1000), vec![blocked("nio-2", "s")]);
        let t = book.evaluate(at(5999), vec![]);
        assert!(t.is_empty(), "resolved 4999 ms after last seen: {t:?}");
        let t = book.evaluate(at(6000), vec![]);
        assert_eq!(states(&t), [(Some(AlertState::Firing), AlertState::Resolved)]);
        assert_eq!(t[0].alert.resolved_at(), Some(at(6000)));
        assert_eq!(book.alerts()[0].state(), AlertState::Resolved);
    }

    #[test]
    fn same_id_in_one_evaluation_is_one_alert_and_last_wins() {
        let mut book = book();
        let t =
            book.evaluate(at(0), vec![blocked("nio-2", "first"), blocked("nio-3", "other"), blocked("nio-2", "last")]);
        assert_eq!(t.len(), 2, "{t:?}");
        let alerts = book.alerts();
        assert_eq!(alerts.len(), 2);
        let nio2 = alerts.iter().find(|a| a.subject() == "nio-2").expect("nio-2 listed");
        assert_eq!(nio2.summary(), "last");

        // Later findings update summary and evidence without a transition.
        let mut update = blocked("nio-2", "updated");
        update.evidence = blocked_evidence(Some("nanosleep"));
        let updated = update.evidence.clone();
        let t = book.evaluate(at(500), vec![update, blocked("nio-3", "other")]);
        assert!(t.is_empty(), "{t:?}");
        let alerts = book.alerts();
        let nio2 = alerts.iter().find(|a| a.subject() == "nio-2").expect("nio-2 listed");
        assert_eq!(nio2.summary(), "updated");
        assert_eq!(nio2.evidence(), &updated);
    }

    #[test]
    fn resolved_is_kept_for_keep_resolved_then_gone() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        book.evaluate(at(1000), vec![blocked("nio-2", "s")]);
        book.evaluate(at(6000), vec![]);
        let ten_min = 600_000;
        book.evaluate(at(6000 + ten_min - 1), vec![]);
        assert_eq!(book.alerts().len(), 1, "resolved alert dropped before keep_resolved");
        let t = book.evaluate(at(6000 + ten_min), vec![]);
        assert!(t.is_empty(), "removal is not a transition: {t:?}");
        assert!(book.alerts().is_empty(), "resolved alert kept past keep_resolved");
    }

    #[test]
    fn refire_after_resolve_is_a_new_alert_with_a_new_since() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        book.evaluate(at(1000), vec![blocked("nio-2", "s")]);
        book.evaluate(at(6000), vec![]);

        let t = book.evaluate(at(7000), vec![blocked("nio-2", "again")]);
        assert_eq!(states(&t), [(None, AlertState::Pending)]);
        assert_eq!(t[0].alert.since(), at(7000));
        assert_eq!(t[0].alert.resolved_at(), None);
        assert_eq!(t[0].alert.id(), "EventLoopBlocked/1234/nio-2");

        let t = book.evaluate(at(8000), vec![blocked("nio-2", "again")]);
        assert_eq!(states(&t), [(Some(AlertState::Pending), AlertState::Firing)]);
        let alerts = book.alerts();
        assert_eq!(alerts.len(), 1, "the resolved alert must be replaced, not listed twice");
        assert_eq!(alerts[0].since(), at(7000));
    }

    #[test]
    fn alerts_sorted_firing_then_pending_then_resolved_by_since() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("resolved", "s")]);
        book.evaluate(at(1000), vec![blocked("resolved", "s"), blocked("firing-b", "s")]);
        book.evaluate(at(1500), vec![blocked("firing-b", "s"), blocked("firing-a", "s")]);
        book.evaluate(at(2500), vec![blocked("firing-b", "s"), blocked("firing-a", "s"), blocked("firing-c", "s")]);
        book.evaluate(at(6000), vec![blocked("firing-b", "s"), blocked("firing-a", "s"), blocked("firing-c", "s")]);
        let order: Vec<(&str, AlertState)> = book.alerts().iter().map(|a| (a.subject(), a.state())).collect();
        assert_eq!(
            order,
            [
                ("firing-b", AlertState::Firing),
                ("firing-a", AlertState::Firing),
                ("firing-c", AlertState::Firing),
                ("resolved", AlertState::Resolved),
            ]
        );
        book.evaluate(at(6100), vec![blocked("firing-a", "s"), blocked("new", "s")]);
        let order: Vec<&str> = book.alerts().iter().map(|a| a.subject()).collect();
        assert_eq!(order, ["firing-b", "firing-a", "firing-c", "new", "resolved"]);
    }

    #[test]
    fn absence_at_the_same_now_still_resolves() {
        let mut book = AlertBook::new(LifecycleConfig {
            fire_after: Duration::ZERO,
            resolve_after: Duration::ZERO,
            ..LifecycleConfig::default()
        });
        book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        let t = book.evaluate(at(0), vec![]);
        assert_eq!(states(&t), [(Some(AlertState::Firing), AlertState::Resolved)]);
    }

    #[test]
    fn clock_stepping_back_does_not_fire_or_panic() {
        let mut book = book();
        book.evaluate(at(5000), vec![blocked("nio-2", "s")]);
        let t = book.evaluate(at(0), vec![blocked("nio-2", "s")]);
        assert!(t.is_empty(), "{t:?}");
        assert_eq!(book.alerts()[0].state(), AlertState::Pending);
    }

    #[test]
    fn serializes_to_the_design_schema() {
        let mut book = book();
        let finding =
            blocked("reactor-http-nio-2", "event loop blocked 71% of the last 5s in futex wait (1 block > 100 ms)");
        let evidence = finding.evidence.to_json().to_string();
        book.evaluate(at(0), vec![finding.clone()]);
        book.evaluate(at(1000), vec![finding]);
        let firing = serde_json::to_string(&v1::Alert::from(book.alerts()[0])).expect("serializes");
        assert_eq!(
            firing,
            concat!(
                r#"{"id":"EventLoopBlocked/1234/reactor-http-nio-2","kind":"EventLoopBlocked","#,
                r#""state":"firing","since":"2026-12-02T13:05:01.120Z","resolved_at":null,"#,
                r#""process":{"pid":1234,"comm":"java"},"subject":"reactor-http-nio-2","#,
                r#""summary":"event loop blocked 71% of the last 5s in futex wait (1 block > 100 ms)","#,
                r#""evidence":"#
            )
            .to_owned()
                + &evidence
                + "}"
        );

        book.evaluate(at(6000), vec![]);
        let resolved = serde_json::to_value(v1::Alert::from(book.alerts()[0])).expect("serializes");
        assert_eq!(resolved["state"], "resolved");
        assert_eq!(resolved["resolved_at"], "2026-12-02T13:05:07.120Z");
    }

    #[test]
    fn a_condition_that_ended_opens_nothing() {
        let mut book = book();
        assert!(book.evaluate(at(0), vec![remembered("nio-1")]).is_empty());
        assert!(book.alerts().is_empty());
    }

    #[test]
    fn a_transient_that_ended_never_goes_from_pending_to_firing() {
        let mut book = book();
        let t = book.evaluate(at(0), vec![blocked("nio-1", "s")]);
        assert_eq!(states(&t), [(None, AlertState::Pending)]);
        // The window still remembers it for a while: pending stays pending, never fires.
        for ms in [1000, 2000, 3000, 4000] {
            assert!(book.evaluate(at(ms), vec![remembered("nio-1")]).is_empty(), "at {ms} ms");
            assert_eq!(book.alerts()[0].state(), AlertState::Pending);
        }
        // Then the window forgets it: dropped without a word.
        assert!(book.evaluate(at(5000), vec![]).is_empty());
        assert!(book.alerts().is_empty());
    }

    #[test]
    fn a_pending_alert_fires_when_the_condition_is_back_and_old_enough() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-1", "s")]);
        assert!(book.evaluate(at(1000), vec![remembered("nio-1")]).is_empty());
        let t = book.evaluate(at(1500), vec![blocked("nio-1", "s")]);
        assert_eq!(states(&t), [(Some(AlertState::Pending), AlertState::Firing)]);
    }

    #[test]
    fn a_firing_alert_resolves_when_only_the_window_remembers_it() {
        let mut book = book();
        book.evaluate(at(0), vec![blocked("nio-1", "s")]);
        book.evaluate(at(1000), vec![blocked("nio-1", "s")]);
        assert!(book.evaluate(at(4000), vec![remembered("nio-1")]).is_empty(), "resolve_after is 5 s");
        let t = book.evaluate(at(6000), vec![remembered("nio-1")]);
        assert_eq!(states(&t), [(Some(AlertState::Firing), AlertState::Resolved)]);
    }
}
