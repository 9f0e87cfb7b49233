//! The daemon's own CPU under a fixed load, where a share of a core means something (at
//! saturation it only grows with the rate): a gateway at a fixed request rate (open loop,
//! `loadgen`), and a process of 2,000 threads each napping 100 ms in a loop.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::Options;
use super::daemon::{Cost, Daemon};
use super::report::{Goal, Report, Unit};
use super::saturation::Target;
use crate::bench_gateway::Procs;
use crate::loadgen::{self, LoadSpec};

const RATE_PHASES: usize = 3;
const RATE_CONNECTIONS: usize = 64;
const NAP_THREADS: usize = 2_000;
const NAP_MILLIS: u64 = 100;
const NAP_WINDOWS: u32 = 3;
const GOAL_DAEMON_SHARE: f64 = 0.02;

/// One phase at the fixed rate: (the rate reached, the daemon's share of a core, its peak RSS).
pub(super) type RatePhase = (f64, f64, f64);

pub(super) fn at_rate(opts: &Options, target: &Target, observer: &Path, procs: &mut Procs) -> Result<Vec<RatePhase>> {
    let spec =
        LoadSpec { port: target.port, rate: opts.rate, connections: RATE_CONNECTIONS, duration: opts.duration() };
    println!("\n{} at {} req/s (open loop, {RATE_CONNECTIONS} connections), observer on", target.name, opts.rate);
    let mut out = Vec::new();
    for phase in 0..RATE_PHASES {
        procs.check_alive()?;
        let mut daemon = Daemon::start(observer, target.pid, target.dir, &format!("{}-rate-{phase}", target.name))?;
        let before = daemon.snapshot()?;
        let load = loadgen::start(spec)?.finish()?;
        let cost = Cost::between(&before, &daemon.snapshot()?);
        let rss = daemon.peak_rss_mib()?;
        println!(
            "phase {} {:>7.0} req/s reached ({} errors, {} unsent)  p50 {:.3} ms  p99 {:.3} ms  daemon {:.2} % of a core",
            phase + 1,
            load.achieved_rps,
            load.errors,
            load.unsent,
            load.p50_ms,
            load.p99_ms,
            cost.daemon_share() * 100.0
        );
        out.push((load.achieved_rps, cost.daemon_share(), rss));
    }
    Ok(out)
}

pub(super) fn add_rate_rows(report: &mut Report, gateway: &str, rate: f64, phases: &[RatePhase]) {
    let goal = Goal::at_most(format!("<= {} % of a core", GOAL_DAEMON_SHARE * 100.0), GOAL_DAEMON_SHARE);
    let share = phases.iter().map(|p| p.1).collect();
    report.cost(format!("daemon CPU, {gateway} at {rate:.0} req/s"), share, Unit::CoreShare, Some(goal));
    report.figure(format!("{gateway} req/s reached of {rate:.0}"), phases.iter().map(|p| p.0).collect(), Unit::Rps);
    report.rss(phases.iter().map(|p| p.2));
    let short = phases.iter().filter(|p| p.0 < rate * 0.97).count();
    if short > 0 {
        report.note(format!("{gateway}: {short} phase(s) fell short of {rate:.0} req/s (the machine saturates)"));
    }
}

/// The daemon's share of a core per window while it follows the napping threads, and its peak RSS.
pub(super) fn napping_threads(window: Duration, napping: &Path, observer: &Path, dir: &Path) -> Result<Naps> {
    println!("\n{NAP_THREADS} threads napping {NAP_MILLIS} ms, observer on");
    let mut procs = Procs::default();
    let lifetime = (window * (NAP_WINDOWS + 3) + Duration::from_secs(30)).as_secs().to_string();
    let mut cmd = Command::new(napping);
    cmd.args([NAP_THREADS.to_string(), NAP_MILLIS.to_string(), lifetime]);
    let (pid, stdout) = procs.spawn_with_stdout("napping-threads", &mut cmd)?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).context("napping-threads did not start")?;
    if line.trim() != "ready" {
        bail!("napping-threads said {line:?}, not ready");
    }
    let mut daemon = Daemon::start(observer, pid, dir, "napping")?;
    let mut naps = Naps::default();
    // Window 0 holds the daemon's start-up: the pool's alert fires within it, and its first
    // stacks parse every file the process maps, once. It is shown apart; the goal is judged on
    // the windows after it, what following the threads costs for as long as they run.
    for w in 0..=NAP_WINDOWS {
        let before = daemon.snapshot()?;
        std::thread::sleep(window);
        let cost = Cost::between(&before, &daemon.snapshot()?);
        let (daemon_share, kernel_share) = (cost.daemon_share(), cost.kernel_cpu_s / cost.wall_s);
        println!(
            "window {w}{} daemon {:.2} % of a core, kernel programs {:.2} % (bpf_stats)",
            if w == 0 { " (start-up)" } else { "" },
            daemon_share * 100.0,
            kernel_share * 100.0
        );
        if w == 0 {
            naps.startup_share = daemon_share;
            continue;
        }
        naps.daemon_shares.push(daemon_share);
        naps.kernel_shares.push(kernel_share);
    }
    procs.check_alive().context("napping-threads ended early")?;
    naps.peak_rss_mib = daemon.peak_rss_mib()?;
    Ok(naps)
}

/// What following the napping threads cost, per window.
#[derive(Default)]
pub(super) struct Naps {
    daemon_shares: Vec<f64>,
    /// The kernel programs' run time (bpf_stats), as a share of one core: a nap is a context
    /// switch each way and, past the block threshold, a long block.
    kernel_shares: Vec<f64>,
    /// The daemon's share in its first window (start-up).
    startup_share: f64,
    peak_rss_mib: f64,
}

pub(super) fn add_nap_rows(report: &mut Report, naps: &Naps) {
    let goal = Goal::at_most(format!("<= {} % of a core", GOAL_DAEMON_SHARE * 100.0), GOAL_DAEMON_SHARE);
    let label = format!("daemon CPU, {NAP_THREADS} threads napping {NAP_MILLIS} ms");
    report.cost(label, naps.daemon_shares.clone(), Unit::CoreShare, Some(goal));
    let label = format!("kernel programs, {NAP_THREADS} threads napping {NAP_MILLIS} ms");
    report.cost(label, naps.kernel_shares.clone(), Unit::CoreShare, None);
    let label = format!("daemon CPU, {NAP_THREADS} threads napping {NAP_MILLIS} ms, start-up window");
    report.figure(label, vec![naps.startup_share], Unit::CoreShare);
    report.rss([naps.peak_rss_mib]);
}
