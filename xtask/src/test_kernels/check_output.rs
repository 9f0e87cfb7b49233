//! `gateway-observer check`'s output, read back: one entry per requirement line
//! (`REQUIREMENT  STATUS  DETAIL`), with the lines that follow it (a verifier log) attached,
//! and printed with those logs folded to their ends.

/// Verifier lines kept from each end of a log when printing.
const HEAD: usize = 2;
const TAIL: usize = 8;

/// The line naming the source of socket bytes in use (its status: ok, or degraded when none).
pub const SOCKET_BYTES: &str = "socket bytes (request timing)";

/// check's status column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Attached and in use.
    Ok,
    /// An alternative not in use: not needed, or it failed (the detail says which).
    Unused,
    /// Optional and missing: the daemon runs without one capability.
    Degraded,
    /// Required and missing: the daemon cannot run.
    Missing,
}

impl Status {
    fn parse(word: &str) -> Option<Self> {
        match word {
            "ok" => Some(Self::Ok),
            "unused" => Some(Self::Unused),
            "degraded" => Some(Self::Degraded),
            "missing" => Some(Self::Missing),
            _ => None,
        }
    }
}

#[derive(Debug, PartialEq)]
pub struct Entry {
    pub requirement: String,
    pub status: Status,
    pub detail: String,
    /// Lines after the requirement line, before the next: a multi-line error.
    pub more: Vec<String>,
}

/// Why a hook did not attach.
#[derive(Debug, PartialEq)]
pub enum Failure<'a> {
    /// The kernel lacks the hook (no BTF type or function of that name): a kernel limit.
    Absent,
    /// The verifier refused the program: a bug in the program, for this kernel's verifier. Its
    /// complaint, the last line before its statistics.
    Rejected(&'a str),
    /// Anything else, e.g. a kernel refusing the program type before its verifier runs.
    Other(&'a str),
}

impl Entry {
    /// Why it did not attach, if it did not. An unused hook that attached is fine.
    pub fn failure(&self) -> Option<Failure<'_>> {
        if self.status == Status::Ok || self.detail.starts_with("attached") {
            return None;
        }
        if self.detail.contains("unknown BTF type") || self.detail.contains("not found") {
            return Some(Failure::Absent);
        }
        Some(verifier_complaint(&self.more).map_or(Failure::Other(&self.detail), Failure::Rejected))
    }

    /// `tracepoint sk_data_ready (tp_btf)` → `sk_data_ready`, `function tcp_recvmsg (fexit)` →
    /// `tcp_recvmsg fexit`.
    pub fn hook_name(&self) -> String {
        let mut words = self.requirement.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("function"), Some(name), Some(kind)) => format!("{name} {}", kind.trim_matches(['(', ')'])),
            (Some("tracepoint"), Some(name), _) => name.to_owned(),
            _ => self.requirement.clone(),
        }
    }

    pub fn is_hook(&self) -> bool {
        self.requirement.starts_with("tracepoint ") || self.requirement.starts_with("function ")
    }
}

/// In lines holding a verifier log, the verifier's own complaint: the last line before its
/// statistics (`verification time …`).
pub fn verifier_complaint(lines: &[String]) -> Option<&str> {
    let end = lines.iter().position(|l| l.starts_with("verification time"))?;
    lines[..end].iter().rev().find(|l| !l.trim().is_empty()).map(String::as_str)
}

/// check's output, parsed.
#[derive(Debug, Default)]
pub struct Check {
    pub entries: Vec<Entry>,
    /// After `verdict: `: `ready`, `ready, degraded: without …` or `NOT ready …`.
    pub verdict: Option<String>,
}

impl Check {
    pub fn entry(&self, requirement: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.requirement == requirement)
    }

    /// The hook line of tracepoint or function `name` (`sk_data_ready`).
    pub fn hook(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.is_hook() && e.requirement.split_whitespace().nth(1) == Some(name))
    }
}

