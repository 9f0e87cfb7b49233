//! The cells judged from `gateway-observer check` (and, in a guest, the daemon's startup lines,
//! which must agree with it): check's verdict, where socket bytes come from, and whether the
//! socket queue wait is measured.

use super::{
    check_output::{Check, Entry, Failure, SOCKET_BYTES, Status},
    expect::Expectation,
    matrix::{Cell, Verdict},
    results::Run,
};

/// The hook the socket queue wait needs.
const QUEUE_WAIT_HOOK: &str = "sk_data_ready";

/// check's cells. `run` is the daemon's run in a guest, if it got going; the host has none.
pub fn judge(check: &Check, run: Option<&Run>, expect: &Expectation) -> Vec<(&'static str, Cell)> {
    let run = run.filter(|r| r.began && r.not_ready.is_none());
    vec![
        ("check verdict", verdict(check, expect)),
        ("socket bytes source", socket_source(check, run, expect)),
        ("socket queue wait", queue_wait(check, run, expect)),
    ]
}

/// check's verdict. Whatever it says, a program the verifier rejected is a failure: a bug to fix,
/// even in an alternative this kernel does not use.
fn verdict(check: &Check, expect: &Expectation) -> Cell {
    let Some(verdict) = check.verdict.as_deref() else {
        return Cell::failed("no verdict");
    };
    let lacking: Vec<&Entry> =
        check.entries.iter().filter(|e| matches!(e.status, Status::Missing | Status::Degraded)).collect();
    let rejected = check.entries.iter().any(|e| matches!(e.failure(), Some(Failure::Rejected(_))));
    let failing: Vec<&Entry> = check
        .entries
        .iter()
        .filter(|e| lacking.contains(e) || matches!(e.failure(), Some(Failure::Rejected(_))))
        .collect();
    let detail = describe_failures(&failing);
    if !verdict.starts_with("ready") || rejected {
        let text = if rejected { "a program rejected by the verifier" } else { "NOT ready" };
        return Cell::failed(text).with_detail(detail);
    }
    if lacking.is_empty() {
        return Cell::ok("ready");
    }
    let names: Vec<String> = lacking.iter().map(|e| e.hook_name()).collect();
    let accepted: Option<Vec<&'static str>> = names.iter().map(|n| expect.accepts_missing(n)).collect();
    Cell {
        accepted: accepted.map(|why| why.join("; ")),
        ..Cell::new(Verdict::Degraded, format!("ready without {}", names.join(", "))).with_detail(detail)
    }
}

/// The source of socket bytes check found, which must be the one this kernel should use, and
/// which the daemon must say it uses.
fn socket_source(check: &Check, run: Option<&Run>, expect: &Expectation) -> Cell {
    let Some(line) = check.entry(SOCKET_BYTES) else {
        return Cell::failed(format!("no `{SOCKET_BYTES}` line"));
    };
    if line.status != Status::Ok {
        let tried: Vec<&Entry> =
            check.entries.iter().filter(|e| e.status == Status::Unused && e.failure().is_some()).collect();
        return Cell::failed("none").with_detail(describe_failures(&tried));
    }
    let found = short(&line.detail);
    if found != expect.socket_source {
        return Cell::failed(format!("{found}, expected {}", expect.socket_source));
    }
    let Some(run) = run else {
        return Cell::ok(format!("{found} (check)"));
    };
    match run.socket_source() {
        Some(used) if short(used) == found => Cell::ok(found),
        Some(used) => Cell::failed(format!("check: {found}; run: {}", short(used))),
        None => {
            let said = run.degradations().into_iter().find(|d| d.contains("socket bytes")).unwrap_or("nothing");
            Cell::failed("run names no source").with_detail(format!("run said: {said}"))
        }
    }
}

/// Whether `sk_data_ready` attached (check), and the daemon said it runs without it if not.
fn queue_wait(check: &Check, run: Option<&Run>, expect: &Expectation) -> Cell {
    let Some(hook) = check.hook(QUEUE_WAIT_HOOK) else {
        return Cell::failed(format!("no {QUEUE_WAIT_HOOK} line"));
    };
    let run_degraded = run.map(|r| r.degradations().iter().any(|d| d.starts_with("no socket queue wait")));
    match (hook.status, hook.failure()) {
        (Status::Ok, _) if run_degraded == Some(true) => Cell::failed("check: ok; run: degraded"),
        (Status::Ok, _) => Cell::ok(QUEUE_WAIT_HOOK),
        (Status::Degraded, _) if run_degraded == Some(false) => {
            Cell::failed("check: degraded; run did not say so").with_detail(describe_failures(&[hook]))
        }
        (Status::Degraded, Some(Failure::Absent)) => Cell {
            accepted: expect.accepts_missing(QUEUE_WAIT_HOOK).map(str::to_owned),
            ..Cell::new(Verdict::Degraded, format!("no {QUEUE_WAIT_HOOK}"))
        },
        _ => Cell::failed(format!("{QUEUE_WAIT_HOOK} failed")).with_detail(describe_failures(&[hook])),
    }
}

/// `TCP functions (fentry/fexit …)` → `TCP functions`.
fn short(source: &str) -> &str {
    source.split(" (").next().unwrap_or(source).trim()
}

