//! `cargo xtask bench overhead`: what attaching the observer costs a gateway under load.
//! reference-gateway and nginx (the proxies of `bench gateway`) each take a fixed-rate open-loop
//! load (`loadgen`) in phases without and with `gateway-observer run --target pid=<gateway>`,
//! alternated and with the order swapped every round so drift hits both alike. Prints
//! throughput and p50/p99 ratios, the daemon's CPU share and RSS, the kernel's ns per event of
//! each program the daemon reports (kernel.bpf_stats_enabled=1 for the run, restored after), and
//! a verdict per goal: throughput loss <= 3 %, p99 added <= 5 %, daemon < 5 % of a core at 10k req/s.
//!
//! Everything binds 127.0.0.1, lives in a temp dir, and is killed on exit (`Procs`' Drop).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::bench_gateway::{Procs, free_port, median, start_proxies, which};
use crate::bench_probes::{Stats, parse_program_stats, scrape, with_bpf_stats};
use crate::demo::net::wait_http_200;
use crate::loadgen::{self, LoadResult, LoadSpec};
use crate::util::{cargo, target_dir};

/// The daemon's collection interval, passed explicitly: program stats advance once per interval,
/// so events/s is runs over collections x interval.
const INTERVAL: Duration = Duration::from_secs(1);
const WORKERS: usize = 2;
const READY_WITHIN: Duration = Duration::from_secs(30);
const WARMUP: Duration = Duration::from_secs(2);
const GOAL_THROUGHPUT_LOSS: f64 = 0.03;
const GOAL_P99_ADDED: f64 = 0.05;
const GOAL_DAEMON_CPU: f64 = 0.05;
const GOAL_RATE: f64 = 10_000.0;

const HELP: &str = "cargo xtask bench overhead [--rounds 3] [--duration 10] [--rate 10000] [--connections 64] [--gateway reference|nginx|both]";

struct Options {
    rounds: usize,
    duration: Duration,
    rate: f64,
    connections: usize,
    gateways: Vec<Gateway>,
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
            rounds: 3,
            duration: Duration::from_secs(10),
            rate: GOAL_RATE,
            connections: 64,
            gateways: vec![Gateway::Reference, Gateway::Nginx],
        };
        let mut it = args.iter().skip_while(|a| *a == "overhead");
        while let Some(flag) = it.next() {
            let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
            let number = |name: &str, v: &String| v.parse::<f64>().with_context(|| format!("{name} needs a number"));
            match flag.as_str() {
                "--rounds" => o.rounds = number("--rounds", value("--rounds")?)? as usize,
                "--duration" => o.duration = Duration::from_secs_f64(number("--duration", value("--duration")?)?),
                "--rate" => o.rate = number("--rate", value("--rate")?)?,
                "--connections" => o.connections = number("--connections", value("--connections")?)? as usize,
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
        // Program stats are taken one interval into the load and at its end.
        if o.duration < INTERVAL * 3 {
            bail!("--duration must be at least {} s", (INTERVAL * 3).as_secs());
        }
        if o.rounds == 0 || o.rate <= 0.0 || o.connections == 0 || o.connections > 1024 {
            bail!("--rounds and --rate must be positive, --connections within 1..=1024");
        }
        Ok(o)
    }
}

/// One phase's figures: the load's, CPU shares of one core, and the observer's cost when attached.
struct Phase {
    load: LoadResult,
    gateway_cpu: f64,
    loadgen_cpu: f64,
    observer: Option<ObserverCost>,
}

struct ObserverCost {
    cpu: f64,
    rss_mib: f64,
    /// program → (ns per event, events per second) over whole collections inside the load.
    programs: Vec<(String, f64, f64)>,
}

/// The running gateway under test and where its phases' files go.
struct Target<'a> {
    gateway: Gateway,
    pid: u32,
    port: u16,
    dir: &'a Path,
}

