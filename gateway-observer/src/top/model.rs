//! What `top` reads from the daemon: the API's own types ([`crate::api::v1`]), which take an
//! absent value as unknown ("-") and ignore fields they do not know, so an older or a newer
//! daemon still renders; and the evidence of an alert, typed by its kind on the wire
//! ([`AlertEvidence`]), as `key: value` lines.

pub use crate::api::v1::{
    Alert, AlertEvidence, AlertProcess, Alerts, Breakdown, EventLoop, InFlight, Listener, Process, SlowRequest,
    Snapshot, ThreadGroup, Upstream, UpstreamCall, WaitingGroup, Window,
};
use crate::api::v1::{Evidence, OneWayStall, UpstreamNoResponse};
use serde::Deserialize;

/// One refresh: what the daemon said at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Data {
    pub snapshot: Snapshot,
    pub alerts: Vec<Alert>,
}

impl Data {
    /// Both bodies as JSON.
    pub fn parse(snapshot: &str, alerts: &str) -> Result<Data, serde_json::Error> {
        Self::from_json(serde_json::from_str(snapshot)?, serde_json::from_str(alerts)?).map_err(|(_, e)| e)
    }

    /// Both bodies, typed, with every string's control characters escaped: names come from the
    /// targets, and everything `top` shows is drawn from here. An error names the body.
    pub fn from_json(
        mut snapshot: serde_json::Value,
        mut alerts: serde_json::Value,
    ) -> Result<Data, (&'static str, serde_json::Error)> {
        crate::printable::escape_json(&mut snapshot);
        crate::printable::escape_json(&mut alerts);
        Ok(Data {
            snapshot: serde_json::from_value(snapshot).map_err(|e| ("/api/v1/snapshot", e))?,
            alerts: serde_json::from_value::<Alerts>(alerts).map_err(|e| ("/api/v1/alerts", e))?.alerts,
        })
    }
}

/// Evidence as `key: value` lines. The keys that say most about an alert come first, read through
/// its kind's type ([`AlertEvidence::typed`]): a blocked loop's reason and stack, a pool's
/// `waiting_at`, a peer. The rest follow in name order, flattened from the JSON so that keys of a
/// newer daemon show too: nested objects as dotted keys, arrays of scalars on one line, arrays of
/// strings (stacks) one element per line, indented. Evidence this build cannot type (an unknown
/// kind, an older daemon's) shows every key in name order.
pub fn evidence_lines(evidence: &AlertEvidence) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let json = evidence.to_json();
    let Some(map) = json.as_object() else {
        flatten("evidence", &json, &mut out);
        return out;
    };
    let shown = evidence.typed().map_or(&[][..], |typed| headline(&typed, &mut out));
    for (key, value) in map.iter().filter(|(k, _)| !shown.contains(&k.as_str())) {
        flatten(key, value, &mut out);
    }
    out
}

/// Pushes the kind's headline lines; returns the keys they show.
fn headline(evidence: &Evidence, out: &mut Vec<(String, String)>) -> &'static [&'static str] {
    let mut line = |key: &str, value: String| out.push((key.to_owned(), value));
    match evidence {
        Evidence::EventLoopBlocked(e) => {
            line("reason", e.reason.to_string());
            line("syscall", e.syscall.as_deref().unwrap_or("-").to_owned());
            line("blocked_share", number(e.blocked_share));
            line("longest_block_seconds", number(e.longest_block_seconds));
            // A JVM's Java frames name the code; its native ones are the JVM's own parking.
            if let Some(java) = &e.java_stack {
                frames("java_stack", java, out);
            }
            let mut line = |key: &str, value: String| out.push((key.to_owned(), value));
            if let Some(source) = e.stack_source {
                line("stack_source", scalar(&serde_json::json!(source)));
            }
            if let Some(stack) = &e.stack {
                frames("stack", stack, out);
            }
            &["reason", "syscall", "blocked_share", "longest_block_seconds", "java_stack", "stack_source", "stack"]
        }
        Evidence::PoolSaturated(e) => {
            line("blocked_share", number(e.blocked_share));
            if let Some(groups) = &e.waiting_at {
                waiting_at("waiting_at", groups, out);
            }
            &["blocked_share", "waiting_at"]
        }
        Evidence::UpstreamNoResponse(UpstreamNoResponse { peer, .. })
        | Evidence::OneWayStall(OneWayStall { peer, .. }) => {
            line("peer", peer.clone());
            &["peer"]
        }
        _ => &[],
    }
}

