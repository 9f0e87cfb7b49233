//! Kernel × capability → ok / degraded / failed, with the figures measured, judged from what one
//! guest reported. `table.rs` prints it.

use super::check_output::{self, Entry, Failure};
use super::results::{Guest, Run};
use super::vm::Boot;

/// Off-CPU time may differ from the fixture's own measure by this share.
const TOLERANCE: f64 = 0.10;
const OFFCPU: &str = "gateway_observer_thread_offcpu_seconds_total";
const REQUESTS: &str = "gateway_observer_http_requests_total";

/// Failures known and filed: on that series, a failed cell whose every cause names `cause` is
/// shown with the note and does not fail the run. Anything else that fails does.
struct KnownGap {
    series: &'static str,
    cause: &'static str,
    note: &'static str,
}

const SOCKET_TRACEPOINTS_GAP: &str = "issue 15: sk_data_ready, sock_recv_length and sock_send_length are \
                                      tracepoints from 6.5 on, and run requires sk_data_ready";
const KNOWN_GAPS: &[KnownGap] = &[
    KnownGap { series: "6.1", cause: "btf_trace_sk_data_ready", note: SOCKET_TRACEPOINTS_GAP },
    KnownGap { series: "6.1", cause: "btf_trace_sock_recv_length", note: SOCKET_TRACEPOINTS_GAP },
    KnownGap { series: "6.1", cause: "btf_trace_sock_send_length", note: SOCKET_TRACEPOINTS_GAP },
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Ok,
    Degraded,
    Failed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Degraded => "degraded",
            Verdict::Failed => "FAILED",
        }
    }
}

#[derive(Debug)]
pub struct Cell {
    pub verdict: Verdict,
    /// Short enough for the table: the figure measured, or the gist.
    pub text: String,
    /// The whole story (which hooks, the verifier's complaint, the daemon's error), printed
    /// under the table.
    pub detail: Option<String>,
    /// The known gap's note, when every cause of a failure is one.
    pub known: Option<&'static str>,
    /// Each independent reason it failed (error messages), matched against the known gaps.
    causes: Vec<String>,
}

impl Cell {
    fn new(verdict: Verdict, text: impl Into<String>) -> Self {
        Self { verdict, text: text.into(), detail: None, known: None, causes: Vec::new() }
    }
    fn with_detail(self, detail: impl Into<String>) -> Self {
        Self { detail: Some(detail.into()), ..self }
    }
    fn because(self, causes: Vec<String>) -> Self {
        Self { causes, ..self }
    }

    /// A failure that is not a known gap.
    pub fn unexpected_failure(&self) -> bool {
        self.verdict == Verdict::Failed && self.known.is_none()
    }

    fn mark_known(&mut self, series: &str) {
        let gap = |cause: &String| KNOWN_GAPS.iter().find(|g| g.series == series && cause.contains(g.cause));
        if self.verdict == Verdict::Failed && !self.causes.is_empty() {
            let gaps: Option<Vec<&KnownGap>> = self.causes.iter().map(gap).collect();
            self.known = gaps.and_then(|g| g.first().map(|g| g.note));
        }
    }
}

pub struct Column {
    /// `uname -r` of the kernel.
    pub kernel: String,
    pub cells: Vec<(String, Cell)>,
}

/// Judges one guest's report. `series` picks the known gaps.
pub fn judge(series: &str, kernel: &str, boot: &Boot, guest: &Guest) -> Column {
    let mut cells = vec![("boot".to_owned(), boot_cell(boot, guest))];
    if guest.kernel.is_some() {
        let (entries, verdict) = check_output::parse(&guest.check);
        cells.push(("check".into(), check_cell(&entries, verdict.as_deref())));
        cells.push(("function hooks (check)".into(), function_hooks_cell(&entries)));
        for run in &guest.runs {
            let mode = &run.mode;
            cells.push((format!("daemon --hooks {mode}"), hooks_cell(run)));
            cells.push((format!("off-CPU sleep ({mode})"), offcpu_cell(run, "kt-nap", "sleep", &["sleep"])));
            cells.push((
                format!("off-CPU futex ({mode})"),
                offcpu_cell(run, "kt-futex", "futex", &["futex_timed", "futex_sleep"]),
            ));
            cells.push((format!("requests ({mode})"), requests_cell(run)));
        }
    }
    for (_, cell) in &mut cells {
        cell.mark_known(series);
    }
    Column { kernel: kernel.to_owned(), cells }
}

