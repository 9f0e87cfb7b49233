//! `cargo xtask bench overhead`: what a user pays for the observer, side by side in one run.
//!
//! - Saturation: reference-gateway and nginx (the proxies of `bench gateway`), and nginx
//!   terminating TLS in front of the same upstream, under wrk's closed loop, in pairs of phases
//!   without and with `gateway-observer run --target pid=<gateway>`, the order swapped every pair
//!   so drift hits both alike. Per pair: throughput, p50 and p99 on/off and the gateway's own CPU
//!   per request, with the kernel's program timing off as a user runs; in the on phase, CPU per
//!   proxied request of the daemon (utime + stime), then a short run with program timing on for
//!   the kernel programs' (Σ bpf_stats run time of every program the daemon holds).
//! - Untargeted server: the bench's upstream nginx driven straight by wrk, without and with the
//!   observer attached to an idle process (pairs again): what a web server sharing the host pays.
//! - Untargeted syscall cost: ns per getppid(2) in this process, which the observer does not
//!   target, without and with it attached (pairs again).
//! - Targeted sched_switch and sched_wakeup ns/event under a context-switch load, next to an empty
//!   program on the same hooks and next to libbpf-tools' runqlat on the same load.
//! - The daemon's CPU at a fixed request rate (open loop) and following 2,000 napping threads;
//!   its peak RSS over every phase.
//!
//! Then one table (ratios first: median and min–max across pairs) and a verdict per goal.
//! kernel.bpf_stats_enabled=1 (restored after) only where program costs are read: the costed runs,
//! the scheduler hooks and the fixed-rate phases. Saturation and syscall pairs run without it,
//! since its timing (two clock reads per program run) is no cost a user pays.
//! Everything binds 127.0.0.1, lives in a temp dir, and is killed on exit, also on error.

mod daemon;
mod fixed_rate;
mod h2c_proxy;
mod report;
mod saturation;
mod sched_cost;
mod syscall_cost;
mod tls_proxy;
mod untargeted_server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::args;
use crate::bench_gateway::{Procs, Proxies, release_build, start_proxies};
use crate::bench_probes::{with_bpf_stats, without_bpf_stats};
use crate::wrk::WrkSpec;
use report::Report;

/// What a user pays for the observer: one table, ratios first, a verdict per goal (as root)
///
/// Throughput and latency at saturation without and with the observer, CPU per proxied request,
/// the untargeted syscall cost, the scheduler hooks' cost, the daemon's CPU at a fixed rate and
/// its peak RSS.
#[derive(clap::Args, Debug)]
#[command(arg = args::own_name_again("overhead"))]
pub struct Options {
    /// Off/on pairs of phases per gateway (the order swapped each pair), and of syscall phases.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = args::number_in(1_usize..))]
    pairs: usize,
    /// Seconds per phase (at least 3).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = args::number_in(3_u64..))]
    duration: u64,
    /// The gateways measured (`both`: reference and plain nginx; `all` adds nginx terminating TLS,
    /// observed as by default and with `--tls-plaintext`).
    #[arg(long, value_enum, default_value_t = Gateways::All)]
    gateway: Gateways,
    /// Workers of each gateway.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = args::number_in(1_usize..))]
    workers: usize,
    /// wrk's connections (at least --wrk-threads).
    #[arg(long, value_name = "N", default_value_t = 32)]
    connections: usize,
    /// wrk's threads.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = args::number_in(1_usize..))]
    wrk_threads: usize,
    /// Requests/s of the open-loop phases that measure the daemon's CPU; 0 skips them.
    #[arg(long, value_name = "R", default_value_t = 10_000.0, value_parser = args::number_in(0.0..))]
    rate: f64,
}