pub fn run(args: &[String]) -> Result<()> {
    let opts = Options::parse(args)?;
    which("nginx").context("nginx not found on PATH (apt-get install -y nginx)")?;
    cargo(&["build", "--release", "-p", "gateway-observer", "-p", "reference-gateway", "--bins"])?;
    let dir = std::env::temp_dir().join(format!("overhead-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let result = with_bpf_stats(|| bench(&opts, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn bench(opts: &Options, dir: &Path) -> Result<()> {
    let release = target_dir().join("release");
    let mut procs = Procs::default();
    let proxies = start_proxies(dir, &release.join("reference-gateway"), WORKERS, &mut procs)?;
    println!(
        "open loop at {} req/s over {} keep-alive connections, {} s per phase, {} rounds, {WORKERS} workers per gateway; \
         kernel.bpf_stats_enabled=1 throughout (its accounting is part of the 'on' cost)",
        opts.rate,
        opts.connections,
        opts.duration.as_secs_f64(),
        opts.rounds
    );
    for &gateway in &opts.gateways {
        let (pid, port) = if gateway == Gateway::Reference { proxies.gateway } else { proxies.nginx };
        let target = Target { gateway, pid, port, dir };
        let phases = rounds(opts, &target, &release.join("gateway-observer"), &mut procs)?;
        summarize(opts, gateway, &phases);
    }
    Ok(())
}

/// Warms the gateway up, then runs every round's off and on phases; returns (off, on) per round.
fn rounds(opts: &Options, target: &Target, observer: &Path, procs: &mut Procs) -> Result<Vec<(Phase, Phase)>> {
    let spec = LoadSpec { port: target.port, rate: opts.rate, connections: opts.connections, duration: opts.duration };
    loadgen::start(LoadSpec { duration: WARMUP, ..spec })?.finish()?; // fills the upstream pools
    println!("\n{} (pid {}, 127.0.0.1:{})", target.gateway.name(), target.pid, target.port);
    println!(
        "{:5} {:8} {:>9} {:>8} {:>8} {:>12} {:>11} {:>11} {:>11} {:>10}",
        "round",
        "observer",
        "req/s",
        "p50 ms",
        "p99 ms",
        "err/unsent",
        "gateway CPU",
        "loadgen CPU",
        "daemon CPU",
        "daemon RSS"
    );
    let mut out = Vec::new();
    for round in 0..opts.rounds {
        // Swap the order every round so neither phase always runs on a warmer machine.
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        let (mut off, mut on) = (None, None);
        for attached in order {
            procs.check_alive()?;
            let phase =
                if attached { phase_on(spec, target, observer, round)? } else { measure(spec, target.pid, None)? };
            print_row(&(round + 1).to_string(), if attached { "on" } else { "off" }, &phase);
            *(if attached { &mut on } else { &mut off }) = Some(phase);
        }
        out.extend(off.zip(on));
    }
    Ok(out)
}

/// Starts the daemon on the gateway, waits for /ready, measures one phase, then stops it.
fn phase_on(spec: LoadSpec, target: &Target, observer: &Path, round: usize) -> Result<Phase> {
    let port = free_port()?;
    let log_path = target.dir.join(format!("observer-{}-{round}.log", target.gateway.name()));
    let log = std::fs::File::create(&log_path).with_context(|| format!("failed to create {}", log_path.display()))?;
    let mut daemon = Procs::default(); // dropped at the end of the phase: SIGTERM, then wait
    let pid = daemon.spawn(
        "gateway-observer",
        Command::new(observer)
            .args(["run", "--target", &format!("pid={}", target.pid), "--listen", &format!("127.0.0.1:{port}")])
            .args(["--interval", &format!("{}ms", INTERVAL.as_millis())])
            .stdout(Stdio::null()) // alert lines
            .stderr(log),
    )?;
    let ready = wait_http_200("gateway-observer", port, "/ready", READY_WITHIN, || daemon.check_alive())
        .and_then(|()| measure(spec, target.pid, Some((pid, port))));
    ready.with_context(|| {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        format!("observer phase on {} failed; daemon log:\n{}", target.gateway.name(), tail(&log, 20))
    })
}

/// One phase of load with the gateway's and the generator's CPU taken around it, and with
/// `observer` = (pid, port) the daemon watched while it runs.
fn measure(spec: LoadSpec, gateway_pid: u32, observer: Option<(u32, u16)>) -> Result<Phase> {
    let me = std::process::id();
    let (gateway0, loadgen0) = (tree_cpu_seconds(gateway_pid)?, cpu_seconds(me)?);
    let start = Instant::now();
    let running = loadgen::start(spec)?;
    let observer = observer.map(|(pid, port)| watch_daemon(pid, port, start + spec.duration)).transpose()?;
    let load = running.finish()?;
    let wall = start.elapsed().as_secs_f64();
    Ok(Phase {
        load,
        gateway_cpu: (tree_cpu_seconds(gateway_pid)? - gateway0) / wall,
        loadgen_cpu: (cpu_seconds(me)? - loadgen0) / wall,
        observer,
    })
}

/// The daemon's CPU share until `end`, its RSS then, and its program stats taken one interval
/// into the load (so the collection they come from is inside it) and at `end`.
fn watch_daemon(pid: u32, port: u16, end: Instant) -> Result<ObserverCost> {
    let (start, cpu0) = (Instant::now(), cpu_seconds(pid)?);
    std::thread::sleep(INTERVAL + Duration::from_millis(100));
    let before = observer_snapshot(port)?;
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let after = observer_snapshot(port)?;
    let cpu = (cpu_seconds(pid)? - cpu0) / start.elapsed().as_secs_f64();
    Ok(ObserverCost { cpu, rss_mib: rss_mib(pid)?, programs: program_costs(&before, &after) })
}

/// (collections completed, program stats), from one scrape so both come from the same collection.
fn observer_snapshot(port: u16) -> Result<(f64, Stats)> {
    let (_, body) = scrape(port, "/metrics").context("failed to scrape the observer's /metrics")?;
    let collections = body
        .lines()
        .find_map(|l| l.strip_prefix("gateway_observer_collections_total "))
        .and_then(|v| v.trim().parse().ok())
        .context("no gateway_observer_collections_total in /metrics")?;
    Ok((collections, parse_program_stats(&body)))
}

/// ns per event and events/s of every program between two snapshots.
fn program_costs((c0, before): &(f64, Stats), (c1, after): &(f64, Stats)) -> Vec<(String, f64, f64)> {
    let seconds = (c1 - c0) * INTERVAL.as_secs_f64();
    after
        .iter()
        .map(|(program, (time, runs))| {
            let (t0, r0) = before.get(program).copied().unwrap_or_default();
            let (dt, dr) = (time - t0, runs - r0);
            let ns = if dr > 0.0 { dt * 1e9 / dr } else { f64::NAN };
            (program.clone(), ns, dr / seconds)
        })
        .collect()
}

/// utime + stime of a process (all its threads), in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let fields = stat_fields(pid)?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let field =
        |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).with_context(|| format!("bad /proc/{pid}/stat"));
    Ok((field(11)? + field(12)?) / ticks) // utime, stime: fields 14 and 15, counted from state (3)
}

