//! Closed-loop saturation pairs: wrk drives a gateway as hard as it goes, once without and once
//! with the observer attached, the order swapped every pair. The on phase also yields the CPU
//! per proxied request of the kernel programs and of the daemon.

use std::path::Path;

use anyhow::{Context as _, Result};

use super::Options;
use super::daemon::{Cost, Daemon};
use super::report::{Goal, Report, Unit, ratios};
use crate::bench_gateway::Procs;
use crate::bench_probes::{with_bpf_stats, without_bpf_stats};
use crate::wrk::{self, WrkResult, WrkSpec};
use crate::{h2load, procstat};

const WARMUP_S: u64 = 2;
/// Seconds of each on phase run again with program timing on, for the kernel programs' cost.
pub(super) const COSTED_S: u64 = 4;
/// Issue 14's share of max throughput a gateway keeps with the observer on (a server nobody
/// targets is held to it too).
pub(super) const GOAL_THROUGHPUT_KEPT: f64 = 0.97;
const GOAL_P99_RATIO: f64 = 1.10;
const GOAL_CPU_PER_REQUEST_NS: f64 = 1_000.0;

/// The running gateway under test and where its phases' files go.
pub(super) struct Target<'a> {
    pub(super) name: &'static str,
    /// The server measured: its CPU per request is its process family's.
    pub(super) pid: u32,
    pub(super) port: u16,
    /// What the daemon targets in the on phases: the server itself, or (to measure what a
    /// process the observer does not target pays) another one.
    pub(super) observed: u32,
    /// Served over HTTPS.
    pub(super) tls: bool,
    /// Served over h2c and driven by h2load, this many streams at a time per connection.
    pub(super) h2c_streams: Option<u32>,
    /// More options of `gateway-observer run` in the on phases.
    pub(super) observer_args: &'static [&'static str],
    pub(super) dir: &'a Path,
}

impl Target<'_> {
    fn url(&self) -> String {
        format!("{}://127.0.0.1:{}/", if self.tls { "https" } else { "http" }, self.port)
    }

    /// wrk's closed loop against the gateway, and the gateway's own CPU (its workers', where
    /// the kernel programs and uprobe traps run in its context) per response.
    fn load(&self, spec: WrkSpec) -> Result<(WrkResult, f64)> {
        let before = procstat::family_cpu_seconds(self.pid)?;
        let wrk = self.closed_loop(spec)?;
        let cpu_s = procstat::family_cpu_seconds(self.pid)? - before;
        let per_request_ns = cpu_s * 1e9 / wrk.requests;
        Ok((wrk, per_request_ns))
    }
}

impl Target<'_> {
    /// wrk, or for h2c h2load with the same requests in flight (connections × streams).
    fn closed_loop(&self, spec: WrkSpec) -> Result<WrkResult> {
        match self.h2c_streams {
            None => wrk::run_url(spec, &self.url()),
            Some(streams) => {
                let connections = (spec.connections / streams as usize).max(spec.threads);
                let log = self.dir.join(format!("{}-h2load.log", self.name));
                h2load::run_url(WrkSpec { connections, ..spec }, &self.url(), streams, &log)
            }
        }
    }
}

pub(super) struct Phase {
    pub(super) wrk: WrkResult,
    /// The gateway's own CPU per response, ns.
    pub(super) gateway_ns: f64,
    /// With the observer attached: kernel programs ns and daemon ns of CPU per request, the
    /// daemon's peak RSS, and req/s during the costed run (program timing on).
    pub(super) observer: Option<(f64, f64, f64, f64)>,
    /// With the observer attached: the costliest kernel programs, for the line under the phase's.
    programs: Option<String>,
}

/// Warms the gateway up, then runs `opts.pairs` (off, on) pairs.
pub(super) fn pairs(
    opts: &Options,
    target: &Target,
    observer: &Path,
    procs: &mut Procs,
) -> Result<Vec<(Phase, Phase)>> {
    target.closed_loop(WrkSpec { seconds: WARMUP_S, ..opts.wrk() }).context("warm-up load failed")?;
    println!("\n{} (pid {}, {})", target.name, target.pid, target.url());
    let mut out = Vec::new();
    for pair in 0..opts.pairs {
        // Swap the order every pair so neither phase always runs on a warmer machine.
        let order = if pair % 2 == 0 { [false, true] } else { [true, false] };
        let (mut off, mut on) = (None, None);
        for attached in order {
            procs.check_alive()?;
            let phase = if attached {
                phase_on(opts.wrk(), target, observer, pair)?
            } else {
                let (wrk, gateway_ns) = target.load(opts.wrk())?;
                Phase { wrk, gateway_ns, observer: None, programs: None }
            };
            print_phase(pair + 1, &phase);
            *(if attached { &mut on } else { &mut off }) = Some(phase);
        }
        out.extend(off.zip(on));
    }
    Ok(out)
}

