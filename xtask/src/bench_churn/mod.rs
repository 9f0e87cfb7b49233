//! `cargo xtask bench churn`: the daemon through churn and soak, against issue 16's goals. One
//! daemon (`gateway-observer run`, default settings) watches a baseline reference-gateway under
//! light load for the whole run, and what comes and goes beside it:
//!
//! 1. a second gateway (`churn-gateway`: the same binary under another name, another upstream)
//!    started, sent a few requests and stopped, N times;
//! 2. a process of 2,000 threads that nap, then exit;
//! 3. 10,000 concurrent keep-alive connections to the baseline gateway, then closed;
//! 4. a burst of short connections (wrk, `Connection: close`).
//!
//! After each phase, within a bounded settle time: the kernel maps must hold what the live
//! targets need and no more (TARGETS, THREADS, SOCKS against the processes, threads and
//! connections that are there, from the daemon's gauges and from `bpftool`; LISTEN_PORTS,
//! BLOCK_DETAIL and STACKS back to the baseline), the daemon's RSS within ±10 % of the baseline's,
//! its heap in use within 1 MiB of it, and no series in `/metrics` labelled with a process, thread,
//! thread group, peer or port that is gone.
//! Then one table of figures and verdicts.
//!
//! Privileged. The machine's end-to-end lock is held only while phases run; every process the
//! bench starts is ended on the way out, also on error.

mod fleet;
mod measure;
mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::args;
use crate::bench_gateway::release_build;
use fleet::Fleet;
use measure::{Baseline, Measurement};
use report::Report;

/// Restarts, 2,000 threads, 10,000 connections, a burst: maps, RSS and series back (as root)
///
/// The daemon through churn and soak beside a baseline gateway, against issue 16's goals: after
/// each phase the kernel maps, the daemon's RSS and its series must come back. One table of
/// figures and verdicts.
#[derive(clap::Args, Debug)]
pub(crate) struct Options {
    /// Times a second gateway is started, sent a few requests and stopped.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) restarts: usize,
    /// Threads of the napping process (the kernel maps have room for 10000).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = args::number_in(..=10_000_usize))]
    pub(crate) threads: usize,
    /// Concurrent keep-alive connections to the baseline gateway (the kernel maps have room for
    /// 30000).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = args::number_in(..=30_000_usize))]
    pub(crate) connections: usize,
    /// Seconds of the burst of short connections.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub(crate) burst_seconds: u64,
    /// Seconds a phase's aftermath may take to settle, at most (at least 15: the daemon counts
    /// SOCKS every 10 s).
    #[arg(long, value_name = "SECONDS", default_value_t = 75, value_parser = args::number_in(15_u64..))]
    pub(crate) settle: u64,
}

/// The release binaries the phases start.
pub(crate) struct Binaries {
    pub(crate) observer: PathBuf,
    pub(crate) gateway: PathBuf,
    pub(crate) napping_threads: PathBuf,
}

pub fn run(opts: &Options) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench churn loads eBPF programs: run it as root");
    }
    let release = release_build(&["nginx", "wrk", "bpftool"])?;
    let bins = Binaries {
        observer: release.join("gateway-observer"),
        gateway: release.join("reference-gateway"),
        napping_threads: release.join("napping-threads"),
    };
    // Per process: the bench holds the clients' ends, the gateway the servers'.
    fleet::raise_fd_limit(opts.connections as u64 + 4096)?;
    let dir = std::env::temp_dir().join(format!("churn-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let date = crate::util::output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let result = {
        let _lock = crate::bench_detect::e2e_lock()?;
        phases(opts, &bins, &dir)
    };
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    report.print(date.trim(), opts);
    if !report.all_met() {
        bail!("some goals were not met (see the table)");
    }
    Ok(())
}

/// Starts the fleet and the daemon, measures the baseline, runs every phase and measures its
/// aftermath. Everything started is ended when `fleet` drops.
fn phases(opts: &Options, bins: &Binaries, dir: &Path) -> Result<Report> {
    let started = Instant::now();
    let mut fleet = Fleet::start(bins, dir)?;
    eprintln!("churn: daemon ready (pid {}), measuring the baseline", fleet.daemon_pid);
    let baseline = Baseline::measure(&mut fleet)?;
    eprintln!("churn: baseline {}", baseline.describe());
    let mut report = Report::new(baseline);
    let restarts = Instant::now();
    let seen = fleet.restart_gateway(opts.restarts)?;
    let restart_note = format!(
        "{} restarts in {:.0} s, {seen} followed by the daemon (listed in its snapshot) before their stop",
        opts.restarts,
        restarts.elapsed().as_secs_f64()
    );
    settle(&mut fleet, &mut report, "1 gateway restarted", restart_note, opts)?;
    let threads = fleet.many_threads(opts.threads)?;
    settle(&mut fleet, &mut report, "2 many threads", threads, opts)?;
    let held = fleet.many_connections(opts.connections)?;
    settle(&mut fleet, &mut report, "3 many connections", held, opts)?;
    let burst = fleet.short_connection_burst(Duration::from_secs(opts.burst_seconds))?;
    settle(&mut fleet, &mut report, "4 short-connection burst", burst, opts)?;
    report.total = started.elapsed();
    Ok(report)
}

/// Polls the aftermath of a phase once a second until every goal holds (then once more, to see
/// it stays so) or `opts.settle` passes; the last measurement goes into the report.
fn settle(fleet: &mut Fleet, report: &mut Report, phase: &str, note: String, opts: &Options) -> Result<()> {
    let settle = Duration::from_secs(opts.settle);
    eprintln!("churn: {phase}: {note}; settling (at most {} s)", settle.as_secs());
    let ended = Instant::now();
    let deadline = ended + settle;
    let mut clean_once = false;
    let measurement = loop {
        std::thread::sleep(Duration::from_secs(1));
        fleet.check_alive()?;
        let m = Measurement::take(fleet, ended)?;
        let clean = m.clean(&report.baseline);
        if (clean && clean_once) || Instant::now() >= deadline {
            break m;
        }
        clean_once = clean;
    };
    eprintln!("churn: {phase}: {}", measurement.describe(&report.baseline));
    report.add(phase, note, measurement);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Bench, tests::bench};

    #[test]
    fn defaults_are_the_readmes() {
        // README.md, "Churn and soak": `--restarts 100 --threads 2000 --connections 10000
        // --burst-seconds 5 --settle 75`.
        let Bench::Churn(o) = bench(&["churn"]) else { panic!("not bench churn") };
        assert_eq!([o.restarts, o.threads, o.connections], [100, 2000, 10_000]);
        assert_eq!((o.burst_seconds, o.settle), (5, 75));
    }
}