/// A process and its children (nginx's workers), which are where a pre-fork server works.
fn tree_cpu_seconds(pid: u32) -> Result<f64> {
    let mut total = cpu_seconds(pid)?;
    for entry in std::fs::read_dir("/proc").context("failed to list /proc")?.flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let is_child = stat_fields(child).ok().and_then(|f| f.get(1)?.parse::<u32>().ok()) == Some(pid);
        if is_child {
            total += cpu_seconds(child).unwrap_or(0.0); // it may have exited since
        }
    }
    Ok(total)
}

/// /proc/PID/stat after the command name (which may hold spaces): field 3 (state) first.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("failed to read /proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').with_context(|| format!("bad /proc/{pid}/stat"))?.1;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

fn rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("failed to read /proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib / 1024.0)
}

fn print_row(round: &str, observer: &str, p: &Phase) {
    let (daemon_cpu, daemon_rss) = match &p.observer {
        Some(o) => (format!("{:.1} %", o.cpu * 100.0), format!("{:.1} MiB", o.rss_mib)),
        None => ("-".to_owned(), "-".to_owned()),
    };
    println!(
        "{round:5} {observer:8} {:>9.0} {:>8.3} {:>8.3} {:>12} {:>9.1} % {:>9.1} % {daemon_cpu:>11} {daemon_rss:>10}",
        p.load.achieved_rps,
        p.load.p50_ms,
        p.load.p99_ms,
        format!("{}/{}", p.load.errors, p.load.unsent),
        p.gateway_cpu * 100.0,
        p.loadgen_cpu * 100.0,
    )
}

fn summarize(opts: &Options, gateway: Gateway, rounds: &[(Phase, Phase)]) {
    let off = median_phase(rounds.iter().map(|(off, _)| off).collect());
    let on = median_phase(rounds.iter().map(|(_, on)| on).collect());
    print_row("med", "off", &off);
    print_row("med", "on", &on);
    let r_rps = on.load.achieved_rps / off.load.achieved_rps;
    let r_p99 = on.load.p99_ms / off.load.p99_ms;
    println!("{:14} {r_rps:>9.3} {:>8.3} {r_p99:>8.3}", "ratio on/off", on.load.p50_ms / off.load.p50_ms);
    let daemon_cpu = on.observer.as_ref().map_or(f64::NAN, |o| o.cpu);
    print_programs(on.observer.as_ref().map_or(&[], |o| &o.programs));
    print_rate_note(opts, rounds);
    let at = if opts.rate == GOAL_RATE { String::new() } else { format!(" at {} req/s", opts.rate) };
    println!("verdict {}:", gateway.name());
    verdict("throughput loss <= 3 %", 1.0 - r_rps <= GOAL_THROUGHPUT_LOSS, format!("{:.2} %", (1.0 - r_rps) * 100.0));
    verdict("p99 added <= 5 %", r_p99 - 1.0 <= GOAL_P99_ADDED, format!("{:+.2} %", (r_p99 - 1.0) * 100.0));
    verdict(
        "daemon < 5 % of a core at 10k req/s",
        daemon_cpu < GOAL_DAEMON_CPU,
        format!("{:.1} %{at}", daemon_cpu * 100.0),
    );
}