impl Options {
    /// The closed-loop wrk run of each phase.
    fn wrk(&self) -> WrkSpec {
        WrkSpec { threads: self.wrk_threads, connections: self.connections, seconds: self.duration }
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(self.duration)
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Gateways {
    Reference,
    Nginx,
    NginxTls,
    NginxTlsPlaintext,
    NginxH2c,
    Both,
    All,
}

impl Gateways {
    fn each(self) -> &'static [Gateway] {
        match self {
            Gateways::Reference => &[Gateway::Reference],
            Gateways::Nginx => &[Gateway::Nginx],
            Gateways::NginxTls => &[Gateway::NginxTls],
            Gateways::NginxTlsPlaintext => &[Gateway::NginxTlsPlaintext],
            Gateways::NginxH2c => &[Gateway::NginxH2c],
            Gateways::Both => &[Gateway::Reference, Gateway::Nginx],
            Gateways::All => &ALL,
        }
    }
}

const ALL: [Gateway; 5] =
    [Gateway::Reference, Gateway::Nginx, Gateway::NginxTls, Gateway::NginxTlsPlaintext, Gateway::NginxH2c];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Gateway {
    Reference,
    Nginx,
    /// nginx terminating TLS with Debian's OpenSSL, the observer as it runs by default: TLS
    /// connections counted, not decrypted.
    NginxTls,
    /// The same nginx, the observer with `--tls-plaintext`: the TLS uprobes' cost.
    NginxTlsPlaintext,
    /// nginx speaking h2c to its clients (h2load, 8 streams per connection): the cost of
    /// following HTTP/2.
    NginxH2c,
}

impl Gateway {
    fn name(self) -> &'static str {
        match self {
            Gateway::Reference => "reference-gateway",
            Gateway::Nginx => "nginx",
            Gateway::NginxTls => "nginx-tls",
            Gateway::NginxTlsPlaintext => "nginx-tls-plaintext",
            Gateway::NginxH2c => "nginx-h2c",
        }
    }

    /// Driven by wrk over plain HTTP/1.1 (the open-loop load generator speaks nothing else).
    fn speaks_plain_http1(self) -> bool {
        matches!(self, Gateway::Reference | Gateway::Nginx)
    }

    fn is_tls(self) -> bool {
        matches!(self, Gateway::NginxTls | Gateway::NginxTlsPlaintext)
    }

    /// The goal for max req/s with the observer over without: issue 14's for plain HTTP, issue
    /// 18's for TLS read through uprobes (each TLS call traps into the kernel twice).
    fn throughput_kept(self) -> f64 {
        if self == Gateway::NginxTlsPlaintext { 0.95 } else { saturation::GOAL_THROUGHPUT_KEPT }
    }
}

/// The gateways' processes under test.
struct Running {
    proxies: Proxies,
    /// Started only when measured: (pid, port).
    nginx_tls: Option<(u32, u16)>,
    nginx_h2c: Option<(u32, u16)>,
}

impl Running {
    fn target<'a>(&self, gateway: Gateway, dir: &'a Path) -> saturation::Target<'a> {
        let (pid, port) = match gateway {
            Gateway::Reference => self.proxies.gateway,
            Gateway::Nginx => self.proxies.nginx,
            Gateway::NginxTls | Gateway::NginxTlsPlaintext => {
                self.nginx_tls.expect("the TLS proxy is started when measured")
            }
            Gateway::NginxH2c => self.nginx_h2c.expect("the h2c proxy is started when measured"),
        };
        let observer_args: &'static [&'static str] =
            if gateway == Gateway::NginxTlsPlaintext { &["--tls-plaintext"] } else { &[] };
        let h2c_streams = (gateway == Gateway::NginxH2c).then_some(h2c_proxy::STREAMS);
        let tls = gateway.is_tls();
        saturation::Target { name: gateway.name(), pid, port, observed: pid, tls, h2c_streams, observer_args, dir }
    }
}

/// The release binaries the phases start.
struct Binaries {
    observer: PathBuf,
    gateway: PathBuf,
    switch_load: PathBuf,
    napping_threads: PathBuf,
}

