//! The kernel's own accounting of BPF programs (with kernel.bpf_stats_enabled=1 it times every
//! run: run_time_ns, run_cnt), read for any process from /proc/PID/fdinfo of the program fds it
//! holds. The daemon, runqlat and our own empty programs are all measured this way, at instants
//! of our choosing rather than at the daemon's collection ticks.
//!
//! Also loads an empty program (`r0 = 0; exit`) on a raw tracepoint: the floor any program on
//! that hook costs here, bpf_stats' own timing included.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use anyhow::{Context as _, Result};

/// One program's counters at one instant.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProgStats {
    pub(crate) id: u32,
    /// The kernel's name for it: the function name cut to 15 bytes.
    pub(crate) name: String,
    pub(crate) run_time_ns: u64,
    pub(crate) run_cnt: u64,
}

/// Every program `pid` holds a file descriptor to, once each (by program id).
pub(crate) fn held_by(pid: u32) -> Result<Vec<ProgStats>> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut out: Vec<ProgStats> = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("failed to list {dir}"))?.flatten() {
        // An fd closed since the listing is simply gone.
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let Some((id, run_time_ns, run_cnt)) = parse_fdinfo(&text) else { continue };
        if out.iter().any(|p| p.id == id) {
            continue;
        }
        out.push(ProgStats { id, name: prog_name(id).unwrap_or_default(), run_time_ns, run_cnt });
    }
    Ok(out)
}

/// (prog_id, run_time_ns, run_cnt) of a program fd's fdinfo; None for any other fd (a link's
/// fdinfo names a prog_id too, but has no counters).
fn parse_fdinfo(text: &str) -> Option<(u32, u64, u64)> {
    let field =
        |key: &str| text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse::<u64>().ok());
    Some((u32::try_from(field("prog_id")?).ok()?, field("run_time_ns")?, field("run_cnt")?))
}

/// Σ run time and Σ runs between two snapshots of the same holder, over programs in both.
pub(crate) fn total_delta(before: &[ProgStats], after: &[ProgStats]) -> (u64, u64) {
    after.iter().fold((0, 0), |(ns, runs), a| match before.iter().find(|b| b.id == a.id) {
        Some(b) => (ns + a.run_time_ns.saturating_sub(b.run_time_ns), runs + a.run_cnt.saturating_sub(b.run_cnt)),
        None => (ns, runs),
    })
}

/// Per program that ran between two snapshots: (name, ns, runs), costliest first.
pub(crate) fn per_program_delta(before: &[ProgStats], after: &[ProgStats]) -> Vec<(String, u64, u64)> {
    let mut out: Vec<(String, u64, u64)> = after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.id == a.id)?;
            let runs = a.run_cnt.saturating_sub(b.run_cnt);
            (runs > 0).then(|| (a.name.clone(), a.run_time_ns.saturating_sub(b.run_time_ns), runs))
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.1));
    out
}

/// ns per run of the program named `name` between two snapshots; None if it did not run.
pub(crate) fn ns_per_run(before: &[ProgStats], after: &[ProgStats], name: &str) -> Option<f64> {
    let pick = |s: &[ProgStats]| s.iter().find(|p| p.name == name).cloned();
    let (b, a) = (pick(before)?, pick(after)?);
    let runs = a.run_cnt.checked_sub(b.run_cnt).filter(|r| *r > 0)?;
    Some(a.run_time_ns.saturating_sub(b.run_time_ns) as f64 / runs as f64)
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
/// Where `name` sits in `struct bpf_prog_info` (uapi, stable since 4.15).
const PROG_INFO_NAME: std::ops::Range<usize> = 64..80;

/// bpf(2) with `attr` as its attribute block; its non-negative return, or the errno as an error.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<libc::c_long> {
    // SAFETY: attr is a live, initialised #[repr(C)] block of the given size for this command;
    // the kernel reads (and for GET_INFO, writes) only within it and the buffers it points to,
    // which the callers keep alive across the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr), size_of::<T>()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

/// bpf(2) for a command that returns a new fd.
fn bpf_fd<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<OwnedFd> {
    let fd = i32::try_from(bpf(cmd, attr)?).map_err(|_| std::io::Error::other("bpf returned no fd"))?;
    // SAFETY: a non-negative return of these commands is a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn prog_name(id: u32) -> Result<String> {
    #[repr(C)]
    struct GetFdById {
        prog_id: u32,
        next_id: u32,
        open_flags: u32,
    }
    #[repr(C)]
    struct GetInfo {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let fd = bpf_fd(BPF_PROG_GET_FD_BY_ID, &mut GetFdById { prog_id: id, next_id: 0, open_flags: 0 })
        .with_context(|| format!("no BPF program {id}"))?;
    let mut info = [0u8; 256]; // bpf_prog_info; the kernel fills what it knows of it
    let mut attr =
        GetInfo { bpf_fd: fd.as_raw_fd() as u32, info_len: info.len() as u32, info: info.as_mut_ptr() as u64 };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).with_context(|| format!("cannot read BPF program {id}'s info"))?;
    let name = &info[PROG_INFO_NAME];
    let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..len]).into_owned())
}