fn boot_cell(boot: &Boot, guest: &Guest) -> Cell {
    let secs = boot.elapsed.as_secs_f64();
    if guest.kernel.is_none() {
        Cell::new(Verdict::Failed, format!("/init never ran ({secs:.0} s)"))
    } else if boot.timed_out {
        Cell::new(Verdict::Failed, format!("killed at {secs:.0} s"))
    } else if !guest.done {
        Cell::new(Verdict::Failed, format!("/init stopped early ({secs:.0} s)"))
    } else {
        Cell::new(Verdict::Ok, format!("{secs:.0} s"))
    }
}

/// check's verdict; when not ready, which requirements fail and how (absent from the kernel,
/// rejected by the verifier).
fn check_cell(entries: &[Entry], verdict: Option<&str>) -> Cell {
    match verdict {
        Some("ready") => Cell::new(Verdict::Ok, "ready"),
        Some(_) => {
            let missing: Vec<&Entry> = entries.iter().filter(|e| !e.ok).collect();
            Cell::new(Verdict::Failed, "NOT ready")
                .with_detail(describe_failures(&missing))
                .because(missing.iter().map(|e| e.detail.clone()).collect())
        }
        None => Cell::new(Verdict::Failed, "no verdict"),
    }
}

/// `a, b absent; c, d rejected by the verifier: complaint`, one verifier complaint per group.
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

/// Whether every function hook loads and attaches. A function the kernel lacks degrades to the
/// fallback; a program the verifier refuses is a bug to fix, so a failure.
fn function_hooks_cell(entries: &[Entry]) -> Cell {
    let functions: Vec<&Entry> = entries.iter().filter(|e| e.requirement.starts_with("function ")).collect();
    if functions.is_empty() {
        return Cell::new(Verdict::Failed, "none tried");
    }
    let failing: Vec<&Entry> = functions.iter().copied().filter(|e| !e.works()).collect();
    let text = format!("{} of {} attach", functions.len() - failing.len(), functions.len());
    if failing.is_empty() {
        return Cell::new(Verdict::Ok, text);
    }
    let cell = Cell::new(Verdict::Failed, text).with_detail(describe_failures(&failing));
    if failing.iter().all(|e| e.failure() == Some(Failure::Absent)) {
        Cell { verdict: Verdict::Degraded, ..cell }
    } else {
        cell.because(failing.iter().map(|e| e.detail.clone()).collect())
    }
}

