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
//! connections that are there, from the daemon's gauges and from `bpftool`; LISTEN_PORTS and
//! STACKS back to the baseline), the daemon's RSS within ±10 % of the baseline's, and no series
//! in `/metrics` labelled with a process, thread, thread group, peer or port that is gone.
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

use crate::bench_gateway::release_build;
use fleet::Fleet;
use measure::{Baseline, Measurement};
use report::Report;

const USAGE: &str = "cargo xtask bench churn [--restarts 100] [--threads 2000] [--connections 10000] \
                     [--burst-seconds 5] [--settle 75 (seconds at most per phase)]";

/// Restarts, threads, connections; the burst's length and the longest a phase's aftermath may
/// take to settle.
pub(crate) struct Options {
    pub(crate) restarts: usize,
    pub(crate) threads: usize,
    pub(crate) connections: usize,
    pub(crate) burst_and_settle: (Duration, Duration),
}

impl Options {
    fn parse(args: &[String]) -> Result<Options> {
        let mut o = Options {
            restarts: 100,
            threads: 2000,
            connections: 10_000,
            burst_and_settle: (Duration::from_secs(5), Duration::from_secs(75)),
        };
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            let mut count = || -> Result<usize> {
                args.next()
                    .with_context(|| format!("{flag} needs a value; {USAGE}"))?
                    .parse()
                    .with_context(|| format!("{flag} takes a whole number; {USAGE}"))
            };
            match flag.as_str() {
                "--restarts" => o.restarts = count()?,
                "--threads" => o.threads = count()?,
                "--connections" => o.connections = count()?,
                "--burst-seconds" => o.burst_and_settle.0 = Duration::from_secs(count()? as u64),
                "--settle" => o.burst_and_settle.1 = Duration::from_secs(count()? as u64),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown option {other}; {USAGE}"),
            }
        }
        if o.burst_and_settle.1 < Duration::from_secs(15) {
            bail!("--settle must be at least 15 s (the daemon counts SOCKS every 10 s)");
        }
        if o.connections > 30_000 || o.threads > 10_000 {
            bail!("--connections is at most 30000 and --threads at most 10000 (the kernel maps' room)");
        }
        Ok(o)
    }
}

/// The release binaries the phases start.
pub(crate) struct Binaries {
    pub(crate) observer: PathBuf,
    pub(crate) gateway: PathBuf,
    pub(crate) napping_threads: PathBuf,
}

pub fn run(args: &[String]) -> Result<()> {
    let opts = Options::parse(args)?;
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
        phases(&opts, &bins, &dir)
    };
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    report.print(date.trim(), &opts);
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
    let burst = fleet.short_connection_burst(opts.burst_and_settle.0)?;
    settle(&mut fleet, &mut report, "4 short-connection burst", burst, opts)?;
    report.total = started.elapsed();
    Ok(report)
}

/// Polls the aftermath of a phase once a second until every goal holds (then once more, to see
/// it stays so) or `opts.settle` passes; the last measurement goes into the report.
fn settle(fleet: &mut Fleet, report: &mut Report, phase: &str, note: String, opts: &Options) -> Result<()> {
    let settle = opts.burst_and_settle.1;
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
