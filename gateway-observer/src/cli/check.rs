//! `gateway-observer check`: one line per requirement with ok/missing, then a verdict. It loads
//! and attaches the real programs one by one, which is the only honest test of "will it work".

use std::path::Path;

use crate::probes::{
    DataHooks, ProbeSettings, Probes,
    hooks::{CORE_HOOKS, Hook},
    kernel_offsets::{KernelOffsets, VMLINUX_BTF},
};

/// Capability bits in /proc/self/status CapEff.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

struct Line {
    requirement: String,
    ok: bool,
    detail: String,
}

/// Runs every check, prints them, returns whether all passed.
pub fn check() -> bool {
    let mut lines = vec![privileges(), kernel_btf()];
    lines.push(match KernelOffsets::from_vmlinux() {
        Ok(o) => line("BTF field offsets", true, format!("task_struct.pid@{} tgid@{}", o.task_pid, o.task_tgid)),
        Err(e) => line("BTF field offsets", false, e.to_string()),
    });
    match Probes::load(ProbeSettings::default()) {
        Ok(mut probes) => {
            lines.push(line("eBPF object and maps", true, "loaded; ring buffer and hash maps created".into()));
            let attach = |probes: &mut Probes, hook: &Hook| match probes.attach_hook(hook) {
                Ok(()) => line(&hook.describe(), true, "attached".into()),
                Err(e) => line(&hook.describe(), false, error_chain(&e)),
            };
            lines.extend(CORE_HOOKS.iter().map(|hook| attach(&mut probes, hook)));
            // Either source of socket bytes will do: the socket layer's tracepoints (6.5+), else
            // TCP's functions. Only having one is a requirement; each line says which is used.
            let mut found = None;
            for source in [DataHooks::SocketTracepoints, DataHooks::TcpFunctions] {
                let tried: Vec<Line> = source.hooks().iter().map(|hook| attach(&mut probes, hook)).collect();
                let ok = tried.iter().all(|l| l.ok);
                let role = match (ok, found.is_none()) {
                    (true, true) => "in use",
                    (true, false) => "not needed",
                    (false, _) => "not used",
                };
                if ok && found.is_none() {
                    found = Some(source);
                }
                lines.extend(tried.into_iter().map(|l| Line {
                    ok: true,
                    detail: format!("{} ({role})", l.detail),
                    ..l
                }));
            }
            lines.push(match found {
                Some(source) => line("socket bytes (request timing)", true, source.describe().into()),
                None => {
                    line("socket bytes (request timing)", false, "no source attaches: requests are not timed".into())
                }
            });
        }
        Err(e) => lines.push(line("eBPF object and maps", false, error_chain(&e))),
    }
    let width = lines.iter().map(|l| l.requirement.len()).max().unwrap_or(0);
    for l in &lines {
        let status = if l.ok { "ok" } else { "missing" };
        println!("{:width$}  {status:7}  {}", l.requirement, l.detail);
    }
    let all_ok = lines.iter().all(|l| l.ok);
    println!("verdict: {}", if all_ok { "ready" } else { "NOT ready (see the lines marked missing)" });
    all_ok
}

fn line(requirement: &str, ok: bool, detail: String) -> Line {
    Line { requirement: requirement.into(), ok, detail }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    u64::from_str_radix(hex, 16).ok()
}

fn kernel_btf() -> Line {
    if Path::new(VMLINUX_BTF).exists() {
        line("kernel BTF", true, VMLINUX_BTF.into())
    } else {
        line("kernel BTF", false, format!("{VMLINUX_BTF} absent: needs a kernel built with CONFIG_DEBUG_INFO_BTF"))
    }
}
