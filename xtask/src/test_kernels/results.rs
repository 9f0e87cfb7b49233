//! What the guest reported: the `@@KT` lines `guest/init.sh` prints on the console, and the
//! blocks between `@@KT begin X` and `@@KT end X` (check's output, the daemon's stderr). Other
//! console lines (firmware, kernel) are ignored outside those blocks.

use std::collections::BTreeMap;

const MARK: &str = "@@KT ";

#[derive(Debug, Default)]
pub struct Guest {
    /// `uname -r`: set once `/init` ran at all.
    pub kernel: Option<String>,
    /// `gateway-observer check`'s output, line by line.
    pub check: Vec<String>,
    pub check_exit: Option<i32>,
    /// The daemon's run against the fixtures.
    pub run: Run,
    /// The second daemon's, against the kernel TLS server.
    pub ktls: KtlsRun,
    /// `/init` reached its end.
    pub done: bool,
}

#[derive(Debug, Default)]
pub struct Run {
    /// `/init` began it.
    pub began: bool,
    /// Why the daemon was never ready for the workload, if it was not.
    pub not_ready: Option<String>,
    /// Seconds from the daemon's start until it served `/ready` with every target attached.
    pub ready_after: Option<f64>,
    /// Ground truth the fixtures measured: `sleep`, `futex` (timed waits that time out),
    /// `woken` (timed waits woken by another thread) → seconds.
    pub truth: BTreeMap<String, f64>,
    pub requests_sent: Option<u64>,
    /// 200 responses the client got.
    pub requests_answered: Option<u64>,
    /// The same over TLS, to `kt-tlsd` (OpenSSL's `s_server`).
    pub tls_requests_sent: Option<u64>,
    pub tls_requests_answered: Option<u64>,
    pub metrics: Vec<Sample>,
    pub stderr: Vec<String>,
    /// What the guest or a fixture noticed on the way (`@@KT note …`), e.g. a collection that did
    /// not come.
    pub notes: Vec<String>,
    pub incident: Incident,
}

/// HTTPS requests to `kt-ktlsd`, whose sessions kernel TLS carries, under a daemon that hooks no
/// TLS library.
#[derive(Debug, Default)]
pub struct KtlsRun {
    pub began: bool,
    pub sent: Option<u64>,
    pub answered: Option<u64>,
    /// The same through nginx, which proxies them to `kt-httpd`.
    pub nginx_sent: Option<u64>,
    pub nginx_answered: Option<u64>,
    /// The same to `kt-ktls13` (TLS 1.3, whose receiving OpenSSL 3.0 does not offload), and
    /// `/proc/net/tls_stat` just before them.
    pub tls13_sent: Option<u64>,
    pub tls13_answered: Option<u64>,
    pub stat_before_tls13: BTreeMap<String, u64>,
    pub metrics: Vec<Sample>,
    pub notes: Vec<String>,
    /// `/proc/net/tls_stat`: sessions whose sending (`TlsTxSw`) and receiving (`TlsRxSw`) the
    /// kernel took over.
    pub stat: BTreeMap<String, u64>,
}

/// The blocked event loop (`guest/loop.c`) as the guest reported it.
#[derive(Debug, Default)]
pub struct Incident {
    /// Seconds the daemon watched the loop healthy, from ready to the go of the block.
    pub healthy_for: Option<f64>,
    /// The daemon listed the loop among its event loops before the block.
    pub known: bool,
    /// When the loop's first block began and its last ended, in Unix seconds: the guest's wall
    /// clock, which also stamps the alerts.
    pub blocked: Option<(f64, f64)>,
    /// The daemon's alert transitions, one JSON line each.
    pub alerts: Vec<String>,
}

/// One Prometheus sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Run {
    /// The startup line naming where socket bytes come from, without its prefix:
    /// `socket bytes from S` → `S`.
    pub fn socket_source(&self) -> Option<&str> {
        self.stderr.iter().find_map(|l| l.strip_prefix("gateway-observer: socket bytes from "))
    }

    /// The startup lines saying what the daemon runs without: `degraded: X` → `X`.
    pub fn degradations(&self) -> Vec<&str> {
        self.stderr.iter().filter_map(|l| l.strip_prefix("gateway-observer: degraded: ")).collect()
    }

    /// The sum of `name`'s samples whose labels include every pair of `want` (0 when none: a
    /// plain `sum` of nothing is -0).
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        sum(&self.metrics, name, want)
    }
}

impl KtlsRun {
    /// As `Run::sum`, over the second daemon's samples.
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        sum(&self.metrics, name, want)
    }
}