/// Every figure's median over `phases` (errors and unsent summed), programs matched by name.
fn median_phase(phases: Vec<&Phase>) -> Phase {
    let med = |f: &dyn Fn(&Phase) -> f64| median(phases.iter().map(|p| f(p)).collect());
    let observers: Vec<&ObserverCost> = phases.iter().filter_map(|p| p.observer.as_ref()).collect();
    let observer = (!observers.is_empty()).then(|| ObserverCost {
        cpu: median(observers.iter().map(|o| o.cpu).collect()),
        rss_mib: median(observers.iter().map(|o| o.rss_mib).collect()),
        programs: median_programs(&observers),
    });
    Phase {
        load: LoadResult {
            achieved_rps: med(&|p| p.load.achieved_rps),
            p50_ms: med(&|p| p.load.p50_ms),
            p99_ms: med(&|p| p.load.p99_ms),
            errors: phases.iter().map(|p| p.load.errors).sum(),
            unsent: phases.iter().map(|p| p.load.unsent).sum(),
        },
        gateway_cpu: med(&|p| p.gateway_cpu),
        loadgen_cpu: med(&|p| p.loadgen_cpu),
        observer,
    }
}

fn median_programs(observers: &[&ObserverCost]) -> Vec<(String, f64, f64)> {
    let mut by_program: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (name, ns, rate) in observers.iter().flat_map(|o| &o.programs) {
        let entry = by_program.entry(name).or_default();
        entry.0.push(*ns);
        entry.1.push(*rate);
    }
    by_program.into_iter().map(|(name, (ns, rate))| (name.to_owned(), median(ns), median(rate))).collect()
}

/// Runs are counted on every run of the hook on the host, targeted or not; ns/event includes
/// bpf_stats' own timing (see `bench probes` for the empty-program floor).
fn print_programs(programs: &[(String, f64, f64)]) {
    println!("kernel cost per program, median of on phases (every run on the host, bpf_stats timing included):");
    println!("  {:24} {:>12} {:>10}", "program", "events/s", "ns/event");
    for (name, ns, rate) in programs {
        let ns = if ns.is_nan() { "-".to_owned() } else { format!("{ns:.1}") };
        println!("  {name:24} {rate:>12.0} {ns:>10}");
    }
}

/// Says so when the generator fell short of the target: on 2 shared cores the generator, the
/// gateway, the upstream and the daemon compete, and the ratios then compare what was reached.
fn print_rate_note(opts: &Options, rounds: &[(Phase, Phase)]) {
    let phases = rounds.iter().flat_map(|(off, on)| [off, on]);
    let short: Vec<f64> = phases.map(|p| p.load.achieved_rps).filter(|r| *r < opts.rate * 0.97).collect();
    if let Some(lowest) = short.iter().copied().reduce(f64::min) {
        println!(
            "note: {} phase(s) fell short of the target rate (lowest {lowest:.0} of {} req/s): the machine saturates",
            short.len(),
            opts.rate
        );
    }
}

fn verdict(goal: &str, met: bool, figure: String) {
    println!("  {goal:40} {} ({figure})", if met { "met" } else { "MISSED" });
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_costs_use_whole_collections() {
        let before = (3.0, Stats::from([("sched_switch".to_owned(), (1.0, 1e6))]));
        let after = (8.0, Stats::from([("sched_switch".to_owned(), (1.001, 1.5e6)), ("new".to_owned(), (0.0, 0.0))]));
        let costs = program_costs(&before, &after);
        let (name, ns, rate) = &costs[1];
        assert_eq!(name, "sched_switch");
        assert!((ns - 2.0).abs() < 1e-6, "ns/event {ns}");
        assert!((rate - 100_000.0).abs() < 1e-6, "events/s {rate}");
        assert!(costs[0].1.is_nan(), "a program that never ran has no ns/event");
    }

    #[test]
    fn stat_fields_skip_a_command_with_spaces() {
        let fields = stat_fields(std::process::id()).unwrap();
        assert_eq!(fields[1].parse::<u32>().unwrap(), std::os::unix::process::parent_id());
    }
}