/// `a, b absent; c, d rejected by the verifier: complaint; e: error`, one verifier complaint per
/// group.
fn describe_failures(entries: &[&Entry]) -> String {
    let mut absent = Vec::new();
    let mut rejected: Vec<(&str, Vec<String>)> = Vec::new();
    let mut others = Vec::new();
    for entry in entries {
        match entry.failure() {
            Some(Failure::Absent) => absent.push(entry.hook_name()),
            Some(Failure::Rejected(why)) => match rejected.iter_mut().find(|(w, _)| *w == why) {
                Some((_, names)) => names.push(entry.hook_name()),
                None => rejected.push((why, vec![entry.hook_name()])),
            },
            Some(Failure::Other(why)) => others.push(format!("{}: {why}", entry.hook_name())),
            None => {}
        }
    }
    let absent = (!absent.is_empty()).then(|| format!("{} absent", absent.join(", ")));
    let rejected =
        rejected.into_iter().map(|(why, names)| format!("{} rejected by the verifier: {why}", names.join(", ")));
    absent.into_iter().chain(rejected).chain(others).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::super::{check_output, results};
    use super::*;

    const OLD: &str = "6.1.0-57-cloud-amd64";
    const NEW: &str = "6.12.118+deb12-cloud-amd64";

    const CORE: &str = "privileges                               ok        root
tracepoint sched_switch (tp_btf)         ok        attached\n";
    const SK_DATA_READY_ABSENT: &str = "tracepoint sk_data_ready (tp_btf)        degraded  how long request bytes \
                                        waited is unknown: unknown BTF type `btf_trace_sk_data_ready`\n";
    const TCP_FUNCTIONS: &str = "tracepoint sock_recv_length (tp_btf)     unused    not used: unknown BTF type \
                                 `btf_trace_sock_recv_length`
function tcp_recvmsg (fexit)             ok        attached (in use)
socket bytes (request timing)            ok        TCP functions (fentry/fexit tcp_recvmsg, tcp_sendmsg)\n";
    const OLD_VERDICT: &str = "verdict: ready, degraded: without tracepoint sk_data_ready (tp_btf)\n";

    fn cells(check: &str, stderr: &[&str], release: &str) -> Vec<(&'static str, Cell)> {
        let lines: Vec<String> = check.lines().map(str::to_owned).collect();
        let run = results::Run {
            began: true,
            stderr: stderr.iter().map(|l| format!("gateway-observer: {l}")).collect(),
            ..results::Run::default()
        };
        judge(&check_output::parse(&lines), Some(&run), Expectation::of(release))
    }

    fn find<'a>(cells: &'a [(&'static str, Cell)], name: &str) -> &'a Cell {
        &cells.iter().find(|(n, _)| *n == name).expect("cell").1
    }

    const OLD_RUN: &[&str] = &[
        "socket bytes from TCP functions (fentry/fexit tcp_recvmsg, tcp_sendmsg)",
        "degraded: no socket queue wait (unknown BTF type): how long request bytes waited is unknown",
    ];

    #[test]
    fn on_6_1_only_the_socket_queue_wait_may_be_missing() {
        let check = format!("{CORE}{SK_DATA_READY_ABSENT}{TCP_FUNCTIONS}{OLD_VERDICT}");
        let old = cells(&check, OLD_RUN, OLD);
        assert!(old.iter().all(|(_, c)| !c.unexpected_failure()), "{old:?}");
        let verdict = find(&old, "check verdict");
        assert_eq!((verdict.verdict, verdict.text.as_str()), (Verdict::Degraded, "ready without sk_data_ready"));
        assert_eq!(find(&old, "socket bytes source").text, "TCP functions");
        assert_eq!(find(&old, "socket queue wait").verdict, Verdict::Degraded);

        let new = cells(&check, OLD_RUN, NEW);
        assert!(find(&new, "check verdict").unexpected_failure());
        assert_eq!(find(&new, "socket bytes source").text, "TCP functions, expected socket tracepoints");
        assert!(find(&new, "socket queue wait").unexpected_failure());
    }

    #[test]
    fn a_rejected_program_fails_the_verdict_and_leaves_no_source() {
        let check = format!(
            "{CORE}{SK_DATA_READY_ABSENT}function tcp_recvmsg (fexit)             unused    not used: loading \
             program tcp_recvmsg_exit failed: Verifier output: 0: R1=ctx()\n\
             invalid size of register fill\nverification time 68821 usec\n\
             socket bytes (request timing)            degraded  no source attaches: requests are not timed\n\
             verdict: ready, degraded: without tracepoint sk_data_ready (tp_btf), socket bytes (request timing)\n"
        );
        let stderr = ["degraded: no source of socket bytes (none attaches): requests are not timed"];
        let old = cells(&check, &stderr, OLD);
        let verdict = find(&old, "check verdict");
        assert_eq!(verdict.text, "a program rejected by the verifier");
        assert_eq!(
            verdict.detail.as_deref(),
            Some(
                "sk_data_ready absent; tcp_recvmsg fexit rejected by the verifier: invalid size of register fill; \
                 socket bytes (request timing): no source attaches: requests are not timed"
            )
        );
        let source = find(&old, "socket bytes source");
        assert_eq!(source.text, "none");
        assert_eq!(
            source.detail.as_deref(),
            Some("tcp_recvmsg fexit rejected by the verifier: invalid size of register fill")
        );
    }

    #[test]
    fn check_and_run_must_agree() {
        let check = format!("{CORE}{SK_DATA_READY_ABSENT}{TCP_FUNCTIONS}{OLD_VERDICT}");
        let silent = cells(&check, &[], OLD);
        assert_eq!(find(&silent, "socket bytes source").text, "run names no source");
        assert_eq!(find(&silent, "socket queue wait").text, "check: degraded; run did not say so");
    }
}
