//! `cargo xtask bench probes`: the kernel's own cost per event of each program
//! (kernel.bpf_stats_enabled=1, run_time_ns / run_cnt), under a context-switch-heavy load, in two
//! phases side by side: the load targeted (full work per event) and not targeted (the one lookup
//! every other process on the host pays).

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    bench_gateway::{Procs, free_port},
    util::{cargo, end_with_parent, target_dir},
};

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Kernel ns per event of each program, with the empty-program floor (as root)
///
/// kernel.bpf_stats_enabled=1 under a context-switch load, in two phases side by side: the load
/// targeted and not, then an empty program on the same hooks.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Seconds per phase: program stats are read over 60 % of it, once the daemon is ready.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    seconds: f64,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    cargo(&["build", "--release", "-p", "gateway-observer", "-p", "tests", "--bins"])?;
    with_bpf_stats(|| phases(options.seconds))
}

/// Runs `f` with kernel.bpf_stats_enabled=1 (the kernel then times every program run), and puts
/// the previous value back afterwards, also when `f` fails.
pub(crate) fn with_bpf_stats<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    with_bpf_stats_set("1", f)
}

/// Runs `f` with kernel.bpf_stats_enabled=0: where no program is timed, so runs cost what they
/// cost a user. The previous value is put back afterwards.
pub(crate) fn without_bpf_stats<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    with_bpf_stats_set("0", f)
}

fn with_bpf_stats_set<T>(value: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let previous = std::fs::read_to_string(STATS_SYSCTL).context("cannot read bpf_stats_enabled (root?)")?;
    std::fs::write(STATS_SYSCTL, value).context("cannot set kernel.bpf_stats_enabled (run as root)")?;
    let result = f();
    let _ = std::fs::write(STATS_SYSCTL, previous.trim());
    result
}

/// How much longer than the window the load of a daemon phase runs: the daemon's start (up to
/// `measure`'s 30 s wait for it) comes before the window, and a load that ran only `seconds`
/// had ended before a slow start's window began. The load is ended once measured.
const LOAD_OUTLASTS_STARTUP_SECONDS: f64 = 35.0;

fn phases(seconds: f64) -> anyhow::Result<()> {
    let release = target_dir().join("release");
    let observer = release.join("gateway-observer");
    let load = release.join("switch-load");
    // An idle process to target in the untargeted phase, so the daemon has something to follow;
    // ended when `idle` drops, also on an early return.
    let mut idle = Procs::default();
    let idle_pid = idle.spawn("sleep", Command::new("sleep").arg("600"))?;
    let mut rows = Vec::new();
    for targeted in [true, false] {
        let mut load_command = Command::new(&load);
        load_command.arg(format!("{}", seconds + LOAD_OUTLASTS_STARTUP_SECONDS)).stdout(Stdio::piped());
        end_with_parent(&mut load_command, libc::SIGKILL);
        let mut load_child = load_command.spawn().context("spawn switch-load")?;
        let target = if targeted { load_child.id() } else { idle_pid };
        let port = free_port()?;
        let mut daemon = Procs::default();
        daemon.spawn(
            "gateway-observer",
            Command::new(&observer)
                .args(["run", "--target", &format!("pid={target}"), "--listen", &format!("127.0.0.1:{port}")])
                .args(["--interval", "250ms"])
                .stderr(Stdio::null()),
        )?;
        let outcome = measure(port, seconds * 0.6);
        drop(daemon);
        let _ = load_child.kill();
        let _ = load_child.wait();
        let (stats, wall) = outcome?;
        rows.push((if targeted { "load targeted" } else { "load not targeted" }, stats, wall));
    }
    drop(idle);
    rows.push(("empty program", floor(&observer, &load, seconds)?, seconds * 0.6));
    print_table(&rows);
    Ok(())
}