pub fn run(opts: &Options) -> Result<()> {
    if opts.connections < opts.wrk_threads {
        bail!("--connections must be at least --wrk-threads");
    }
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
    let result = with_bpf_stats(|| bench(opts, &bins, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn bench(opts: &Options, bins: &Binaries, dir: &Path) -> Result<()> {
    let date = crate::util::output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let mut report = Report::default();
    let mut procs = Procs::default();
    let proxies = start_proxies(dir, &bins.gateway, opts.workers, &mut procs)?;
    let nginx_tls = if opts.gateway.each().iter().any(|g| g.is_tls()) {
        Some(tls_proxy::start(dir, proxies.upstream_port, opts.workers, &mut procs)?)
    } else {
        None
    };
    let nginx_h2c = if opts.gateway.each().contains(&Gateway::NginxH2c) {
        Some(h2c_proxy::start(dir, proxies.upstream_port, opts.workers, &mut procs)?)
    } else {
        None
    };
    let running = Running { proxies, nginx_tls, nginx_h2c };
    println!(
        "closed loop: wrk -t{} -c{} -d{}s --latency (h2c: h2load, the same requests in flight as streams), {} pairs (off/on, order swapped each pair), {} worker(s) per \
         gateway; pairs with kernel.bpf_stats_enabled=0, each on phase then a {}-second run with it on for the \
         kernel programs' cost",
        opts.wrk_threads,
        opts.connections,
        opts.duration,
        opts.pairs,
        opts.workers,
        saturation::COSTED_S
    );
    for &gateway in opts.gateway.each() {
        let target = running.target(gateway, dir);
        let pairs = saturation::pairs(opts, &target, &bins.observer, &mut procs)?;
        saturation::add_rows(&mut report, gateway.name(), gateway.throughput_kept(), &pairs);
    }
    let server = untargeted_server::pairs(opts, &running.proxies, &bins.observer, dir, &mut procs)?;
    untargeted_server::add_rows(&mut report, &server);
    // Nothing is read from bpf_stats there, and its timing would be part of every syscall's cost.
    let syscall_pairs = without_bpf_stats(|| syscall_cost::pairs(opts.pairs, &bins.observer, dir))?;
    syscall_cost::add_rows(&mut report, &syscall_pairs);
    let sched = sched_cost::measure(&bins.observer, &bins.switch_load, dir)?;
    sched.add_rows(&mut report);
    if opts.rate > 0.0 {
        // The open-loop load generator speaks plain HTTP/1.1 only.
        for &gateway in opts.gateway.each().iter().filter(|g| g.speaks_plain_http1()) {
            let target = running.target(gateway, dir);
            let phases = fixed_rate::at_rate(opts, &target, &bins.observer, &mut procs)?;
            fixed_rate::add_rate_rows(&mut report, gateway.name(), opts.rate, &phases);
        }
    }
    let naps = fixed_rate::napping_threads(opts.duration(), &bins.napping_threads, &bins.observer, dir)?;
    fixed_rate::add_nap_rows(&mut report, &naps);
    report.note_pairs(opts.pairs);
    report.print(date.trim());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bench, tests::bench};

    /// `bench overhead ARGS`: pairs, seconds, workers, connections, wrk threads; the gateways;
    /// the rate.
    fn figures(args: &[&str]) -> ([usize; 5], &'static [Gateway], f64) {
        let Bench::Overhead(o) = bench(&[&["overhead"], args].concat()) else { panic!("not bench overhead") };
        let wrk = o.wrk();
        assert_eq!(o.duration(), Duration::from_secs(wrk.seconds));
        ([o.pairs, wrk.seconds as usize, o.workers, wrk.connections, wrk.threads], o.gateway.each(), o.rate)
    }

    #[test]
    fn defaults_are_the_readmes() {
        // README.md, "Performance": `--pairs 10`, `--duration 10`, `--gateway reference|nginx|both`
        // (all), `--workers 1`, `--connections 32`, `--wrk-threads 1`, `--rate 10000`.
        assert_eq!(figures(&[]), ([10, 10, 1, 32, 1], &ALL[..], 10_000.0));
    }

    #[test]
    fn the_documented_short_runs_parse() {
        // ARCHITECTURE.md and README.md.
        let nginx = &[Gateway::Nginx][..];
        assert_eq!(
            figures(&["--pairs", "2", "--duration", "8", "--gateway", "nginx"]),
            ([2, 8, 1, 32, 1], nginx, 10_000.0)
        );
        let short = ["--pairs", "1", "--duration", "5", "--gateway", "nginx", "--rate", "0"];
        assert_eq!(figures(&short), ([1, 5, 1, 32, 1], nginx, 0.0));
        assert_eq!(figures(&["--gateway", "reference"]).1, [Gateway::Reference]);
        assert_eq!(figures(&["--gateway", "nginx-tls"]).1, [Gateway::NginxTls]);
        assert_eq!(figures(&["--gateway", "nginx-h2c"]).1, [Gateway::NginxH2c]);
        assert_eq!(figures(&["--gateway", "both"]).1, [Gateway::Reference, Gateway::Nginx]);
    }

    #[test]
    fn the_name_again_and_repeated_options_still_parse() {
        assert_eq!(figures(&["overhead", "--pairs", "2", "--pairs", "3"]).0, [3, 10, 1, 32, 1]);
    }
}
