//! What a process the observer does not target pays per syscall: a tight getppid(2) loop in this
//! process (the cheapest syscall there is, so any hook on the syscall path shows), timed without
//! and with the daemon attached to an idle process, in pairs with the order swapped each pair.
//! Each pair also times the loop with empty programs on sys_enter and sys_exit: the floor any
//! syscall hook costs every process here (the tracepoint slow path plus a program run).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::daemon::Daemon;
use super::report::{Goal, Report, Unit};
use crate::bench_gateway::{Procs, median};
use crate::bpf_progs::EmptyProgram;

const CHUNK: Duration = Duration::from_millis(100);
const CHUNKS: usize = 10;
const BATCH: u32 = 1_000;
const GOAL_ADDED_NS: f64 = 5.0;

/// ns per syscall in one pair's three phases.
pub(super) struct SyscallPair {
    off: f64,
    on: f64,
    empty_hooks: f64,
}

#[derive(Clone, Copy)]
enum Phase {
    Off,
    On,
    EmptyHooks,
}

pub(super) fn pairs(count: usize, observer: &Path, dir: &Path) -> Result<Vec<SyscallPair>> {
    let mut idle = Procs::default();
    let target = idle.spawn("sleep", Command::new("sleep").arg("3600").stdout(Stdio::null()))?;
    println!(
        "\nuntargeted getppid(2) loop in pid {} (the observer targets an idle sleep, pid {target})",
        std::process::id()
    );
    let phases = [Phase::Off, Phase::On, Phase::EmptyHooks];
    let mut out = Vec::new();
    for pair in 0..count {
        let mut sample = SyscallPair { off: f64::NAN, on: f64::NAN, empty_hooks: f64::NAN };
        // Rotate the order so no phase always runs first.
        for k in 0..phases.len() {
            match phases[(pair + k) % phases.len()] {
                Phase::Off => sample.off = ns_per_syscall(),
                Phase::On => {
                    let _daemon = Daemon::start(observer, target, dir, &format!("syscall-{pair}"))?;
                    sample.on = ns_per_syscall();
                }
                Phase::EmptyHooks => {
                    let _hooks = [EmptyProgram::attach("sys_enter")?, EmptyProgram::attach("sys_exit")?];
                    sample.empty_hooks = ns_per_syscall();
                }
            }
        }
        let SyscallPair { off, on, empty_hooks } = sample;
        println!(
            "pair {:2} off {off:6.1} ns  on {on:6.1} ns (added {:+6.1})  empty hooks {empty_hooks:6.1} ns (added {:+6.1})",
            pair + 1,
            on - off,
            empty_hooks - off
        );
        out.push(sample);
    }
    Ok(out)
}

/// Median over short chunks of the ns one getppid(2) takes: a chunk that lost the CPU to another
/// task is an outlier the median drops.
fn ns_per_syscall() -> f64 {
    let chunks = (0..CHUNKS)
        .map(|_| {
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < CHUNK {
                for _ in 0..BATCH {
                    // SAFETY: getppid takes no arguments and cannot fail.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                }
                calls += u64::from(BATCH);
            }
            start.elapsed().as_nanos() as f64 / calls as f64
        })
        .collect();
    median(chunks)
}

pub(super) fn add_rows(report: &mut Report, pairs: &[SyscallPair]) {
    let each = |f: fn(&SyscallPair) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
    report.ratio("untargeted syscall ns on/off", each(|p| p.on / p.off), None);
    let goal = Goal::at_most(format!("<= {GOAL_ADDED_NS} ns added"), GOAL_ADDED_NS);
    report.cost("untargeted syscall: ns added (on − off)", each(|p| p.on - p.off), Unit::Ns, Some(goal));
    report.figure("untargeted getppid off", each(|p| p.off), Unit::Ns);
    report.figure("untargeted getppid on", each(|p| p.on), Unit::Ns);
    report.figure("ns added by empty sys_enter+sys_exit programs", each(|p| p.empty_hooks - p.off), Unit::Ns);
}