pub fn parse(lines: &[String]) -> Check {
    let mut check = Check::default();
    for line in lines {
        if let Some(v) = line.strip_prefix("verdict: ") {
            check.verdict = Some(v.to_owned());
        } else if let Some(entry) = requirement_line(line) {
            check.entries.push(entry);
        } else if let Some(last) = check.entries.last_mut() {
            last.more.push(line.clone());
        }
    }
    check
}

/// `REQUIREMENT  STATUS  DETAIL`: the requirement (single spaces inside) starts the line, and the
/// status word follows two or more spaces, padded before the detail.
fn requirement_line(line: &str) -> Option<Entry> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    let (requirement, rest) = line.split_once("  ")?;
    let rest = rest.trim_start();
    let (word, detail) = rest.split_once(' ').unwrap_or((rest, ""));
    let status = Status::parse(word)?;
    Some(Entry { requirement: requirement.into(), status, detail: detail.trim_start().into(), more: Vec::new() })
}

/// Prints check's output as it came, each verifier log cut to its first and last lines (where
/// the complaint is); `full` says where the whole of it is.
pub fn print_folded(lines: &[String], full: &str) {
    let mut run: Vec<&String> = Vec::new();
    let flush = |run: &mut Vec<&String>| {
        if run.len() > HEAD + TAIL + 1 {
            for l in &run[..HEAD] {
                println!("{l}");
            }
            println!("    [... {} verifier lines cut: {full}]", run.len() - HEAD - TAIL);
            for l in &run[run.len() - TAIL..] {
                println!("{l}");
            }
        } else {
            for l in run.iter() {
                println!("{l}");
            }
        }
        run.clear();
    };
    for line in lines {
        if requirement_line(line).is_some() || line.starts_with("verdict: ") {
            flush(&mut run);
            println!("{line}");
        } else {
            run.push(line);
        }
    }
    flush(&mut run);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn reads_each_status_and_keeps_a_verifier_log() {
        let out = lines(
            "privileges                               ok        root
tracepoint sk_data_ready (tp_btf)        degraded  how long request bytes waited is unknown: loading program sk_data_ready failed: unknown BTF type `btf_trace_sk_data_ready`
tracepoint sock_recv_length (tp_btf)     unused    not used: unknown BTF type `btf_trace_sock_recv_length`
function tcp_recvmsg (fexit)             unused    not used: loading program tcp_recvmsg_exit failed: Verifier output: 0: R1=ctx() R10=fp0
783: (71) r5 = *(u8 *)(r5 +0)         ; frame1: R5_w=0
invalid size of register fill
verification time 68821 usec
stack depth 192+0+0
function tcp_sendmsg (fexit)             unused    attached (not needed)
socket bytes (request timing)            degraded  no source attaches: requests are not timed
verdict: ready, degraded: without tracepoint sk_data_ready (tp_btf), socket bytes (request timing)",
        );
        let check = parse(&out);
        assert_eq!(
            check.verdict.as_deref(),
            Some("ready, degraded: without tracepoint sk_data_ready (tp_btf), socket bytes (request timing)")
        );
        let statuses: Vec<Status> = check.entries.iter().map(|e| e.status).collect();
        use Status::*;
        assert_eq!(statuses, [Ok, Degraded, Unused, Unused, Unused, Degraded]);
        let failures: Vec<Option<Failure>> = check.entries.iter().map(Entry::failure).collect();
        assert_eq!(
            failures,
            [
                None,
                Some(Failure::Absent),
                Some(Failure::Absent),
                Some(Failure::Rejected("invalid size of register fill")),
                None,
                Some(Failure::Other("no source attaches: requests are not timed"))
            ]
        );
        let recvmsg = check.hook("tcp_recvmsg").expect("tcp_recvmsg");
        assert_eq!((recvmsg.hook_name(), recvmsg.more.len()), ("tcp_recvmsg fexit".into(), 4));
        assert_eq!(check.entry(SOCKET_BYTES).map(|e| e.status), Some(Degraded));
    }
}