fn phase_on(spec: WrkSpec, target: &Target, observer: &Path, pair: usize) -> Result<Phase> {
    let label = format!("{}-{pair}", target.name);
    let mut daemon = Daemon::start_with(observer, target.observed, target.dir, &label, target.observer_args)?;
    // What the gateway keeps is measured with the kernel's program timing off, as a user runs:
    // timing costs two clock reads per program run, which alone took ~4 % of nginx's throughput.
    let before = daemon.snapshot()?;
    let (wrk, gateway_ns) = without_bpf_stats(|| target.load(spec))?;
    let after = daemon.snapshot()?;
    let daemon_ns = Cost::between(&before, &after).daemon_cpu_s * 1e9 / wrk.requests;
    // Then a short costed run, timed, for the kernel programs' share of each request.
    let costed_spec = WrkSpec { seconds: COSTED_S.min(spec.seconds), ..spec };
    let (costed, cost) = with_bpf_stats(|| {
        let before = daemon.snapshot()?;
        let costed = target.closed_loop(costed_spec)?;
        let after = daemon.snapshot()?;
        Ok((costed, Cost::between(&before, &after)))
    })?;
    let kernel_ns = cost.kernel_cpu_s * 1e9 / costed.requests;
    let observer = (kernel_ns, daemon_ns, daemon.peak_rss_mib()?, costed.rps);
    // Where the kernel programs' time goes: per request, and per run of each program.
    let top: Vec<String> = cost
        .programs
        .iter()
        .take(5)
        .map(|(name, ns, runs)| {
            format!(
                "{name} {:.0} ns/req ({:.0}/req × {:.0} ns)",
                *ns as f64 / costed.requests,
                *runs as f64 / costed.requests,
                *ns as f64 / *runs as f64
            )
        })
        .collect();
    Ok(Phase { wrk, gateway_ns, observer: Some(observer), programs: Some(top.join(", ")) })
}

fn print_phase(pair: usize, p: &Phase) {
    let cost = p.observer.map_or(String::new(), |(kernel, daemon, rss, timed)| {
        format!(
            "  CPU/request: kernel programs {kernel:.0} ns (timed run: {timed:.0} req/s), daemon {daemon:.0} ns; \
             daemon peak RSS {rss:.1} MiB"
        )
    });
    println!(
        "pair {pair:2} {:3} {:>9.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  gateway CPU/request {:.0} ns{cost}{}",
        if p.observer.is_some() { "on" } else { "off" },
        p.wrk.rps,
        p.wrk.p50_ms,
        p.wrk.p99_ms,
        p.gateway_ns,
        p.wrk.errors
    );
    if let Some(programs) = &p.programs {
        println!("        kernel programs: {programs}");
    }
}

/// The two rows of `name`'s pairs the goals judge: max req/s on/off (at least `throughput_kept`)
/// and p99 on/off.
pub(super) fn add_judged_ratios(report: &mut Report, name: &str, throughput_kept: f64, pairs: &[(Phase, Phase)]) {
    let kept = Goal::at_least(format!(">= {throughput_kept:.2}"), throughput_kept);
    report.ratio(format!("{name} max req/s on/off"), ratios(pairs, |p| p.wrk.rps), Some(kept));
    let p99 = Goal::at_most(format!("<= {GOAL_P99_RATIO:.2}"), GOAL_P99_RATIO);
    report.ratio(format!("{name} p99 on/off"), ratios(pairs, |p| p.wrk.p99_ms), Some(p99));
}

/// The rows of one gateway's pairs; `throughput_kept` is its goal for max req/s on/off.
pub(super) fn add_rows(report: &mut Report, gateway: &str, throughput_kept: f64, pairs: &[(Phase, Phase)]) {
    add_judged_ratios(report, gateway, throughput_kept, pairs);
    report.ratio(format!("{gateway} p50 on/off"), ratios(pairs, |p| p.wrk.p50_ms), None);
    report.ratio(format!("{gateway} gateway CPU/request on/off"), ratios(pairs, |p| p.gateway_ns), None);
    let timed = |(off, on): &(Phase, Phase)| on.observer.map(|(_, _, _, timed)| timed / off.wrk.rps);
    report.ratio(
        format!("{gateway} max req/s on/off, program timing on"),
        pairs.iter().filter_map(timed).collect(),
        None,
    );
    type Observer = (f64, f64, f64, f64);
    let on = |f: fn(Observer) -> f64| pairs.iter().filter_map(|(_, on)| on.observer.map(f)).collect::<Vec<_>>();
    let goal = Goal::at_most("<= 1 µs", GOAL_CPU_PER_REQUEST_NS);
    report.cost(format!("{gateway} CPU/request: kernel + daemon"), on(|(k, d, _, _)| k + d), Unit::Ns, Some(goal));
    report.cost(format!("{gateway} CPU/request: kernel programs"), on(|(k, _, _, _)| k), Unit::Ns, None);
    report.cost(format!("{gateway} CPU/request: daemon"), on(|(_, d, _, _)| d), Unit::Ns, None);
    // What the gateway itself spends more per request: the kernel programs run in its context,
    // and for TLS the uprobes' traps, which bpf_stats does not see.
    let extra = pairs.iter().map(|(off, on)| on.gateway_ns - off.gateway_ns).collect();
    report.cost(format!("{gateway} CPU/request: added in the gateway"), extra, Unit::Ns, None);
    report.rss(on(|(_, _, rss, _)| rss));
    let off = |f: fn(&WrkResult) -> f64| pairs.iter().map(|(off, _)| f(&off.wrk)).collect::<Vec<_>>();
    report.figure(format!("{gateway} off: req/s"), off(|w| w.rps), Unit::Rps);
    report.figure(format!("{gateway} off: p50"), off(|w| w.p50_ms), Unit::Ms);
    report.figure(format!("{gateway} off: p99"), off(|w| w.p99_ms), Unit::Ms);
    report.figure(
        format!("{gateway} off: gateway CPU/request"),
        pairs.iter().map(|(off, _)| off.gateway_ns).collect(),
        Unit::Ns,
    );
}
