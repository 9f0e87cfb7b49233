//! `gateway-observer check`: one line per requirement with ok/missing, then a verdict. It loads
//! and attaches the real programs one by one, which is the only honest test of "will it work".

use std::{fmt::Write as _, path::Path};

use crate::logging::error_chain;

use crate::probes::{
    DataHooks, ProbeSettings, Probes,
    hooks::{CORE_HOOKS, Hook, OPTIONAL_HOOKS},
    kernel_offsets::{KernelOffsets, VMLINUX_BTF},
};

/// Capability bits in /proc/self/status CapEff.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    /// An alternative this kernel does not need or does not have.
    Unused,
    /// Missing; one capability is lost, the daemon runs the rest.
    Degraded,
    /// Missing; the daemon cannot run.
    Missing,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Unused => "unused",
            Self::Degraded => "degraded",
            Self::Missing => "missing",
        }
    }
}

struct Line {
    requirement: String,
    status: Status,
    detail: String,
}

/// Runs every check, prints them, returns whether the daemon can run (all required pieces are
/// there; a missing optional piece degrades one capability and is named with its consequence).
pub fn check() -> bool {
    let mut lines = vec![privileges(), kernel_btf()];
    lines.push(match KernelOffsets::from_vmlinux() {
        Ok(o) => line("BTF field offsets", true, format!("task_struct.pid@{} tgid@{}", o.task_pid, o.task_tgid)),
        Err(e) => line("BTF field offsets", false, e.to_string()),
    });
    match Probes::load(ProbeSettings::default()) {
        Ok(mut probes) => {
            lines.push(line("eBPF object and maps", true, "loaded; ring buffer and hash maps created".into()));
            lines.extend(hook_lines(&mut probes));
            lines.push(tls_line(&mut probes));
        }
        Err(e) => lines.push(line("eBPF object and maps", false, error_chain(&e))),
    }
    let width = lines.iter().map(|l| l.requirement.len()).max().unwrap_or(0);
    let mut out = String::new();
    for l in &lines {
        let _ = writeln!(out, "{:width$}  {:8}  {}", l.requirement, l.status.as_str(), l.detail);
    }
    let runs = lines.iter().all(|l| l.status != Status::Missing);
    let degraded: Vec<&str> =
        lines.iter().filter(|l| l.status == Status::Degraded).map(|l| l.requirement.as_str()).collect();
    let _ = write!(
        out,
        "verdict: {}",
        match (runs, degraded.is_empty()) {
            (false, _) => "NOT ready (see the lines marked missing)".to_owned(),
            (true, true) => "ready".to_owned(),
            (true, false) => format!("ready, degraded: without {}", degraded.join(", ")),
        }
    );
    // The exit status carries the verdict; a closed stdout loses only the lines.
    let _ = super::output::line(&out);
    runs
}

/// One line per hook: the core ones are required; an optional one missing degrades its
/// capability; of the two sources of socket bytes one is needed, and each line says which is
/// in use.
fn hook_lines(probes: &mut Probes) -> Vec<Line> {
    let attach = |probes: &mut Probes, hook: &Hook| probes.attach_hook(hook).map_err(|e| error_chain(&e));
    let mut lines: Vec<Line> = CORE_HOOKS
        .iter()
        .map(|hook| match attach(probes, hook) {
            Ok(()) => line(&hook.describe(), true, "attached".into()),
            Err(e) => line(&hook.describe(), false, e),
        })
        .collect();
    for optional in OPTIONAL_HOOKS {
        lines.push(match attach(probes, &optional.hook) {
            Ok(()) => line(&optional.hook.describe(), true, format!("attached ({})", optional.capability)),
            Err(e) => Line {
                requirement: optional.hook.describe(),
                status: Status::Degraded,
                detail: format!("{}: {e}", optional.consequence),
            },
        });
    }
    let mut found = None;
    for source in [DataHooks::SocketTracepoints, DataHooks::TcpFunctions] {
        let tried: Vec<(Hook, Result<(), String>)> =
            source.hooks().iter().map(|hook| (*hook, attach(probes, hook))).collect();
        let in_use = found.is_none() && tried.iter().all(|(_, r)| r.is_ok());
        if in_use {
            found = Some(source);
        }
        lines.extend(tried.into_iter().map(|(hook, result)| {
            let (status, detail) = match (result, in_use) {
                (Ok(()), true) => (Status::Ok, "attached (in use)".to_owned()),
                (Ok(()), false) => (Status::Unused, "attached (not needed)".to_owned()),
                (Err(e), _) => (Status::Unused, format!("not used: {e}")),
            };
            Line { requirement: hook.describe(), status, detail }
        }));
    }
    lines.push(match found {
        Some(source) => line("socket bytes (request timing)", true, source.describe().into()),
        None => Line {
            requirement: "socket bytes (request timing)".into(),
            status: Status::Degraded,
            detail: "no source attaches: requests are not timed".into(),
        },
    });
    lines.push(walk_continuations_line(probes, found));
    lines.push(kernel_tls_line(found));
    lines
}