/// The path the daemon took, from its startup line, or why it never got going.
fn hooks_cell(run: &Run) -> Cell {
    if let Some(reason) = &run.not_ready {
        let error = last_error(run);
        return Cell::new(Verdict::Failed, reason.as_str()).with_detail(error.clone()).because(vec![error]);
    }
    match run.hooks.as_deref() {
        Some(line) if line.starts_with("kernel functions") => Cell::new(Verdict::Ok, "functions"),
        Some(line) if line.starts_with("syscall tracepoints") && run.mode == "syscalls" => {
            Cell::new(Verdict::Ok, "syscalls, as asked")
        }
        Some(line) if line.starts_with("syscall tracepoints") => Cell::new(Verdict::Degraded, "syscalls (fallback)"),
        Some(line) => Cell::new(Verdict::Failed, "unknown hooks line").with_detail(line),
        None => Cell::new(Verdict::Failed, "no `hooks:` line"),
    }
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

/// A cell of a run whose daemon never started: failed for the daemon's reason (its own row says
/// which).
fn not_measured(run: &Run) -> Cell {
    Cell::new(Verdict::Failed, "not measured").because(vec![last_error(run)])
}

/// The daemon's off-CPU seconds of `process` in `reasons` against the fixture's own `truth`.
fn offcpu_cell(run: &Run, process: &str, truth: &str, reasons: &[&str]) -> Cell {
    if run.not_ready.is_some() {
        return not_measured(run);
    }
    let Some(&expected) = run.truth.get(truth) else {
        return Cell::new(Verdict::Failed, "no ground truth");
    };
    let measured: f64 = reasons.iter().map(|r| run.sum(OFFCPU, &[("process", process), ("reason", r)])).sum();
    let error = measured / expected - 1.0;
    let text = format!("{measured:.3} s of {expected:.3} s ({:+.1} %)", error * 100.0);
    if error.abs() <= TOLERANCE {
        return Cell::new(Verdict::Ok, text);
    }
    let all: Vec<String> = run
        .metrics
        .iter()
        .filter(|s| s.name == OFFCPU && s.labels.get("process").is_some_and(|p| p == process))
        .map(|s| format!("{} {:.3} s", s.labels.get("reason").map_or("?", String::as_str), s.value))
        .collect();
    Cell::new(Verdict::Failed, text).with_detail(format!("{process} off-CPU by reason: {}", all.join(", ")))
}

/// Inbound requests the daemon counted on the server against what the client sent.
fn requests_cell(run: &Run) -> Cell {
    if run.not_ready.is_some() {
        return not_measured(run);
    }
    let (Some(sent), Some(answered)) = (run.requests_sent, run.requests_answered) else {
        return Cell::new(Verdict::Failed, "no client report");
    };
    let counted = run.sum(REQUESTS, &[("process", "kt-httpd"), ("direction", "inbound")]);
    let text = format!("{counted} of {sent}");
    if answered != sent {
        Cell::new(Verdict::Failed, text).with_detail(format!("the server answered {answered} of {sent}"))
    } else if counted == sent as f64 {
        Cell::new(Verdict::Ok, text)
    } else {
        Cell::new(Verdict::Failed, text)
    }
}

#[cfg(test)]
mod tests {
    use super::super::results;
    use super::*;

    fn boot() -> Boot {
        Boot { console: String::new(), elapsed: std::time::Duration::from_secs(40), timed_out: false }
    }

    fn cell(console: &str, series: &str, capability: &str) -> Cell {
        let column = judge(series, series, &boot(), &results::parse(console));
        column.cells.into_iter().find(|(c, _)| c == capability).map(|(_, cell)| cell).expect("cell")
    }

    #[test]
    fn figures_within_tolerance_are_ok_and_a_missing_request_is_not() {
        let console = "@@KT kernel 6.12\n@@KT begin check\nverdict: ready\n@@KT end check\n@@KT begin run auto\n\
             @@KT truth sleep 2000000000\n@@KT truth futex 1000000000\n@@KT sent 100\n@@KT client answered 100\n\
             @@KT metric auto gateway_observer_thread_offcpu_seconds_total{process=\"kt-nap\",reason=\"sleep\"} 2.1\n\
             @@KT metric auto gateway_observer_thread_offcpu_seconds_total{process=\"kt-futex\",reason=\"futex_timed\"} 0.1\n\
             @@KT metric auto gateway_observer_thread_offcpu_seconds_total{process=\"kt-futex\",reason=\"futex_sleep\"} 0.7\n\
             @@KT metric auto gateway_observer_http_requests_total{process=\"kt-httpd\",direction=\"inbound\"} 99\n\
             @@KT end run auto\n@@KT done\n";
        let sleep = cell(console, "6.12", "off-CPU sleep (auto)");
        assert_eq!((sleep.verdict, sleep.text.as_str()), (Verdict::Ok, "2.100 s of 2.000 s (+5.0 %)"));
        let futex = cell(console, "6.12", "off-CPU futex (auto)");
        assert_eq!(futex.verdict, Verdict::Failed);
        assert_eq!(
            futex.detail.as_deref(),
            Some("kt-futex off-CPU by reason: futex_timed 0.100 s, futex_sleep 0.700 s")
        );
        let requests = cell(console, "6.12", "requests (auto)");
        assert_eq!((requests.verdict, requests.text.as_str()), (Verdict::Failed, "99 of 100"));
    }

    const ABSENT: &str = "tracepoint sk_data_ready (tp_btf)   missing  unknown BTF type `btf_trace_sk_data_ready`\n";
    const REJECTED: &str = "tracepoint sys_exit (tp_btf)        missing  loading program sys_exit failed: Verifier output:\n\
                            R2 unbounded memory access\nverification time 1896 usec\n";

    #[test]
    fn a_known_gap_fails_without_failing_the_run_on_its_series_only() {
        let console = format!("@@KT kernel 6.1\n@@KT begin check\n{ABSENT}verdict: NOT ready\n@@KT end check\n");
        let known = cell(&console, "6.1", "check");
        assert!(known.verdict == Verdict::Failed && !known.unexpected_failure());
        assert_eq!(known.detail.as_deref(), Some("sk_data_ready absent"));
        assert!(cell(&console, "6.12", "check").unexpected_failure());
    }

    #[test]
    fn a_known_gap_does_not_cover_a_verifier_rejection_beside_it() {
        let console =
            format!("@@KT kernel 6.1\n@@KT begin check\n{ABSENT}{REJECTED}verdict: NOT ready\n@@KT end check\n");
        let check = cell(&console, "6.1", "check");
        assert!(check.unexpected_failure());
        assert_eq!(
            check.detail.as_deref(),
            Some("sk_data_ready absent; sys_exit rejected by the verifier: R2 unbounded memory access")
        );
    }

    #[test]
    fn a_daemon_refused_by_the_verifier_says_why_in_one_line() {
        let console = "@@KT kernel 6.1\n@@KT begin run syscalls\n@@KT not-ready syscalls exited\n\
             @@KT begin stderr syscalls\n\
             gateway-observer: failed to attach the probes: loading program sys_exit failed: the BPF_PROG_LOAD \
             syscall returned Permission denied (os error 13). Verifier output: 0: R1=ctx()\n\
             R2 unbounded memory access\nverification time 3630 usec\n: Permission denied (os error 13)\n\
             @@KT end stderr syscalls\n@@KT end run syscalls\n";
        let hooks = cell(console, "6.1", "daemon --hooks syscalls");
        assert_eq!(
            hooks.detail.as_deref(),
            Some(
                "failed to attach the probes: loading program sys_exit failed: the BPF_PROG_LOAD syscall returned \
                 Permission denied (os error 13); the verifier: R2 unbounded memory access"
            )
        );
    }

    #[test]
    fn a_function_the_kernel_lacks_degrades_and_one_the_verifier_refuses_fails() {
        let check = |detail: &str| {
            format!(
                "@@KT kernel 6.12\n@@KT begin check\nfunction futex_wait (fexit)   ok       attached\n\
                 function tcp_recvmsg (fexit)   ok       {detail}\nverdict: ready\n@@KT end check\n"
            )
        };
        let absent =
            cell(&check("loading program failed: unknown BTF type `tcp_recvmsg`"), "6.12", "function hooks (check)");
        assert_eq!(absent.verdict, Verdict::Degraded);
        let refused = check(
            "loading program tcp_recvmsg_exit failed: Verifier output: 0: R1=ctx()\n\
             invalid size of register fill\nverification time 68821 usec",
        );
        let refused = cell(&refused, "6.12", "function hooks (check)");
        assert!(refused.unexpected_failure());
        assert_eq!(refused.text, "1 of 2 attach");
        assert_eq!(
            refused.detail.as_deref(),
            Some("tcp_recvmsg fexit rejected by the verifier: invalid size of register fill")
        );
    }
}
