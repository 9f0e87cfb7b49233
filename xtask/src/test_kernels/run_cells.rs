//! The cells judged from the daemon's run in a guest: whether it got going, off-CPU time against
//! what the fixtures measured themselves, how timed futex waits ended, requests counted, and the
//! blocked event loop (`incident_cell.rs`).

use super::{check_output, incident_cell, matrix::Cell, results::Run};

/// Off-CPU time may differ from the fixture's own measure by this share.
const TOLERANCE: f64 = 0.10;
/// kt-futex's waits all time out; the first on its word is `futex_timed` (nothing timed out on
/// it yet), every later one `futex_sleep`: with 10 waits, 90 % of the time.
const MIN_TIMED_OUT_SHARE: f64 = 0.8;
/// kt-wake's waits are all woken, so none is a sleep; one misread wait would be a tenth.
const MAX_WOKEN_AS_SLEEP_SHARE: f64 = 0.05;
const OFFCPU: &str = "gateway_observer_thread_offcpu_seconds_total";
const REQUESTS: &str = "gateway_observer_http_requests_total";

pub fn judge(run: &Run) -> Vec<(&'static str, Cell)> {
    let daemon = daemon_cell(run);
    if daemon.unexpected_failure() {
        return vec![("daemon run", daemon)];
    }
    vec![
        ("daemon run", daemon),
        ("off-CPU sleep", offcpu_cell(run, "kt-nap", "sleep", &["sleep"])),
        ("off-CPU futex", offcpu_cell(run, "kt-futex", "futex", &["futex_timed", "futex_sleep"])),
        ("timed waits timing out", timed_out_cell(run)),
        ("timed waits woken", woken_cell(run)),
        ("requests", requests_cell(run.requests_sent, run.requests_answered, run, "kt-httpd")),
        ("TLS requests", requests_cell(run.tls_requests_sent, run.tls_requests_answered, run, "kt-tlsd")),
        ("EventLoopBlocked", incident_cell::judge(&run.incident)),
    ]
}

/// Ready with every target attached, or why not; what the guest noticed on the way.
fn daemon_cell(run: &Run) -> Cell {
    if !run.began {
        return Cell::failed("never started");
    }
    if let Some(reason) = &run.not_ready {
        return Cell::failed(reason.as_str()).with_detail(last_error(run));
    }
    let text = run.ready_after.map_or("ready".to_owned(), |s| format!("ready after {s:.1} s"));
    Cell::ok(text).with_detail(run.notes.join("; "))
}

/// The daemon's last message (its error), with the verifier's complaint when it carries a log.
fn last_error(run: &Run) -> String {
    let Some(start) = run.stderr.iter().rposition(|l| l.starts_with("gateway-observer: ")) else {
        return "no message on stderr".into();
    };
    let message = run.stderr[start].trim_start_matches("gateway-observer: ");
    match check_output::verifier_complaint(&run.stderr[start..]) {
        Some(complaint) => {
            let head = message.split(". Verifier output:").next().unwrap_or(message);
            format!("{head}; the verifier: {complaint}")
        }
        None => message.to_owned(),
    }
}

fn offcpu(run: &Run, process: &str, reason: &str) -> f64 {
    run.sum(OFFCPU, &[("process", process), ("reason", reason)])
}

/// Every reason of `process`, for a cell's detail.
fn by_reason(run: &Run, process: &str) -> String {
    let all: Vec<String> = run
        .metrics
        .iter()
        .filter(|s| s.name == OFFCPU && s.labels.get("process").is_some_and(|p| p == process))
        .map(|s| format!("{} {:.3} s", s.labels.get("reason").map_or("?", String::as_str), s.value))
        .collect();
    format!("{process} off-CPU by reason: {}", all.join(", "))
}

/// `measured s of expected s (±e %)`, and whether that is within the tolerance.
fn against(measured: f64, expected: f64) -> (String, bool) {
    let error = measured / expected - 1.0;
    (format!("{measured:.3} s of {expected:.3} s ({:+.1} %)", error * 100.0), error.abs() <= TOLERANCE)
}

/// The daemon's off-CPU seconds of `process` in `reasons` against the fixture's own `truth`.
fn offcpu_cell(run: &Run, process: &str, truth: &str, reasons: &[&str]) -> Cell {
    let Some(&expected) = run.truth.get(truth) else {
        return Cell::failed("no ground truth");
    };
    let measured: f64 = reasons.iter().map(|r| offcpu(run, process, r)).sum();
    match against(measured, expected) {
        (text, true) => Cell::ok(text),
        (text, false) => Cell::failed(text).with_detail(by_reason(run, process)),
    }
}

/// kt-futex's waits all run to their timeout: the daemon must count them as sleeps
/// (`futex_sleep`) from the second on.
fn timed_out_cell(run: &Run) -> Cell {
    let (timed, sleep) = (offcpu(run, "kt-futex", "futex_timed"), offcpu(run, "kt-futex", "futex_sleep"));
    if timed + sleep == 0.0 {
        return Cell::failed("no timed wait seen").with_detail(by_reason(run, "kt-futex"));
    }
    let share = sleep / (timed + sleep);
    let text = format!("futex_sleep {:.0} % of {:.3} s", share * 100.0, timed + sleep);
    if share >= MIN_TIMED_OUT_SHARE {
        Cell::ok(text)
    } else {
        Cell::failed(text).with_detail(by_reason(run, "kt-futex"))
    }
}