/// Whether HTTP/2 frames past a transfer's head are walked (the socket tracepoints' continuation
/// programs, which do their whole walks).
fn walk_continuations_line(probes: &mut Probes, found: Option<DataHooks>) -> Line {
    const REQUIREMENT: &str = "HTTP/2 frames past a transfer's head";
    let (status, detail) = match found {
        Some(DataHooks::SocketTracepoints) => match probes.load_walk_continuations() {
            Ok(()) => (Status::Ok, "continuation programs loaded (tail calls)".to_owned()),
            Err(e) => (
                Status::Degraded,
                format!(
                    "HTTP/2 frames past a transfer's head are not walked (its connection resyncs): {}",
                    error_chain(&e)
                ),
            ),
        },
        _ => {
            (Status::Unused, "not with the TCP functions: a walk stops at 32 frames past a transfer's head".to_owned())
        }
    };
    Line { requirement: REQUIREMENT.into(), status, detail }
}

/// Whether requests over kernel TLS (kTLS) are seen: their plaintext moves through the socket
/// calls, where the socket tracepoints read it, but above TCP's own functions.
fn kernel_tls_line(found: Option<DataHooks>) -> Line {
    const REQUIREMENT: &str = "kernel TLS";
    if found != Some(DataHooks::SocketTracepoints) {
        let detail = "kTLS sessions' plaintext moves above TCP's functions: their requests are not seen \
                      (counted as TLS connections unparsed)";
        return Line { requirement: REQUIREMENT.into(), status: Status::Degraded, detail: detail.into() };
    }
    let module = if Path::new("/sys/module/tls").exists() {
        "the tls module is loaded"
    } else {
        "the tls module is not loaded (the kernel loads it when a library asks, where it has one)"
    };
    let detail = format!(
        "plaintext read at the socket once a library hands the session to the kernel (OpenSSL's KTLS option; \
         nginx: ssl_conf_command Options KTLS), with no uprobe; {module}"
    );
    line(REQUIREMENT, true, detail)
}

/// Libraries a TLS stack is found in, where distributions put them.
const LIBRARY_DIRS: &[&str] =
    &["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib"];

/// Which TLS stacks are covered, and whether this host's OpenSSL can be hooked: its calls are
/// found and attached for this process (targets get theirs at run time, per pid).
fn tls_line(probes: &mut Probes) -> Line {
    const REQUIREMENT: &str = "TLS plaintext (uprobes)";
    let covered = "covered: OpenSSL 1.1/3 and BoringSSL in libssl.so*, or linked into a file that exports their \
         calls (Node.js) or names them in .symtab, netty-tcnative on a shared libssl, Go's crypto/tls; \
         not covered: stripped static builds, rustls, the JDK's TLS (counted as TLS connections unparsed)";
    let degraded = |detail: String| Line { requirement: REQUIREMENT.into(), status: Status::Degraded, detail };
    let found =
        LIBRARY_DIRS.iter().flat_map(|dir| ["libssl.so.3", "libssl.so.1.1"].map(|name| format!("{dir}/{name}")));
    let Some(path) = found.into_iter().find(|p| Path::new(p).exists()) else {
        return line(REQUIREMENT, true, format!("no libssl on this host; {covered}"));
    };
    let pid = std::process::id();
    let opened = crate::host::target_files::open(pid, &path, &[], crate::host::tls_libraries::MAX_LIBRARY_BYTES);
    let library = match opened {
        Ok(checked) => {
            let (file, identity) = (checked.file, checked.identity);
            crate::host::tls_libraries::Library { path: path.clone(), deleted: false, file, identity }
        }
        Err(e) => return degraded(format!("{path}: {e}; {covered}")),
    };
    let entries = match crate::host::tls_libraries::entries(&library.file) {
        Ok(entries) => entries,
        Err(e) => return degraded(format!("{path}: {e}; {covered}")),
    };
    let pmu = match crate::uprobe_opener::UprobePmu::read() {
        Ok(pmu) => pmu,
        Err(e) => return degraded(format!("no uprobe PMU ({e}); {covered}")),
    };
    let mut hooks = crate::probes::tls::TlsHooks::new(crate::uprobe_opener::UprobeOpener::InProcess(pmu));
    match hooks.attach(probes, pid, &library, &entries) {
        Ok(()) => match hooks.bounded_because() {
            None => line(REQUIREMENT, true, format!("{path}: {} calls attach; {covered}", entries.len())),
            Some(refused) => degraded(format!(
                "{path}: {} calls attach, with the bounded return programs: HTTP/2 frames past 32 in one call's \
                 plaintext are lost ({refused}); {covered}",
                entries.len()
            )),
        },
        Err(e) => degraded(format!("{path}: {}; HTTPS requests are not seen; {covered}", error_chain(&e))),
    }
}

fn line(requirement: &str, ok: bool, detail: String) -> Line {
    Line { requirement: requirement.into(), status: if ok { Status::Ok } else { Status::Missing }, detail }
}

fn privileges() -> Line {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let caps = effective_capabilities().unwrap_or(0);
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if euid == 0 {
        line("privileges", true, "root".into())
    } else if has(CAP_BPF) && has(CAP_PERFMON) {
        line("privileges", true, "CAP_BPF and CAP_PERFMON".into())
    } else if has(CAP_SYS_ADMIN) {
        line("privileges", true, "CAP_SYS_ADMIN".into())
    } else {
        line("privileges", false, format!("uid {euid} without CAP_BPF+CAP_PERFMON: run as root"))
    }
}

fn effective_capabilities() -> Option<u64> {
    crate::host::procfs::parse_effective_capabilities(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn kernel_btf() -> Line {
    if Path::new(VMLINUX_BTF).exists() {
        line("kernel BTF", true, VMLINUX_BTF.into())
    } else {
        line("kernel BTF", false, format!("{VMLINUX_BTF} absent: needs a kernel built with CONFIG_DEBUG_INFO_BTF"))
    }
}
