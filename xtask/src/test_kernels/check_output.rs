//! `gateway-observer check`'s output, read back: one entry per requirement line
//! (`REQUIREMENT  ok|missing  DETAIL`), with the lines that follow it (a verifier log) attached,
//! and printed with those logs folded to their ends.

/// Verifier lines kept from each end of a log when printing.
const HEAD: usize = 2;
const TAIL: usize = 8;

#[derive(Debug, PartialEq)]
pub struct Entry {
    pub requirement: String,
    /// The status column says ok. For function hooks check says ok even when one fails to
    /// load (the fallback covers it): the detail tells.
    pub ok: bool,
    pub detail: String,
    /// Lines after the requirement line, before the next: a multi-line error.
    pub more: Vec<String>,
}

/// Why a requirement does not hold.
#[derive(Debug, PartialEq)]
pub enum Failure<'a> {
    /// The kernel lacks the hook (no BTF type or function of that name): a kernel limit.
    Absent,
    /// The verifier refused the program: a bug in the program, for this kernel's verifier. Its
    /// complaint, the last line before its statistics.
    Rejected(&'a str),
    Other(&'a str),
}

impl Entry {
    /// Ok, and really so.
    pub fn works(&self) -> bool {
        self.failure().is_none()
    }

    pub fn failure(&self) -> Option<Failure<'_>> {
        if self.ok && !self.detail.contains("failed") {
            return None;
        }
        if self.detail.contains("unknown BTF type") || self.detail.contains("not found") {
            return Some(Failure::Absent);
        }
        let complaint = self
            .more
            .iter()
            .position(|l| l.starts_with("verification time"))
            .and_then(|end| self.more[..end].iter().rev().find(|l| !l.trim().is_empty()).map(String::as_str));
        Some(complaint.map_or(Failure::Other(&self.detail), Failure::Rejected))
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
}

/// In lines holding a verifier log, the verifier's own complaint: the last line before its
/// statistics (`verification time …`).
pub fn verifier_complaint(lines: &[String]) -> Option<&str> {
    let end = lines.iter().position(|l| l.starts_with("verification time"))?;
    lines[..end].iter().rev().find(|l| !l.trim().is_empty()).map(String::as_str)
}

/// The requirement entries and the verdict line.
pub fn parse(lines: &[String]) -> (Vec<Entry>, Option<String>) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut verdict = None;
    for line in lines {
        if let Some(v) = line.strip_prefix("verdict: ") {
            verdict = Some(v.to_owned());
        } else if let Some(entry) = requirement_line(line) {
            entries.push(entry);
        } else if let Some(last) = entries.last_mut() {
            last.more.push(line.clone());
        }
    }
    (entries, verdict)
}

/// `REQUIREMENT  STATUS  DETAIL`: the requirement starts the line, and the status follows two or
/// more spaces and is itself padded (`ok     `, `missing`) before the detail.
fn requirement_line(line: &str) -> Option<Entry> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    for (status, ok) in [("  ok  ", true), ("  missing  ", false)] {
        if let Some(at) = line.find(status) {
            let requirement = line[..at].trim_end();
            let detail = line[at + status.len()..].trim_start();
            if !requirement.is_empty() && !requirement.contains("  ") {
                return Some(Entry { requirement: requirement.into(), ok, detail: detail.into(), more: Vec::new() });
            }
        }
    }
    None
}

/// Prints check's output as the guest printed it, each verifier log cut to its first and last
/// lines (where the complaint is); `full` says where the whole of it is.
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
    fn a_failed_load_keeps_its_verifier_log() {
        let out = lines(
            "privileges                               ok       root
tracepoint sk_data_ready (tp_btf)        missing  loading program sk_data_ready failed: unknown BTF type
function tcp_recvmsg (fexit)             ok       loading program tcp_recvmsg_exit failed: Verifier output: 0: R1=ctx() R10=fp0
783: (71) r5 = *(u8 *)(r5 +0)         ; frame1: R5_w=0
invalid size of register fill
verification time 68821 usec
stack depth 192+0+0
hook path                                ok       syscall tracepoints (fallback): every syscall pays
verdict: NOT ready (see the lines marked missing)",
        );
        let (entries, verdict) = parse(&out);
        assert_eq!(verdict.as_deref(), Some("NOT ready (see the lines marked missing)"));
        let names: Vec<&str> = entries.iter().map(|e| e.requirement.as_str()).collect();
        assert_eq!(
            names,
            ["privileges", "tracepoint sk_data_ready (tp_btf)", "function tcp_recvmsg (fexit)", "hook path"]
        );
        assert_eq!(entries[0].failure(), None);
        assert_eq!(entries[1].failure(), Some(Failure::Absent));
        assert!(entries[2].ok && !entries[2].works());
        assert_eq!(entries[2].failure(), Some(Failure::Rejected("invalid size of register fill")));
        assert_eq!(entries[2].more.len(), 4);
        assert_eq!(
            (entries[1].hook_name(), entries[2].hook_name()),
            ("sk_data_ready".into(), "tcp_recvmsg fexit".into())
        );
    }
}