/// kt-wake's waits are all woken by its other thread: all `futex_timed`, none a sleep, and as
/// long as the fixture measured.
fn woken_cell(run: &Run) -> Cell {
    if let Some(note) = run.notes.iter().find(|n| n.starts_with("kt-wake")) {
        return Cell::failed("the fixture failed").with_detail(note.as_str());
    }
    let Some(&expected) = run.truth.get("woken") else {
        return Cell::failed("no ground truth");
    };
    let (timed, sleep) = (offcpu(run, "kt-wake", "futex_timed"), offcpu(run, "kt-wake", "futex_sleep"));
    let (figure, close) = against(timed, expected);
    let text = format!("futex_timed {figure}, futex_sleep {sleep:.3} s");
    if close && sleep <= expected * MAX_WOKEN_AS_SLEEP_SHARE {
        Cell::ok(text)
    } else {
        Cell::failed(text).with_detail(by_reason(run, "kt-wake"))
    }
}

/// Inbound requests the daemon counted on `server` against what the client sent and got answered.
fn requests_cell(sent: Option<u64>, answered: Option<u64>, run: &Run, server: &str) -> Cell {
    let (Some(sent), Some(answered)) = (sent, answered) else {
        return Cell::failed("no client report");
    };
    let counted = run.sum(REQUESTS, &[("process", server), ("direction", "inbound")]);
    let text = format!("{counted} of {sent}");
    if answered != sent {
        Cell::failed(text).with_detail(format!("the server answered {answered} of {sent}"))
    } else if counted == sent as f64 {
        Cell::ok(text)
    } else {
        Cell::failed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{matrix::Verdict, results};
    use super::*;

    fn cell(console: &str, name: &str) -> Cell {
        let run = results::parse(console).run;
        judge(&run).into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).expect("cell")
    }

    const RUN: &str = "@@KT begin run\n@@KT ready 9.5 14.25\n\
        @@KT truth sleep 2000000000\n@@KT truth futex 1000000000\n@@KT truth woken 1000000000\n\
        @@KT sent 100\n@@KT client answered 100\n@@KT tls-sent 10\n@@KT tls-answered 10\n\
        @@KT metric gateway_observer_thread_offcpu_seconds_total{process=\"kt-nap\",reason=\"sleep\"} 2.1\n\
        @@KT metric gateway_observer_thread_offcpu_seconds_total{process=\"kt-futex\",reason=\"futex_timed\"} 0.3\n\
        @@KT metric gateway_observer_thread_offcpu_seconds_total{process=\"kt-futex\",reason=\"futex_sleep\"} 0.7\n\
        @@KT metric gateway_observer_thread_offcpu_seconds_total{process=\"kt-wake\",reason=\"futex_timed\"} 0.95\n\
        @@KT metric gateway_observer_thread_offcpu_seconds_total{process=\"kt-wake\",reason=\"sleep\"} 1.0\n\
        @@KT metric gateway_observer_http_requests_total{process=\"kt-httpd\",direction=\"inbound\"} 99\n\
        @@KT metric gateway_observer_http_requests_total{process=\"kt-tlsd\",direction=\"inbound\"} 10\n";

    #[test]
    fn figures_are_judged_against_the_fixtures_truth() {
        assert_eq!(cell(RUN, "daemon run").text, "ready after 4.8 s");
        let sleep = cell(RUN, "off-CPU sleep");
        assert_eq!((sleep.verdict, sleep.text.as_str()), (Verdict::Ok, "2.100 s of 2.000 s (+5.0 %)"));
        assert_eq!(cell(RUN, "off-CPU futex").verdict, Verdict::Ok);
        let timed_out = cell(RUN, "timed waits timing out");
        assert_eq!((timed_out.verdict, timed_out.text.as_str()), (Verdict::Failed, "futex_sleep 70 % of 1.000 s"));
        let woken = cell(RUN, "timed waits woken");
        assert_eq!(
            (woken.verdict, woken.text.as_str()),
            (Verdict::Ok, "futex_timed 0.950 s of 1.000 s (-5.0 %), futex_sleep 0.000 s")
        );
        let requests = cell(RUN, "requests");
        assert_eq!((requests.verdict, requests.text.as_str()), (Verdict::Failed, "99 of 100"));
        let tls = cell(RUN, "TLS requests");
        assert_eq!((tls.verdict, tls.text.as_str()), (Verdict::Ok, "10 of 10"));
        let unanswered = RUN.replace("tls-answered 10", "tls-answered 9");
        assert_eq!(cell(&unanswered, "TLS requests").verdict, Verdict::Failed);
    }

    #[test]
    fn a_daemon_refused_by_the_verifier_says_why_in_one_line() {
        let console = "@@KT begin run\n@@KT not-ready exited\n@@KT begin stderr\n\
             gateway-observer: failed to attach the probes: loading program sched_switch failed: the BPF_PROG_LOAD \
             syscall returned Permission denied (os error 13). Verifier output: 0: R1=ctx()\n\
             R2 unbounded memory access\nverification time 3630 usec\n: Permission denied (os error 13)\n\
             @@KT end stderr\n@@KT end run\n";
        let run = results::parse(console).run;
        let cells = judge(&run);
        assert_eq!(cells.len(), 1);
        assert_eq!(
            cells[0].1.detail.as_deref(),
            Some(
                "failed to attach the probes: loading program sched_switch failed: the BPF_PROG_LOAD syscall \
                 returned Permission denied (os error 13); the verifier: R2 unbounded memory access"
            )
        );
    }
}