/// A stack: a header line, then one frame a line.
fn frames(key: &str, frames: &[String], out: &mut Vec<(String, String)>) {
    if frames.is_empty() {
        out.push((key.to_owned(), "[]".to_owned()));
        return;
    }
    out.push((key.to_owned(), String::new()));
    out.extend(frames.iter().map(|frame| (String::new(), frame.clone())));
}

/// Where threads wait: `N threads` per place, then its frames.
fn waiting_at(key: &str, groups: &[WaitingGroup], out: &mut Vec<(String, String)>) {
    if groups.is_empty() {
        out.push((key.to_owned(), "[]".to_owned()));
    }
    for (at, group) in groups.iter().enumerate() {
        out.push((format!("{key}[{}]", at + 1), format!("{} threads", group.threads)));
        out.extend(group.frames.iter().map(|frame| (String::new(), frame.clone())));
    }
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let key = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                flatten(&key, value, out);
            }
        }
        Value::Array(items) if items.iter().all(Value::is_string) && !items.is_empty() => {
            let strings: Vec<String> = items.iter().filter_map(Value::as_str).map(str::to_owned).collect();
            frames(prefix, &strings, out);
        }
        // Evidence this build could not type still shows places threads wait as such.
        Value::Array(items) if !items.is_empty() && items.iter().all(|item| item["frames"].is_array()) => {
            waiting_at(prefix, &Vec::<WaitingGroup>::deserialize(value).unwrap_or_default(), out);
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(scalar).collect();
            out.push((prefix.to_owned(), format!("[{}]", parts.join(", "))));
        }
        other => out.push((prefix.to_owned(), scalar(other))),
    }
}

/// Four decimals at most, as the evidence pane has always shown measurements.
fn number(value: f64) -> String {
    format!("{}", (value * 1e4).round() / 1e4)
}