/// The same load with only empty programs attached (`gateway-observer calibrate`): the cost of
/// running any program on these hooks here, stats accounting included.
fn floor(observer: &std::path::Path, load: &std::path::Path, seconds: f64) -> anyhow::Result<Stats> {
    let mut load_child =
        Command::new(load).arg(format!("{seconds}")).stdout(Stdio::piped()).spawn().context("spawn switch-load")?;
    let out = Command::new(observer)
        .args(["calibrate", "--duration", &format!("{}ms", (seconds * 600.0) as u64)])
        .output()
        .context("run gateway-observer calibrate")?;
    let _ = load_child.wait();
    if !out.status.success() {
        bail!("calibrate failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut stats = Stats::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [name, runs, ns] = fields[..] {
            let runs: f64 = runs.parse().unwrap_or(0.0);
            let ns: f64 = ns.parse().unwrap_or(0.0);
            stats.insert(name.trim_start_matches("baseline_").to_owned(), (ns / 1e9, runs));
        }
    }
    Ok(stats)
}

pub(crate) type Stats = BTreeMap<String, (f64, f64)>; // program → (run seconds, runs)

/// Waits for the daemon, then takes program stats twice, `window` seconds apart.
fn measure(port: u16, window: f64) -> anyhow::Result<(Stats, f64)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while scrape(port, "/ready").is_none_or(|(status, _)| status != 200) {
        if Instant::now() > deadline {
            bail!("gateway-observer not ready within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300)); // one collection, so the target is followed
    let before = program_stats(port)?;
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(window));
    std::thread::sleep(Duration::from_millis(300)); // stats are read at each 250 ms collection
    let after = program_stats(port)?;
    let wall = start.elapsed().as_secs_f64();
    let delta = after
        .into_iter()
        .map(|(program, (time, runs))| {
            let (t0, r0) = before.get(&program).copied().unwrap_or_default();
            (program, (time - t0, runs - r0))
        })
        .collect();
    Ok((delta, wall))
}

fn program_stats(port: u16) -> anyhow::Result<Stats> {
    let (_, body) = scrape(port, "/metrics").context("scrape /metrics")?;
    Ok(parse_program_stats(&body))
}

/// Every program the daemon reports, whatever its name, from a /metrics body.
pub(crate) fn parse_program_stats(body: &str) -> Stats {
    let mut stats = Stats::new();
    for line in body.lines() {
        for (metric, is_time) in [
            ("gateway_observer_bpf_program_run_seconds_total", true),
            ("gateway_observer_bpf_program_runs_total", false),
        ] {
            let Some(rest) = line.strip_prefix(metric).and_then(|r| r.strip_prefix("{program=\"")) else { continue };
            let Some((program, value)) = rest.split_once("\"} ") else { continue };
            let value: f64 = value.trim().parse().unwrap_or(0.0);
            let entry = stats.entry(program.to_owned()).or_default();
            if is_time { entry.0 = value } else { entry.1 = value }
        }
    }
    stats
}

fn print_table(rows: &[(&str, Stats, f64)]) {
    println!("\nkernel cost per program run (bpf_stats: run_time_ns / run_cnt), context-switch-heavy load");
    println!("{:18} {:20} {:>12} {:>10}", "phase", "program", "events/s", "ns/event");
    for (phase, stats, wall) in rows {
        for (program, (time, runs)) in stats {
            let ns = if *runs > 0.0 { time * 1e9 / runs } else { 0.0 };
            println!("{phase:18} {program:20} {:>12.0} {ns:>10.1}", runs / wall);
        }
        if !stats.contains_key("sys_exit") {
            continue; // the floor has no sys_exit program
        }
        let ns_of = |p: &str| stats.get(p).map_or(0.0, |(t, r)| if *r > 0.0 { t * 1e9 / r } else { 0.0 });
        println!(
            "{phase:18} {:20} {:>12} {:>10.1}   (goal: sched_switch <= 100 ns, futex pair <= 200 ns)",
            "sys_enter+sys_exit",
            "",
            ns_of("sys_enter") + ns_of("sys_exit")
        );
    }
}

pub(crate) fn scrape(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response.split_once("\r\n\r\n")?.1.to_owned()))
}

#[cfg(test)]
mod tests {
    use crate::{Bench, tests::bench};

    #[test]
    fn five_seconds_per_phase_by_default() {
        let Bench::Probes(options) = bench(&["probes"]) else { panic!("not bench probes") };
        assert_eq!(options.seconds, 5.0);
        let Bench::Probes(options) = bench(&["probes", "--seconds", "2.5"]) else { panic!("not bench probes") };
        assert_eq!(options.seconds, 2.5);
    }
}
