//! `cargo xtask demo [--phase-seconds 20] [--keep]`: the incidents of DESIGN.md, replayed on
//! this machine. Builds the release binaries, starts Redis, an nginx upstream, the reference
//! gateway and the observer (all on loopback, in a temp dir), runs a healthy phase and then each
//! incident under load, and prints what the observer detected and how fast.
//!
//! Every child is stopped on exit (SIGTERM, then SIGKILL), also on error and Ctrl-C, through
//! `Procs`' Drop; load and fault threads stop through their own Drops first.

pub(crate) mod net;
mod netns;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::bench_gateway::{Procs, free_port, nginx_conf, which};
use crate::{args, util};
use net::{Load, LoadStats, RedisPauser, redis_call, request, wait_http_200};

/// How long resolved alerts may take: 5 s of quiet after the condition ends, plus the pool's
/// sleeping threads draining their already-reserved permits (up to max/rate = 64/5 s).
const RESOLVE_WITHIN: Duration = Duration::from_secs(25);
const API_LOAD_CONNECTIONS: usize = 8;
const RPC_LOAD_CONNECTIONS: usize = 96;
const ORDERS_LOAD_CONNECTIONS: usize = 16;
/// The upstream that stops answering in incident 3, inside its own network namespace.
const BROKEN_UPSTREAM_PORT: u16 = 8081;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

/// The incidents of DESIGN.md, replayed on this machine (as root)
///
/// Starts Redis, nginx upstreams, the reference gateway and the observer, runs a healthy phase and
/// then each incident under load, and prints what the observer detected and how fast.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Seconds of the healthy phase and of each incident.
    #[arg(long = "phase-seconds", value_name = "N", default_value_t = 20, value_parser = args::number_in(3..=600_u64))]
    phase_seconds: u64,
    /// Leave everything running after the report, until Ctrl-C.
    #[arg(long)]
    keep: bool,
}

/// The demo loads eBPF programs: say so before setup tries anything else.
pub fn require_root() -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("cargo xtask demo needs root: the observer loads eBPF programs (try: sudo -E cargo xtask demo)");
    }
    Ok(())
}

pub fn run(opts: &Options) -> Result<()> {
    require_root()?;
    for tool in ["redis-server", "nginx"] {
        which(tool).with_context(|| format!("{tool} not found on PATH (cargo xtask setup installs it)"))?;
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }

    println!("demo: building release binaries...");
    util::cargo(&["build", "--release", "-p", "gateway-observer", "-p", "reference-gateway", "--bins"])
        .context("release build failed")?;
    check_interrupted()?;
    let bin = util::target_dir().join("release");

    let dir = std::env::temp_dir().join(format!("gateway-observer-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let started = Instant::now();
    let result = demo(opts, &bin, &dir);
    match &result {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dir);
            println!("demo: done in {:.0} s, everything stopped", started.elapsed().as_secs_f64());
        }
        Err(_) if INTERRUPTED.load(Ordering::Relaxed) => {
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("demo: interrupted, everything stopped");
            std::process::exit(130);
        }
        Err(_) => eprintln!("demo: logs kept in {}", dir.display()),
    }
    result
}

struct Ports {
    redis: u16,
    upstream: u16,
    /// Incident 3's upstream, in the namespace.
    broken_upstream: String,
    gateway: u16,
    admin: u16,
    observer: u16,
}

