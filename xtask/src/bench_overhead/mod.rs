//! `cargo xtask bench overhead`: what a user pays for the observer, side by side in one run.
//!
//! - Saturation: reference-gateway and nginx (the proxies of `bench gateway`) under wrk's closed
//!   loop, in pairs of phases without and with `gateway-observer run --target pid=<gateway>`,
//!   the order swapped every pair so drift hits both alike. Per pair: throughput, p50 and p99
//!   on/off; in the on phase, CPU per proxied request of the kernel programs (Σ bpf_stats run
//!   time of every program the daemon holds) and of the daemon (utime + stime).
//! - Untargeted syscall cost: ns per getppid(2) in this process, which the observer does not
//!   target, without and with it attached (pairs again).
//! - Targeted sched_switch and sched_wakeup ns/event under a context-switch load, next to an empty
//!   program on the same hooks and next to libbpf-tools' runqlat on the same load.
//! - The daemon's CPU at a fixed request rate (open loop) and following 2,000 napping threads;
//!   its peak RSS over every phase.
//!
//! Then one table (ratios first: median and min–max across pairs) and a verdict per goal.
//! kernel.bpf_stats_enabled=1 throughout (restored after; its timing is then part of the 'on'
//! cost), except for the syscall pairs, which read no program stats.
//! Everything binds 127.0.0.1, lives in a temp dir, and is killed on exit, also on error.

mod daemon;
mod fixed_rate;
mod report;
mod saturation;
mod sched_cost;
mod syscall_cost;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::bench_gateway::{Procs, release_build, start_proxies};
use crate::bench_probes::{with_bpf_stats, without_bpf_stats};
use crate::wrk::WrkSpec;
use report::Report;

const HELP: &str = "cargo xtask bench overhead [--pairs 10] [--duration 10] [--gateway reference|nginx|both] \
                    [--workers 1] [--connections 32] [--wrk-threads 1] [--rate 10000 (0: skip)]";

struct Options {
    pairs: usize,
    duration: Duration,
    gateways: Vec<Gateway>,
    workers: usize,
    wrk: WrkSpec,
    /// Open-loop rate for the daemon-CPU phases; 0 skips them.
    rate: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Gateway {
    Reference,
    Nginx,
}

impl Gateway {
    fn name(self) -> &'static str {
        match self {
            Gateway::Reference => "reference-gateway",
            Gateway::Nginx => "nginx",
        }
    }
}

impl Options {
    fn parse(args: &[String]) -> Result<Self> {
        let mut o = Options {
            pairs: 10,
            duration: Duration::from_secs(10),
            gateways: vec![Gateway::Reference, Gateway::Nginx],
            workers: 1,
            wrk: WrkSpec { threads: 1, connections: 32, seconds: 10 },
            rate: 10_000.0,
        };
        let mut it = args.iter().skip_while(|a| *a == "overhead");
        while let Some(flag) = it.next() {
            let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
            let number = |name: &str, v: &String| v.parse::<f64>().with_context(|| format!("{name} needs a number"));
            let count = |name: &str, v: &String| v.parse::<usize>().with_context(|| format!("{name} needs a count"));
            match flag.as_str() {
                "--pairs" => o.pairs = count("--pairs", value("--pairs")?)?,
                "--duration" => o.wrk.seconds = count("--duration", value("--duration")?)? as u64,
                "--workers" => o.workers = count("--workers", value("--workers")?)?,
                "--connections" => o.wrk.connections = count("--connections", value("--connections")?)?,
                "--wrk-threads" => o.wrk.threads = count("--wrk-threads", value("--wrk-threads")?)?,
                "--rate" => o.rate = number("--rate", value("--rate")?)?,
                "--gateway" => {
                    o.gateways = match value("--gateway")?.as_str() {
                        "reference" => vec![Gateway::Reference],
                        "nginx" => vec![Gateway::Nginx],
                        "both" => vec![Gateway::Reference, Gateway::Nginx],
                        other => bail!("--gateway takes reference, nginx or both, not {other}"),
                    }
                }
                "-h" | "--help" => {
                    println!("{HELP}");
                    std::process::exit(0);
                }
                other => bail!("unknown option {other} (try --help)"),
            }
        }
        o.duration = Duration::from_secs(o.wrk.seconds);
        if o.wrk.seconds < 3 {
            bail!("--duration must be at least 3 s");
        }
        if o.pairs == 0 || o.workers == 0 || o.wrk.threads == 0 || o.wrk.connections < o.wrk.threads {
            bail!("--pairs, --workers and --wrk-threads must be positive, --connections at least --wrk-threads");
        }
        if o.rate < 0.0 {
            bail!("--rate must not be negative");
        }
        Ok(o)
    }
}

/// The release binaries the phases start.
struct Binaries {
    observer: PathBuf,
    gateway: PathBuf,
    switch_load: PathBuf,
    napping_threads: PathBuf,
}

pub fn run(args: &[String]) -> Result<()> {
    let opts = Options::parse(args)?;
    let release = release_build(&["nginx", "wrk", "runqlat"])?;
    let bins = Binaries {
        observer: release.join("gateway-observer"),
        gateway: release.join("reference-gateway"),
        switch_load: release.join("switch-load"),
        napping_threads: release.join("napping-threads"),
    };
    let dir = std::env::temp_dir().join(format!("overhead-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let result = with_bpf_stats(|| bench(&opts, &bins, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn bench(opts: &Options, bins: &Binaries, dir: &Path) -> Result<()> {
    let date = crate::util::output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let mut report = Report::default();
    let mut procs = Procs::default();
    let proxies = start_proxies(dir, &bins.gateway, opts.workers, &mut procs)?;
    println!(
        "closed loop: wrk -t{} -c{} -d{}s --latency, {} pairs (off/on, order swapped each pair), {} worker(s) per \
         gateway; kernel.bpf_stats_enabled=1 (its timing is part of the 'on' cost) but in the syscall pairs",
        opts.wrk.threads, opts.wrk.connections, opts.wrk.seconds, opts.pairs, opts.workers
    );
    for &gateway in &opts.gateways {
        let (pid, port) = if gateway == Gateway::Reference { proxies.gateway } else { proxies.nginx };
        let target = saturation::Target { name: gateway.name(), pid, port, dir };
        let pairs = saturation::pairs(opts, &target, &bins.observer, &mut procs)?;
        saturation::add_rows(&mut report, gateway.name(), &pairs);
    }
    // Nothing is read from bpf_stats there, and its timing would be part of every syscall's cost.
    let syscall_pairs = without_bpf_stats(|| syscall_cost::pairs(opts.pairs, &bins.observer, dir))?;
    syscall_cost::add_rows(&mut report, &syscall_pairs);
    let sched = sched_cost::measure(&bins.observer, &bins.switch_load, dir)?;
    sched.add_rows(&mut report);
    if opts.rate > 0.0 {
        for &gateway in &opts.gateways {
            let (pid, port) = if gateway == Gateway::Reference { proxies.gateway } else { proxies.nginx };
            let target = saturation::Target { name: gateway.name(), pid, port, dir };
            let phases = fixed_rate::at_rate(opts, &target, &bins.observer, &mut procs)?;
            fixed_rate::add_rate_rows(&mut report, gateway.name(), opts.rate, &phases);
        }
    }
    let naps = fixed_rate::napping_threads(opts.duration, &bins.napping_threads, &bins.observer, dir)?;
    fixed_rate::add_nap_rows(&mut report, &naps);
    report.note_pairs(opts.pairs);
    report.print(date.trim());
    Ok(())
}