fn scalar(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => number(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_unknown_fields_are_tolerated() {
        let data = Data::parse(
            r#"{"processes":[{"pid":7,"comm":"nginx","inbound":{"per_second":3.5},"brand_new":{"x":1}}],"future":[1]}"#,
            r#"{"alerts":[{"kind":"PoolSaturated","extra":true}]}"#,
        )
        .expect("parses");
        let p = &data.snapshot.processes[0];
        assert_eq!((p.pid, p.comm.as_str(), p.inbound.per_second), (7, "nginx", Some(3.5)));
        assert_eq!(p.inbound.p99_seconds, None);
        assert_eq!(p.in_flight, None);
        assert_eq!(data.alerts[0].kind(), "PoolSaturated");
        assert_eq!(data.snapshot.version, None);
    }

    #[test]
    fn null_fields_are_missing_values() {
        let data = Data::parse(
            r#"{"slowest_requests":[{"pid":1,"status":null,"upstream":null,"breakdown":{"upstream_seconds":null}}]}"#,
            r#"{"alerts":[]}"#,
        )
        .expect("parses");
        let r = &data.snapshot.slowest_requests[0];
        assert_eq!((r.status, r.upstream.as_ref(), r.breakdown.upstream_seconds), (None, None, None));
    }

    /// One alert's evidence as recorded in `testdata/evidence/golden.json`.
    fn golden(name: &str) -> serde_json::Value {
        let text = include_str!("../../testdata/evidence/golden.json");
        let golden: serde_json::Value = serde_json::from_str(text).expect("golden parses");
        golden[name].clone()
    }

    fn shown(lines: &[(String, String)]) -> Vec<(&str, &str)> {
        lines.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn evidence_this_build_cannot_type_shows_every_key_in_name_order() {
        // An older daemon's pool evidence: no field but these, so not a `PoolSaturated`.
        let evidence = serde_json::json!({
            "threads": 64,
            "waiting_at": [
                {"threads": 54, "frames": ["clock_nanosleep+0x65 (libc.so.6)", "RateLimiter::acquire+0x31a (gw)"]},
                {"threads": 10, "frames": ["futex_wait+0x1 (libc.so.6)"]},
            ],
        });
        let lines = evidence_lines(&AlertEvidence::from_wire("PoolSaturated".into(), evidence));
        assert_eq!(
            shown(&lines),
            vec![
                ("threads", "64"),
                ("waiting_at[1]", "54 threads"),
                ("", "clock_nanosleep+0x65 (libc.so.6)"),
                ("", "RateLimiter::acquire+0x31a (gw)"),
                ("waiting_at[2]", "10 threads"),
                ("", "futex_wait+0x1 (libc.so.6)"),
            ]
        );
    }

    #[test]
    fn evidence_flattens_to_lines() {
        let evidence = serde_json::json!({
            "reason": "socket", "blocked_share": 0.865437523992535, "futex_word": null,
            "blocked_seconds_by_reason": {"socket": 1.35}, "stack": ["recv+0x64 (libc.so.6)", "main"],
            "hot": [1, 2],
        });
        let lines = evidence_lines(&AlertEvidence::from_wire("NewKind".into(), evidence));
        assert_eq!(lines[0], ("blocked_seconds_by_reason.socket".to_owned(), "1.35".to_owned()), "name order");
        let find = |k: &str| lines.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(find("reason"), Some("socket"));
        assert_eq!(find("blocked_share"), Some("0.8654"));
        assert_eq!(find("futex_word"), Some("-"));
        assert_eq!(find("hot"), Some("[1, 2]"));
        let stack_at = lines.iter().position(|(k, _)| k == "stack").expect("stack header");
        assert_eq!(lines[stack_at + 1], (String::new(), "recv+0x64 (libc.so.6)".to_owned()));
    }

    #[test]
    fn the_headline_is_read_through_the_kinds_type_then_the_rest_in_name_order() {
        let cases: [(&str, &[(&str, &str)]); 3] = [
            (
                "EventLoopBlocked full",
                &[
                    ("reason", "futex_timed"),
                    ("syscall", "futex"),
                    ("blocked_share", "0.71"),
                    ("longest_block_seconds", "0.12"),
                    ("java_stack", ""),
                    ("", "Handler.channelRead0(Handler.java:181)"),
                    ("", "- waiting to lock Object"),
                    ("stack_source", "live"),
                    ("stack", ""),
                    ("", "futex_wait+0x1 (libc.so.6)"),
                    ("", "lock+0x10 (gw)"),
                    ("blocked_seconds", "3.55"),
                ],
            ),
            (
                "PoolSaturated full",
                &[
                    ("blocked_share", "0.9"),
                    ("waiting_at[1]", "2 threads"),
                    ("", "futex_wait+0x1 (libc.so.6)"),
                    ("", "acquire+0x10 (libgw.so)"),
                    ("waiting_at[2]", "1 threads"),
                    ("", "recv+0x2 (libc.so.6)"),
                    ("blocked_seconds_by_reason.futex_timed", "70.5"),
                ],
            ),
            ("OneWayStall bare", &[("peer", "10.0.0.2:8081"), ("last_backoff_seconds", "0.8")]),
        ];
        for (name, first) in cases {
            let kind = name.split(' ').next().unwrap_or_default();
            let lines = evidence_lines(&AlertEvidence::from_wire(kind.into(), golden(name)));
            assert_eq!(shown(&lines)[..first.len()], *first, "{name}");
            // The headline (all but the last line) is not repeated among the rest.
            for (key, _) in first[..first.len() - 1].iter().filter(|(k, _)| !k.is_empty()) {
                assert_eq!(lines.iter().filter(|(k, _)| k == key).count(), 1, "{name}: {key} shown once");
            }
        }
    }

    #[test]
    fn recorded_fixtures_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/top");
        let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).expect("fixture");
        let data = Data::parse(&read("blocked_snapshot.json"), &read("blocked_alerts.json")).expect("parses");
        assert_eq!(data.snapshot.processes[0].comm, "reference-gatew");
        assert!(data.snapshot.event_loops.iter().any(|l| l.thread == "gw-worker-0"));
        assert!(data.alerts.iter().any(|a| a.kind() == "EventLoopBlocked" && a.subject == "gw-worker-0"));
    }
}