fn sum(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && want.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|l| l == v)))
        .fold(0.0, |total, s| total + s.value)
}

/// Which block the parser is in.
enum Block {
    None,
    Check,
    Stderr,
}

pub fn parse(console: &str) -> Guest {
    let mut guest = Guest::default();
    let mut block = Block::None;
    for raw in console.lines() {
        let line = raw.trim_end_matches('\r');
        // The marker may follow firmware escape codes on the same line.
        let Some(at) = line.find(MARK) else {
            match block {
                Block::Check => guest.check.push(line.to_owned()),
                Block::Stderr => guest.run.stderr.push(line.to_owned()),
                Block::None => {}
            }
            continue;
        };
        let rest = &line[at + MARK.len()..];
        let (word, args) = rest.split_once(' ').unwrap_or((rest, ""));
        match word {
            "kernel" => guest.kernel = Some(args.to_owned()),
            "begin" if args == "check" => block = Block::Check,
            "begin" if args.starts_with("stderr") => block = Block::Stderr,
            "begin" if args == "run" => guest.run.began = true,
            "end" => block = Block::None,
            "check-exit" => guest.check_exit = args.parse().ok(),
            "not-ready" if args == "exited" => guest.run.not_ready = Some("the daemon exited".into()),
            "not-ready" => guest.run.not_ready = Some("the daemon was not ready within 60 s".into()),
            "not-attached" => {
                guest.run.not_ready = Some("the daemon did not attach to the 6 fixtures within 10 s".into())
            }
            "ready" => guest.run.ready_after = seconds_between(args),
            "truth" => {
                if let Some((reason, ns)) = args.split_once(' ').and_then(|(r, n)| Some((r, n.parse::<f64>().ok()?))) {
                    guest.run.truth.insert(reason.to_owned(), ns / 1e9);
                }
            }
            "sent" => guest.run.requests_sent = args.parse().ok(),
            "client" => guest.run.requests_answered = args.strip_prefix("answered ").and_then(|n| n.parse().ok()),
            "tls-sent" => guest.run.tls_requests_sent = args.parse().ok(),
            "tls-answered" => guest.run.tls_requests_answered = args.parse().ok(),
            "metric" => guest.run.metrics.extend(parse_sample(args)),
            "note" => guest.run.notes.push(args.to_owned()),
            "loop-healthy" => {
                let (times, known) = args.rsplit_once(' ').unwrap_or((args, ""));
                guest.run.incident.healthy_for = seconds_between(times);
                guest.run.incident.known = known == "known";
            }
            "loop-blocked" => guest.run.incident.blocked = unix_seconds_pair(args),
            "alert" => guest.run.incident.alerts.push(args.to_owned()),
            "ktls-begin" => guest.ktls.began = true,
            "ktls-sent" => guest.ktls.sent = args.parse().ok(),
            "ktls-answered" => guest.ktls.answered = args.parse().ok(),
            "ktls-nginx-sent" => guest.ktls.nginx_sent = args.parse().ok(),
            "ktls-nginx-answered" => guest.ktls.nginx_answered = args.parse().ok(),
            "ktls-13-sent" => guest.ktls.tls13_sent = args.parse().ok(),
            "ktls-13-answered" => guest.ktls.tls13_answered = args.parse().ok(),
            "ktls-stat-before-13" => guest.ktls.stat_before_tls13 = name_value_pairs(args),
            "ktls-metric" => guest.ktls.metrics.extend(parse_sample(args)),
            "ktls-note" => guest.ktls.notes.push(args.to_owned()),
            "ktls-stat" => guest.ktls.stat = name_value_pairs(args),
            "done" => guest.done = true,
            _ => {}
        }
    }
    guest
}

/// `NAME VALUE NAME VALUE…` → NAME → VALUE.
fn name_value_pairs(args: &str) -> BTreeMap<String, u64> {
    let words: Vec<&str> = args.split_whitespace().collect();
    words.chunks_exact(2).filter_map(|pair| Some((pair[0].to_owned(), pair[1].parse().ok()?))).collect()
}

/// `START NOW` (uptime seconds) → NOW - START.
fn seconds_between(args: &str) -> Option<f64> {
    let (start, now) = args.split_once(' ')?;
    Some(now.parse::<f64>().ok()? - start.parse::<f64>().ok()?)
}

/// `FROM UNTIL` in Unix nanoseconds → seconds.
fn unix_seconds_pair(args: &str) -> Option<(f64, f64)> {
    let (from, until) = args.split_once(' ')?;
    Some((from.parse::<f64>().ok()? / 1e9, until.parse::<f64>().ok()? / 1e9))
}

