//! Targeted sched_switch and sched_wakeup ns/event: the daemon targeting a context-switch-heavy
//! load (`switch-load`), next to an empty program on the same hooks and next to libbpf-tools'
//! `runqlat -p <load>` on the same load. Rounds rotate the three so drift hits each alike. All
//! three are read the same way: bpf_stats of the programs their process holds.
//!
//! Runs are counted host-wide (the hooks fire for every task); the load makes most of them, so
//! the figure is close to its targeted cost, pulled slightly down by other tasks' cheap exits.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::daemon::Daemon;
use super::report::{Goal, Report, Unit};
use crate::bench_gateway::Procs;
use crate::bpf_progs::{self, EmptyProgram, ProgStats};

const ROUNDS: usize = 3;
const WINDOW: Duration = Duration::from_secs(5);
const SETTLE: Duration = Duration::from_millis(500);
/// Longer than any phase; the load is killed when its phase ends.
const LOAD_SECONDS: &str = "120";
const GOAL_SWITCH_NS: f64 = 100.0;
const GOAL_WAKEUP_NS: f64 = 80.0;

#[derive(Clone, Copy)]
enum Probe {
    Ours,
    Empty,
    Runqlat,
}

const PROBES: [Probe; 3] = [Probe::Ours, Probe::Empty, Probe::Runqlat];

/// ns/event per round, indexed like PROBES; NaN where a hook did not run.
#[derive(Default)]
pub(super) struct SchedCosts {
    switch: [Vec<f64>; 3],
    wakeup: [Vec<f64>; 3],
    rss_mib: Vec<f64>,
}

pub(super) fn measure(observer: &Path, switch_load: &Path, dir: &Path) -> Result<SchedCosts> {
    println!("\nsched_switch / sched_wakeup under switch-load: ours (targeted), an empty program, runqlat -p");
    let mut costs = SchedCosts::default();
    for round in 0..ROUNDS {
        for k in 0..PROBES.len() {
            let index = (round + k) % PROBES.len();
            let mut load = Procs::default(); // killed at the end of this phase
            let pid = load.spawn("switch-load", Command::new(switch_load).arg(LOAD_SECONDS).stdout(Stdio::null()))?;
            let (switch, wakeup) = match PROBES[index] {
                Probe::Ours => {
                    let mut daemon = Daemon::start(observer, pid, dir, &format!("sched-{round}"))?;
                    let before = daemon.snapshot()?;
                    std::thread::sleep(WINDOW);
                    let after = daemon.snapshot()?;
                    costs.rss_mib.push(daemon.peak_rss_mib()?);
                    per_event(before.progs(), after.progs(), ["sched_switch"], ["sched_waking"])
                }
                Probe::Empty => empty_programs()?,
                Probe::Runqlat => runqlat(pid)?,
            };
            load.check_alive().context("the switch load ended early")?;
            println!(
                "round {} {:8} sched_switch {switch:6.1} ns  wakeup {wakeup:6.1} ns",
                round + 1,
                ["ours", "empty", "runqlat"][index]
            );
            costs.switch[index].push(switch);
            costs.wakeup[index].push(wakeup);
        }
    }
    Ok(costs)
}

/// ns/event of the switch and the wakeup program between two snapshots, each found by the
/// first of its candidate names that ran.
fn per_event<const N: usize>(
    before: &[ProgStats],
    after: &[ProgStats],
    switch: [&str; N],
    wakeup: [&str; N],
) -> (f64, f64) {
    let ns = |names: [&str; N]| names.iter().find_map(|n| bpf_progs::ns_per_run(before, after, n)).unwrap_or(f64::NAN);
    (ns(switch), ns(wakeup))
}

fn empty_programs() -> Result<(f64, f64)> {
    let switch = EmptyProgram::attach("sched_switch")?;
    let wakeup = EmptyProgram::attach("sched_waking")?;
    std::thread::sleep(SETTLE);
    let before = [switch.stats()?, wakeup.stats()?];
    std::thread::sleep(WINDOW);
    let after = [switch.stats()?, wakeup.stats()?];
    let ns = |i: usize| {
        let runs = after[i].run_cnt.saturating_sub(before[i].run_cnt);
        if runs == 0 {
            f64::NAN
        } else {
            after[i].run_time_ns.saturating_sub(before[i].run_time_ns) as f64 / runs as f64
        }
    };
    Ok((ns(0), ns(1)))
}

/// runqlat traces one process with `-p`, like our targeting; its programs are read from its fds.
fn runqlat(load: u32) -> Result<(f64, f64)> {
    let mut procs = Procs::default();
    let pid = procs.spawn(
        "runqlat",
        Command::new("runqlat").args(["-p", &load.to_string()]).stdout(Stdio::null()).stderr(Stdio::null()),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while bpf_progs::held_by(pid)?.len() < 2 {
        procs.check_alive()?;
        if Instant::now() > deadline {
            bail!("runqlat loaded no programs within 10 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(SETTLE); // attached right after loading
    let before = bpf_progs::held_by(pid)?;
    std::thread::sleep(WINDOW);
    let after = bpf_progs::held_by(pid)?;
    procs.check_alive()?;
    // tp_btf programs (named after the hook), or the raw_tp fallback's, cut to 15 bytes.
    Ok(per_event(&before, &after, ["sched_switch", "handle_sched_sw"], ["sched_wakeup", "handle_sched_wa"]))
}

impl SchedCosts {
    pub(super) fn add_rows(self, report: &mut Report) {
        for (hook, per_probe, goal) in [
            ("sched_switch", &self.switch, GOAL_SWITCH_NS),
            ("sched_waking (runqlat: sched_wakeup)", &self.wakeup, GOAL_WAKEUP_NS),
        ] {
            let [ours, empty, runqlat] = per_probe;
            let ratio = |other: &[f64]| ours.iter().zip(other).map(|(o, e)| o / e).collect();
            report.ratio(format!("{hook} ns/event ours/empty program"), ratio(empty), None);
            report.ratio(format!("{hook} ns/event ours/runqlat"), ratio(runqlat), None);
            let goal = Goal::at_most(format!("<= {goal} ns/event"), goal);
            report.cost(format!("targeted {hook} ns/event, ours"), ours.clone(), Unit::Ns, Some(goal));
            report.figure(format!("{hook} ns/event, empty program"), empty.clone(), Unit::Ns);
            report.figure(format!("{hook} ns/event, runqlat -p"), runqlat.clone(), Unit::Ns);
        }
        report.rss(self.rss_mib);
    }
}