fn demo(opts: &Options, bin: &Path, dir: &Path) -> Result<()> {
    let broken = netns::BrokenPath::create().context("failed to create incident 3's network namespace")?;
    let p = Ports {
        redis: free_port()?,
        upstream: free_port()?,
        broken_upstream: format!("{}:{BROKEN_UPSTREAM_PORT}", broken.upstream_ip),
        gateway: free_port()?,
        admin: free_port()?,
        observer: free_port()?,
    };
    let mut procs = Procs::default();
    let log = |name: &str| -> Result<Stdio> {
        let path = dir.join(name);
        Ok(std::fs::File::create(&path).with_context(|| format!("failed to create {}", path.display()))?.into())
    };

    procs.spawn(
        "redis-server",
        Command::new("redis-server")
            .args(["--port", &p.redis.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(log("redis.log")?)
            .stderr(Stdio::null()),
    )?;
    let static_nginx = |procs: &mut Procs, name: &str, listen: &str, body: &str, mut command: Command| -> Result<()> {
        let conf = dir.join(format!("{name}.conf"));
        let server = format!(
            "server {{ listen {listen}; keepalive_requests 10000000; location / {{ return 200 \"{body}\\n\"; }} }}"
        );
        std::fs::write(&conf, nginx_conf(dir, name, 1, &server))?;
        command.arg("-p").arg(dir).arg("-c").arg(&conf).args(["-g", "daemon off;"]);
        procs.spawn(name, command.stdout(Stdio::null()).stderr(log(&format!("{name}-nginx.log"))?))?;
        Ok(())
    };
    static_nginx(&mut procs, "upstream", &format!("127.0.0.1:{}", p.upstream), "ok", Command::new("nginx"))?;
    // Incident 3's upstream, in the namespace whose replies the fault drops.
    static_nginx(&mut procs, "broken-upstream", &p.broken_upstream, "order ok", broken.command("nginx"))?;
    wait_redis(p.redis, &mut procs)?;
    redis_call(p.redis, &["SET", "tok", r#"{"userId":"u-1"}"#])?;
    wait_http_200("upstream nginx", p.upstream, "/", Duration::from_secs(10), || alive(&mut procs))?;

    let gw_conf = dir.join("gateway.toml");
    std::fs::write(&gw_conf, gateway_config(&p))?;
    let gw_pid = procs.spawn(
        "reference-gateway",
        Command::new(bin.join("reference-gateway"))
            .arg("--config")
            .arg(&gw_conf)
            .stdout(Stdio::null())
            .stderr(log("gateway.log")?),
    )?;
    wait_http_200("reference-gateway", p.gateway, "/health", Duration::from_secs(10), || alive(&mut procs))?;
    let probe = request(p.gateway, "GET", "/api/x", "", Duration::from_secs(2))
        .context("reference-gateway does not answer /api/x")?;
    if probe.status != 200 {
        bail!(
            "GET /api/x with the demo token answered {} (expected 200 through the access check): {}",
            probe.status,
            probe.body.trim()
        );
    }

    procs.spawn(
        "gateway-observer",
        Command::new(bin.join("gateway-observer"))
            .args(["run", "--target", &format!("pid={gw_pid}"), "--listen", &format!("127.0.0.1:{}", p.observer)])
            .args(["--interval", "500ms"])
            .stdout(log("observer-alerts.jsonl")?)
            .stderr(log("observer.log")?),
    )?;
    wait_http_200("gateway-observer", p.observer, "/ready", Duration::from_secs(60), || alive(&mut procs))
        .with_context(|| format!("see {}", dir.join("observer.log").display()))?;
    println!(
        "demo: redis :{}, upstream nginx :{}, reference-gateway :{} (pid {gw_pid}, admin :{}), observer :{} — all on 127.0.0.1",
        p.redis, p.upstream, p.gateway, p.admin, p.observer
    );

    let secs = opts.phase_seconds;
    let phase = Duration::from_secs(secs);
    let bound = phase * 3 + RESOLVE_WITHIN * 2;
    let mut rows = Vec::new();

    // Healthy.
    println!("\n[healthy] {secs} s of GET /api/x ({API_LOAD_CONNECTIONS} connections, async Redis)");
    let api_load = Load::start(p.gateway, "/api/x", API_LOAD_CONNECTIONS, bound);
    let mut healthy = BTreeMap::new();
    watch(&p, &mut procs, Instant::now(), phase, true, &mut healthy)?;
    println!("  alerts: {}", if healthy.is_empty() { "none".to_owned() } else { healthy.len().to_string() });

    // Incident 1: a synchronous Redis client on the event loops, Redis slowed by CLIENT PAUSE.
    println!(
        "\n[incident 1] blocking Redis client on the gateway's event loops + Redis paused 60 ms every 80 ms, {secs} s, load continues"
    );
    let fault_start = Instant::now();
    set_faults(&p, r#"{"redis_client":"blocking"}"#)?;
    let pauser = RedisPauser::start(p.redis, phase + Duration::from_secs(5));
    let mut inc1 = BTreeMap::new();
    watch(&p, &mut procs, fault_start, phase, false, &mut inc1)?;
    let pauses = pauser.stop();
    let fault_end = Instant::now();
    set_faults(&p, r#"{"redis_client":"async"}"#)?;
    println!("  fault off ({pauses} pauses sent); waiting up to {} s for alerts to resolve", RESOLVE_WITHIN.as_secs());
    wait_resolved(&p, &mut procs, fault_end, &mut inc1)?;
    let api_stats = api_load.stop();
    println!("  /api/x load over healthy + incident 1: {}", api_stats.describe());
    rows.push(("1 blocked event loop", "EventLoopBlocked", inc1));

    // Incident 2: a rate-limited pool, every thread asleep in acquire.
    println!(
        "\n[incident 2] {RPC_LOAD_CONNECTIONS} concurrent GET /rpc/call on the rate-limited pool (core 10, max 64, 5 permits/s), {secs} s"
    );
    let fault_start = Instant::now();
    let rpc_load = Load::start(p.gateway, "/rpc/call", RPC_LOAD_CONNECTIONS, phase + RESOLVE_WITHIN);
    let mut inc2 = BTreeMap::new();
    watch(&p, &mut procs, fault_start, phase, false, &mut inc2)?;
    let rpc_stats: LoadStats = rpc_load.stop();
    let fault_end = Instant::now();
    println!("  load stopped: {}", rpc_stats.describe());
    println!(
        "  waiting up to {} s for alerts to resolve (pool threads finish their reserved permits)",
        RESOLVE_WITHIN.as_secs()
    );
    wait_resolved(&p, &mut procs, fault_end, &mut inc2)?;
    rows.push(("2 saturated pool", "PoolSaturated", inc2));

    // Incident 3: an upstream whose responses never come back, behind an 1800 s timeout.
    println!(
        "\n[incident 3] {ORDERS_LOAD_CONNECTIONS} connections on GET /orders/x; its upstream {} (own network namespace) stops answering: nftables drops its packets after the handshake; gateway upstream timeout 1800 s, {secs} s",
        p.broken_upstream
    );
    let orders_load = Load::start(p.gateway, "/orders/x", ORDERS_LOAD_CONNECTIONS, phase + RESOLVE_WITHIN);
    // The other upstream keeps answering: the evidence tells one bad peer from a gateway that is down.
    let api_load = Load::start(p.gateway, "/api/x", 2, phase + RESOLVE_WITHIN);
    std::thread::sleep(Duration::from_secs(1));
    let fault_start = Instant::now();
    broken.break_replies(BROKEN_UPSTREAM_PORT)?;
    let mut inc3 = BTreeMap::new();
    watch(&p, &mut procs, fault_start, phase, false, &mut inc3)?;
    broken.repair()?;
    let fault_end = Instant::now();
    println!("  fault off (rule removed); waiting up to {} s for alerts to resolve", RESOLVE_WITHIN.as_secs());
    wait_resolved(&p, &mut procs, fault_end, &mut inc3)?;
    println!("  /orders/x load: {}", orders_load.stop().describe());
    println!("  /api/x load: {}", api_load.stop().describe());
    rows.push(("3 upstream never answers", "UpstreamNoResponse", inc3));

    print_report(secs, &healthy, &rows, p.observer, opts.keep);
    if opts.keep {
        println!("\nEverything is still running (logs in {}). Ctrl-C stops it.", dir.display());
        while !INTERRUPTED.load(Ordering::Relaxed) {
            alive(&mut procs)?;
            std::thread::sleep(Duration::from_millis(200));
        }
        println!("demo: stopping...");
    }
    Ok(())
}

fn gateway_config(p: &Ports) -> String {
    format!(
        r#"[server]
listen = ["127.0.0.1:{gw}"]
workers = 4
drain_timeout = "2s"

[admin]
listen = "127.0.0.1:{admin}"

[access_log]
output = "off"

[redis]
url = "redis://127.0.0.1:{redis}/"
timeout = "5s"

[faults]
redis_client = "async"
upstream_response_timeout = "1800s"

[faults.pool]
enabled = true
core = 10
max = 64
permits_per_second = 5.0

[upstreams.u]
servers = ["127.0.0.1:{up}"]

[[routes]]
path_prefix = "/api/"
upstream = "u"
access_check = "protected"

[[routes]]
path_prefix = "/rpc/"
handler = "pool"

[upstreams.orders]
servers = ["{broken}"]
max_fails = 1000000

[[routes]]
path_prefix = "/orders/"
upstream = "orders"
"#,
        gw = p.gateway,
        admin = p.admin,
        redis = p.redis,
        up = p.upstream,
        broken = p.broken_upstream,
    )
}

fn alive(procs: &mut Procs) -> Result<()> {
    check_interrupted()?;
    procs.check_alive()
}

fn wait_redis(port: u16, procs: &mut Procs) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        alive(procs)?;
        if redis_call(port, &["PING"]).is_ok_and(|r| r == "+PONG") {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("redis-server on 127.0.0.1:{port} did not answer PING within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The admin endpoint runs on the gateway's own (possibly blocked) workers: a generous timeout.
fn set_faults(p: &Ports, json: &str) -> Result<()> {
    let r = request(p.admin, "PUT", "/admin/faults", json, Duration::from_secs(10))?;
    if r.status != 200 {
        bail!("PUT /admin/faults {json} answered {}: {}", r.status, r.body.trim());
    }
    Ok(())
}

struct Alert {
    id: String,
    kind: String,
    state: String,
    subject: String,
    summary: String,
}

fn alerts(p: &Ports) -> Result<Vec<Alert>> {
    let r = request(p.observer, "GET", "/api/v1/alerts", "", Duration::from_secs(2))?;
    if r.status != 200 {
        bail!("GET /api/v1/alerts answered {}", r.status);
    }
    let v: Value = serde_json::from_str(&r.body).context("GET /api/v1/alerts: not JSON")?;
    let list = v.get("alerts").and_then(Value::as_array).context("GET /api/v1/alerts: no \"alerts\" array")?;
    let s = |a: &Value, k: &str| a.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    Ok(list
        .iter()
        .map(|a| Alert {
            id: s(a, "id"),
            kind: s(a, "kind"),
            state: s(a, "state"),
            subject: s(a, "subject"),
            summary: s(a, "summary"),
        })
        .collect())
}

/// What one phase saw of one alert.
struct Seen {
    kind: String,
    subject: String,
    summary: String,
    state: String,
    detected_after: Duration,
    resolved_after: Option<Duration>,
}

/// Polls the alerts every 100 ms for `len`, recording each alert that turns firing (or, with
/// `pending_too`, pending) with the time since `from`. Alerts already active when the phase
/// starts belong to an earlier phase and are skipped.
fn watch(
    p: &Ports,
    procs: &mut Procs,
    from: Instant,
    len: Duration,
    pending_too: bool,
    seen: &mut BTreeMap<String, Seen>,
) -> Result<()> {
    let active = |a: &Alert| a.state == "firing" || (pending_too && a.state == "pending");
    let carried: Vec<String> = alerts(p)?.into_iter().filter(|a| a.state != "resolved").map(|a| a.id).collect();
    let end = from + len;
    while Instant::now() < end {
        alive(procs)?;
        // A slow answer (the observer shares two cores with the load) is not fatal mid-phase.
        if let Ok(list) = alerts(p) {
            for a in list {
                if let Some(s) = seen.get_mut(&a.id) {
                    s.state = a.state;
                } else if active(&a) && !carried.contains(&a.id) {
                    let after = from.elapsed();
                    println!("  {:>5.1} s  {} {} {}: {}", after.as_secs_f64(), a.state, a.kind, a.subject, a.summary);
                    seen.insert(
                        a.id,
                        Seen {
                            kind: a.kind,
                            subject: a.subject,
                            summary: a.summary,
                            state: a.state,
                            detected_after: after,
                            resolved_after: None,
                        },
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Waits (at most `RESOLVE_WITHIN`) until every alert in `seen` is resolved, recording when.
fn wait_resolved(p: &Ports, procs: &mut Procs, from: Instant, seen: &mut BTreeMap<String, Seen>) -> Result<()> {
    let deadline = from + RESOLVE_WITHIN;
    while seen.values().any(|s| s.resolved_after.is_none()) && Instant::now() < deadline {
        alive(procs)?;
        if let Ok(list) = alerts(p) {
            let states: BTreeMap<String, String> = list.into_iter().map(|a| (a.id, a.state)).collect();
            for (id, s) in seen.iter_mut().filter(|(_, s)| s.resolved_after.is_none()) {
                match states.get(id) {
                    Some(state) if state != "resolved" => s.state = state.clone(),
                    _ => {
                        s.state = "resolved".into();
                        s.resolved_after = Some(from.elapsed());
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn print_report(
    secs: u64,
    healthy: &BTreeMap<String, Seen>,
    rows: &[(&str, &str, BTreeMap<String, Seen>)],
    observer: u16,
    keep: bool,
) {
    println!("\n=== what the observer detected ===\n");
    if healthy.is_empty() {
        println!("healthy {secs} s: no alerts");
    } else {
        println!("healthy {secs} s: {} alert(s), false positives:", healthy.len());
        for s in healthy.values() {
            println!("  {} {} ({}): {}", s.kind, s.subject, s.state, s.summary);
        }
    }
    println!();
    let header = ["incident", "alert", "subject", "detected after", "resolved after", "evidence"];
    let mut table: Vec<[String; 6]> = Vec::new();
    for (incident, expected, seen) in rows {
        // The expected kind first, in order of detection; anything else after it.
        let mut list: Vec<&Seen> = seen.values().collect();
        list.sort_by_key(|s| (s.kind != *expected, s.detected_after));
        if !list.iter().any(|s| s.kind == *expected) {
            table.push([
                incident.to_string(),
                expected.to_string(),
                "-".into(),
                "not detected".into(),
                "-".into(),
                "-".into(),
            ]);
        }
        for s in list {
            let resolved = s
                .resolved_after
                .map_or_else(|| format!("not yet ({})", s.state), |d| format!("{:.1} s", d.as_secs_f64()));
            table.push([
                incident.to_string(),
                s.kind.clone(),
                s.subject.clone(),
                format!("{:.1} s", s.detected_after.as_secs_f64()),
                resolved,
                s.summary.clone(),
            ]);
        }
    }
    let mut widths = header.map(str::len);
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join(" | ").trim_end());
    };
    line(&header.map(String::from));
    line(&widths.map(|w| "-".repeat(w)));
    for row in &table {
        line(row);
    }
    println!(
        "\n(detected after: from the fault being switched on to the alert firing; resolved after: from the fault being switched off)"
    );

    let o = format!("http://127.0.0.1:{observer}");
    println!("\nLive view{}:", if keep { "" } else { " (rerun with --keep to leave everything running)" });
    println!("  gateway-observer top --connect {o}");
    println!("  curl -s {o}/api/v1/alerts");
    println!("  curl -s {o}/metrics | grep gateway_observer_");
}

#[cfg(test)]
mod tests {
    use crate::{Command, tests::parse};

    #[test]
    fn phases_of_20_seconds_and_nothing_kept_by_default() {
        let Command::Demo(o) = parse(&["demo"]) else { panic!("not demo") };
        assert_eq!((o.phase_seconds, o.keep), (20, false));
        let Command::Demo(o) = parse(&["demo", "--phase-seconds", "5", "--keep"]) else { panic!("not demo") };
        assert_eq!((o.phase_seconds, o.keep), (5, true));
    }
}
