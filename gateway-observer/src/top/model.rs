//! What `top` reads from the daemon: the API's own types ([`crate::api::v1`]), which take an
//! absent value as unknown ("-") and ignore fields they do not know, so an older or a newer
//! daemon still renders; and the evidence of an alert as `key: value` lines.

pub use crate::api::v1::{
    Alert, AlertProcess, Alerts, Breakdown, EventLoop, InFlight, Listener, Process, SlowRequest, Snapshot, ThreadGroup,
    Upstream, UpstreamCall, Window,
};

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

/// Evidence flattened into `key: value` lines: nested objects as dotted keys, arrays of scalars
/// on one line, arrays of strings (stacks) one element per line, indented; places threads wait
/// (`waiting_at`'s `{"threads": N, "frames": [...]}`) as `N threads` and their frames.
/// Keys that say most about an alert come first (the stack among them), the rest in name order.
pub fn evidence_lines(evidence: &serde_json::Value) -> Vec<(String, String)> {
    const HEADLINE: [&str; 8] =
        ["reason", "syscall", "blocked_share", "longest_block_seconds", "peer", "stack_source", "stack", "waiting_at"];
    let mut out = Vec::new();
    match evidence.as_object() {
        Some(map) => {
            for key in HEADLINE {
                if let Some(value) = map.get(key) {
                    flatten(key, value, &mut out);
                }
            }
            for (key, value) in map.iter().filter(|(k, _)| !HEADLINE.contains(&k.as_str())) {
                flatten(key, value, &mut out);
            }
        }
        None => flatten("evidence", evidence, &mut out),
    }
    out
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
            out.push((prefix.to_owned(), String::new()));
            for item in items {
                out.push((String::new(), item.as_str().unwrap_or_default().to_owned()));
            }
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(|item| item["frames"].is_array()) => {
            for (at, item) in items.iter().enumerate() {
                out.push((format!("{prefix}[{}]", at + 1), format!("{} threads", scalar(&item["threads"]))));
                for frame in item["frames"].as_array().into_iter().flatten() {
                    out.push((String::new(), scalar(frame)));
                }
            }
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(scalar).collect();
            out.push((prefix.to_owned(), format!("[{}]", parts.join(", "))));
        }
        other => out.push((prefix.to_owned(), scalar(other))),
    }
}

fn scalar(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{}", (f * 1e4).round() / 1e4),
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
        assert_eq!(data.alerts[0].kind, "PoolSaturated");
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

    #[test]
    fn where_pool_threads_wait_shows_as_groups_of_frames() {
        let evidence = serde_json::json!({
            "threads": 64,
            "waiting_at": [
                {"threads": 54, "frames": ["clock_nanosleep+0x65 (libc.so.6)", "RateLimiter::acquire+0x31a (gw)"]},
                {"threads": 10, "frames": ["futex_wait+0x1 (libc.so.6)"]},
            ],
        });
        let lines = evidence_lines(&evidence);
        let shown: Vec<(&str, &str)> = lines.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            shown,
            vec![
                ("waiting_at[1]", "54 threads"),
                ("", "clock_nanosleep+0x65 (libc.so.6)"),
                ("", "RateLimiter::acquire+0x31a (gw)"),
                ("waiting_at[2]", "10 threads"),
                ("", "futex_wait+0x1 (libc.so.6)"),
                ("threads", "64"),
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
        let lines = evidence_lines(&evidence);
        assert_eq!(lines[0], ("reason".to_owned(), "socket".to_owned()), "headline keys first");
        let find = |k: &str| lines.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(find("reason"), Some("socket"));
        assert_eq!(find("blocked_share"), Some("0.8654"));
        assert_eq!(find("futex_word"), Some("-"));
        assert_eq!(find("blocked_seconds_by_reason.socket"), Some("1.35"));
        assert_eq!(find("hot"), Some("[1, 2]"));
        let stack_at = lines.iter().position(|(k, _)| k == "stack").expect("stack header");
        assert_eq!(lines[stack_at + 1], (String::new(), "recv+0x64 (libc.so.6)".to_owned()));
    }

    #[test]
    fn recorded_fixtures_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/top");
        let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).expect("fixture");
        let data = Data::parse(&read("blocked_snapshot.json"), &read("blocked_alerts.json")).expect("parses");
        assert_eq!(data.snapshot.processes[0].comm, "reference-gatew");
        assert!(data.snapshot.event_loops.iter().any(|l| l.thread == "gw-worker-0"));
        assert!(data.alerts.iter().any(|a| a.kind == "EventLoopBlocked" && a.subject == "gw-worker-0"));
    }
}