/// An empty program attached to a raw tracepoint; detached when dropped (its fds close).
pub(crate) struct EmptyProgram {
    _link: OwnedFd,
    prog: OwnedFd,
}

impl EmptyProgram {
    pub(crate) fn attach(tracepoint: &str) -> Result<Self> {
        #[repr(C)]
        struct ProgLoad {
            prog_type: u32,
            insn_cnt: u32,
            insns: u64,
            license: u64,
            log_level: u32,
            log_size: u32,
            log_buf: u64,
            kern_version: u32,
            prog_flags: u32,
            prog_name: [u8; 16],
        }
        #[repr(C)]
        struct RawTracepointOpen {
            name: u64,
            prog_fd: u32,
            _pad: u32,
        }
        // mov64 r0, 0; exit
        let insns: [u64; 2] = [u64::from_le_bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]), 0x95];
        let license = c"GPL";
        let mut name = [0u8; 16];
        for (dst, src) in name.iter_mut().zip(b"empty_program") {
            *dst = *src;
        }
        let mut load = ProgLoad {
            prog_type: BPF_PROG_TYPE_RAW_TRACEPOINT,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 0,
            log_size: 0,
            log_buf: 0,
            kern_version: 0,
            prog_flags: 0,
            prog_name: name,
        };
        let prog = bpf_fd(BPF_PROG_LOAD, &mut load).context("cannot load an empty BPF program (root?)")?;
        let tp = CString::new(tracepoint).context("tracepoint name has a NUL")?;
        let mut open = RawTracepointOpen { name: tp.as_ptr() as u64, prog_fd: prog.as_raw_fd() as u32, _pad: 0 };
        let link = bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut open)
            .with_context(|| format!("cannot attach an empty program to raw tracepoint {tracepoint}"))?;
        Ok(EmptyProgram { _link: link, prog })
    }

    pub(crate) fn stats(&self) -> Result<ProgStats> {
        let path = format!("/proc/self/fdinfo/{}", self.prog.as_raw_fd());
        let text = std::fs::read_to_string(&path).with_context(|| format!("failed to read {path}"))?;
        let (id, run_time_ns, run_cnt) = parse_fdinfo(&text).with_context(|| format!("no counters in {path}"))?;
        Ok(ProgStats { id, name: "empty_program".to_owned(), run_time_ns, run_cnt })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(id: u32, name: &str, run_time_ns: u64, run_cnt: u64) -> ProgStats {
        ProgStats { id, name: name.to_owned(), run_time_ns, run_cnt }
    }

    #[test]
    fn fdinfo_of_a_program_and_not_of_a_link() {
        let program = "pos:\t0\nprog_type:\t26\nprog_id:\t4613\nrun_time_ns:\t1200\nrun_cnt:\t10\n";
        assert_eq!(parse_fdinfo(program), Some((4613, 1200, 10)));
        let link = "pos:\t0\nlink_type:\ttracing\nlink_id:\t7\nprog_tag:\tb205\nprog_id:\t4613\n";
        assert_eq!(parse_fdinfo(link), None);
        assert_eq!(parse_fdinfo("prog_id:\tx\nrun_time_ns:\t1\nrun_cnt:\t1\n"), None, "malformed id");
    }

    #[test]
    fn deltas_match_programs_by_id() {
        let before = [prog(1, "sched_switch", 1_000, 10), prog(2, "sys_enter", 500, 5)];
        let after = [prog(1, "sched_switch", 3_000, 30), prog(2, "sys_enter", 800, 8), prog(3, "new", 99, 9)];
        assert_eq!(total_delta(&before, &after), (2_300, 23), "a program absent before is not counted");
        assert_eq!(ns_per_run(&before, &after, "sched_switch"), Some(100.0));
        assert_eq!(ns_per_run(&before, &before, "sched_switch"), None, "no runs, no figure");
        assert_eq!(ns_per_run(&before, &after, "missing"), None);
    }

    /// Needs root: loads a program and turns kernel.bpf_stats_enabled on (restored after).
    #[test]
    #[ignore = "needs root (loads a BPF program)"]
    fn an_empty_program_counts_the_switches_this_thread_makes() {
        crate::bench_probes::with_bpf_stats(|| {
            let empty = EmptyProgram::attach("sched_switch")?;
            let before = empty.stats()?;
            for _ in 0..200 {
                std::thread::sleep(std::time::Duration::from_millis(1)); // one switch out each
            }
            let after = empty.stats()?;
            let runs = after.run_cnt - before.run_cnt;
            assert!(runs >= 200, "{runs} runs for 200 sleeps");
            let ns = (after.run_time_ns - before.run_time_ns) as f64 / runs as f64;
            assert!(ns > 0.0 && ns < 10_000.0, "{ns} ns per run of an empty program");
            let held = held_by(std::process::id())?;
            let listed = held.iter().find(|p| p.id == after.id).expect("our program among our fds");
            assert_eq!(listed.name, "empty_program");
            assert!(listed.run_cnt >= after.run_cnt);
            Ok(())
        })
        .unwrap();
    }
}
