//! Closed-loop saturation pairs: wrk drives a gateway as hard as it goes, once without and once
//! with the observer attached, the order swapped every pair. The on phase also yields the CPU
//! per proxied request of the kernel programs and of the daemon.

use std::path::Path;

use anyhow::{Context as _, Result};

use super::Options;
use super::daemon::{Cost, Daemon};
use super::report::{Goal, Report, Unit, ratios};
use crate::bench_gateway::Procs;
use crate::wrk::{self, WrkResult, WrkSpec};

const WARMUP_S: u64 = 2;
const GOAL_THROUGHPUT_KEPT: f64 = 0.97;
const GOAL_P99_RATIO: f64 = 1.10;
const GOAL_CPU_PER_REQUEST_NS: f64 = 1_000.0;

/// The running gateway under test and where its phases' files go.
pub(super) struct Target<'a> {
    pub(super) name: &'static str,
    pub(super) pid: u32,
    pub(super) port: u16,
    pub(super) dir: &'a Path,
}

pub(super) struct Phase {
    wrk: WrkResult,
    /// With the observer attached: (kernel programs ns, daemon ns) of CPU per request, peak RSS.
    observer: Option<(f64, f64, f64)>,
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
    wrk::run(WrkSpec { seconds: WARMUP_S, ..opts.wrk() }, target.port).context("warm-up wrk failed")?;
    println!("\n{} (pid {}, 127.0.0.1:{})", target.name, target.pid, target.port);
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
                Phase { wrk: wrk::run(opts.wrk(), target.port)?, observer: None, programs: None }
            };
            print_phase(pair + 1, &phase);
            *(if attached { &mut on } else { &mut off }) = Some(phase);
        }
        out.extend(off.zip(on));
    }
    Ok(out)
}

fn phase_on(spec: WrkSpec, target: &Target, observer: &Path, pair: usize) -> Result<Phase> {
    let mut daemon = Daemon::start(observer, target.pid, target.dir, &format!("{}-{pair}", target.name))?;
    let before = daemon.snapshot()?;
    let wrk = wrk::run(spec, target.port)?;
    let after = daemon.snapshot()?;
    let cost = Cost::between(&before, &after);
    let per_request = |seconds: f64| seconds * 1e9 / wrk.requests;
    let observer = (per_request(cost.kernel_cpu_s), per_request(cost.daemon_cpu_s), daemon.peak_rss_mib()?);
    // Where the kernel programs' time goes: per request, and per run of each program.
    let top: Vec<String> = cost
        .programs
        .iter()
        .take(5)
        .map(|(name, ns, runs)| {
            format!(
                "{name} {:.0} ns/req ({:.0}/req × {:.0} ns)",
                *ns as f64 / wrk.requests,
                *runs as f64 / wrk.requests,
                *ns as f64 / *runs as f64
            )
        })
        .collect();
    Ok(Phase { wrk, observer: Some(observer), programs: Some(top.join(", ")) })
}

fn print_phase(pair: usize, p: &Phase) {
    let cost = p.observer.map_or(String::new(), |(kernel, daemon, rss)| {
        format!("  CPU/request: kernel programs {kernel:.0} ns, daemon {daemon:.0} ns; daemon peak RSS {rss:.1} MiB")
    });
    println!(
        "pair {pair:2} {:3} {:>9.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms{cost}{}",
        if p.observer.is_some() { "on" } else { "off" },
        p.wrk.rps,
        p.wrk.p50_ms,
        p.wrk.p99_ms,
        p.wrk.errors
    );
    if let Some(programs) = &p.programs {
        println!("        kernel programs: {programs}");
    }
}

pub(super) fn add_rows(report: &mut Report, gateway: &str, pairs: &[(Phase, Phase)]) {
    let kept = Goal::at_least(format!(">= {GOAL_THROUGHPUT_KEPT:.2}"), GOAL_THROUGHPUT_KEPT);
    report.ratio(format!("{gateway} max req/s on/off"), ratios(pairs, |p| p.wrk.rps), Some(kept));
    let p99 = Goal::at_most(format!("<= {GOAL_P99_RATIO:.2}"), GOAL_P99_RATIO);
    report.ratio(format!("{gateway} p99 on/off"), ratios(pairs, |p| p.wrk.p99_ms), Some(p99));
    report.ratio(format!("{gateway} p50 on/off"), ratios(pairs, |p| p.wrk.p50_ms), None);
    let on = |f: fn((f64, f64, f64)) -> f64| pairs.iter().filter_map(|(_, on)| on.observer.map(f)).collect::<Vec<_>>();
    let goal = Goal::at_most("<= 1 µs", GOAL_CPU_PER_REQUEST_NS);
    report.cost(format!("{gateway} CPU/request: kernel + daemon"), on(|(k, d, _)| k + d), Unit::Ns, Some(goal));
    report.cost(format!("{gateway} CPU/request: kernel programs"), on(|(k, _, _)| k), Unit::Ns, None);
    report.cost(format!("{gateway} CPU/request: daemon"), on(|(_, d, _)| d), Unit::Ns, None);
    report.rss(on(|(_, _, rss)| rss));
    let off = |f: fn(&WrkResult) -> f64| pairs.iter().map(|(off, _)| f(&off.wrk)).collect::<Vec<_>>();
    report.figure(format!("{gateway} off: req/s"), off(|w| w.rps), Unit::Rps);
    report.figure(format!("{gateway} off: p50"), off(|w| w.p50_ms), Unit::Ms);
    report.figure(format!("{gateway} off: p99"), off(|w| w.p99_ms), Unit::Ms);
}