/// `name{k="v",...} value`, as the daemon exposes it (no escaped quotes in our label values).
fn parse_sample(text: &str) -> Option<Sample> {
    let (series, value) = text.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let labels = labels
        .split("\",")
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.to_owned(), v.trim_end_matches('"').to_owned()))
        })
        .collect();
    Some(Sample { name: name.to_owned(), labels, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\u{1b}[2J@@KT kernel 6.1.0-57-cloud-amd64\r
@@KT begin check\r
privileges   ok  root\r
verdict: ready\r
@@KT check-exit 0\r
@@KT end check\r
[    9.1] a kernel message\r
@@KT begin run\r
@@KT ready 9.5 14.25\r
@@KT truth sleep 2010000000\r
@@KT note kt-wake: 9 of 10 waits were woken\r
@@KT sent 100\r
@@KT client answered 100\r
@@KT loop-healthy 14.25 23.5 known\r
@@KT loop-blocked 1796216701120000000 1796216707370000000\r
@@KT alert {\"ts\":\"2026-12-02T13:05:02.320Z\",\"event\":\"pending\"}\r
@@KT metric gateway_observer_thread_offcpu_seconds_total{process=\"kt-nap\",thread_group=\"kt-nap\",reason=\"sleep\"} 2.004\r
@@KT metric gateway_observer_collections_total 12\r
@@KT begin stderr\r
gateway-observer: socket bytes from TCP functions (fentry/fexit tcp_recvmsg, tcp_sendmsg)\r
gateway-observer: degraded: no socket queue wait (unknown BTF type): how long request bytes waited is unknown\r
gateway-observer: watching 4 target spec(s)\r
@@KT end stderr\r
@@KT end run\r
@@KT ktls-begin\r
@@KT ktls-sent 10\r
@@KT ktls-answered 10\r
@@KT ktls-metric gateway_observer_kernel_tls_connections{offload=\"both\"} 10\r
@@KT ktls-stat TlsTxSw 10 TlsRxSw 10 \r
@@KT ktls-end\r
@@KT done\r
";

    #[test]
    fn reads_every_kind_of_line() {
        let guest = parse(CONSOLE);
        assert_eq!(guest.kernel.as_deref(), Some("6.1.0-57-cloud-amd64"));
        assert_eq!(guest.check, ["privileges   ok  root", "verdict: ready"]);
        assert_eq!(guest.check_exit, Some(0));
        assert!(guest.done);
        let run = &guest.run;
        assert!(run.began);
        assert_eq!(run.not_ready, None);
        assert_eq!(run.ready_after, Some(4.75));
        assert_eq!(run.truth["sleep"], 2.01);
        assert_eq!(run.notes, ["kt-wake: 9 of 10 waits were woken"]);
        assert_eq!((run.requests_sent, run.requests_answered), (Some(100), Some(100)));
        assert_eq!((run.incident.healthy_for, run.incident.known), (Some(9.25), true));
        let (from, until) = run.incident.blocked.expect("the blocked phase");
        assert!((from - 1_796_216_701.12).abs() < 1e-6 && (until - from - 6.25).abs() < 1e-6);
        assert_eq!(run.incident.alerts, [r#"{"ts":"2026-12-02T13:05:02.320Z","event":"pending"}"#]);
        assert_eq!(run.socket_source(), Some("TCP functions (fentry/fexit tcp_recvmsg, tcp_sendmsg)"));
        assert_eq!(
            run.degradations(),
            ["no socket queue wait (unknown BTF type): how long request bytes waited is unknown"]
        );
        assert_eq!(run.stderr.len(), 3);
        assert_eq!(run.sum("gateway_observer_thread_offcpu_seconds_total", &[("reason", "sleep")]), 2.004);
        assert_eq!(run.sum("gateway_observer_collections_total", &[]), 12.0);
        let ktls = &guest.ktls;
        assert!(ktls.began);
        assert_eq!((ktls.sent, ktls.answered), (Some(10), Some(10)));
        assert_eq!(ktls.metrics.len(), 1);
        assert_eq!((ktls.stat["TlsTxSw"], ktls.stat["TlsRxSw"]), (10, 10));
    }

    #[test]
    fn a_console_without_markers_is_a_guest_that_never_ran() {
        let guest = parse("SeaBIOS\nKernel panic - not syncing\n");
        assert!(guest.kernel.is_none() && !guest.run.began && !guest.done);
    }
}
