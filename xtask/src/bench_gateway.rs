//! `cargo xtask bench gateway`: wrk on loopback against reference-gateway and against Debian's
//! nginx configured as the equivalent reverse proxy (same upstream, same worker count, upstream
//! keep-alive on, access logs off on both), alternated round by round so drift (thermal, other
//! load) hits both alike. Prints per-round and median requests/s and p99, and the two ratios.
//!
//! The upstream is a second nginx answering a static 200. Everything binds to 127.0.0.1, lives
//! in a temp dir, and is killed on exit (also on error, through `Procs`' Drop).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::args;
use crate::wrk::{self, WrkResult, WrkSpec};

/// wrk against reference-gateway and nginx, alternated: req/s and p99 ratios
///
/// nginx is configured as the equivalent reverse proxy (same upstream and workers, upstream
/// keep-alive on, access logs off on both); per-round and median requests/s and p99.
#[derive(clap::Args, Debug)]
#[command(arg = args::own_name_again("gateway"))]
pub struct Options {
    /// Rounds; each runs wrk once against either proxy.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = args::number_in(1_usize..))]
    rounds: usize,
    /// Seconds of each wrk run.
    #[arg(long = "duration", value_name = "SECONDS", default_value_t = 10, value_parser = args::number_in(1_u64..))]
    duration_s: u64,
    /// wrk's connections.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = args::number_in(1_usize..))]
    connections: usize,
    /// wrk's threads.
    #[arg(long, value_name = "N", default_value_t = 2)]
    wrk_threads: usize,
    /// Workers of each proxy (reference-gateway's worker threads, nginx's worker processes).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = args::number_in(1_usize..))]
    workers: usize,
}

/// Children killed on drop, so an error half-way leaves nothing running.
#[derive(Default)]
pub(crate) struct Procs(Vec<(String, Child)>);

impl Procs {
    /// Starts `cmd` and returns its pid.
    pub(crate) fn spawn(&mut self, name: &str, cmd: &mut Command) -> Result<u32> {
        Ok(self.spawn_child(name, cmd)?.id())
    }

    /// Starts `cmd` with its stdout piped; returns its pid and that pipe.
    pub(crate) fn spawn_with_stdout(&mut self, name: &str, cmd: &mut Command) -> Result<(u32, ChildStdout)> {
        let child = self.spawn_child(name, cmd.stdout(Stdio::piped()))?;
        let stdout = child.stdout.take().with_context(|| format!("{name} has no stdout"))?;
        Ok((child.id(), stdout))
    }

    fn spawn_child(&mut self, name: &str, cmd: &mut Command) -> Result<&mut Child> {
        // SIGTERM, as in `drop`: nginx's master then stops its workers.
        crate::util::end_with_parent(cmd, libc::SIGTERM);
        let child = cmd.spawn().with_context(|| format!("failed to start {name}"))?;
        self.0.push((name.to_owned(), child));
        Ok(&mut self.0.last_mut().expect("just pushed").1)
    }

    pub(crate) fn check_alive(&mut self) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited unexpectedly ({status})");
            }
        }
        Ok(())
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        // SIGTERM first: nginx's master then stops its workers (SIGKILL would orphan them, still
        // holding the ports), and the gateway drains. SIGKILL only for what ignores it.
        for (_, child) in &mut self.0 {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (name, child) in &mut self.0 {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                eprintln!("{name} ignored SIGTERM, killing it");
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

pub fn run(opts: &Options) -> Result<()> {
    for tool in ["nginx", "wrk"] {
        which(tool).with_context(|| format!("{tool} not found on PATH (apt-get install -y nginx wrk)"))?;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("xtask has no parent directory")?.to_owned();
    println!("building reference-gateway (release)...");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args(["build", "--release", "-p", "reference-gateway"])
        .status()
        .context("failed to run cargo build")?;
    if !status.success() {
        bail!("cargo build --release --bin reference-gateway failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let gateway_bin = target.join("release/reference-gateway");

    let dir = std::env::temp_dir().join(format!("refgw-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let result = bench(opts, &gateway_bin, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The two proxies under test, running behind one upstream: pid (the process to observe) and port.
pub(crate) struct Proxies {
    pub(crate) gateway: (u32, u16),
    pub(crate) nginx: (u32, u16),
    /// The upstream nginx's port, for another proxy put in front of it.
    pub(crate) upstream_port: u16,
    /// The upstream nginx's master pid (its worker is its child).
    pub(crate) upstream_pid: u32,
}

/// Writes the configs into `dir`, starts the upstream nginx, the proxy nginx and
/// reference-gateway (each with `workers` workers) into `procs`, and waits until all answer 200.
pub(crate) fn start_proxies(dir: &Path, gateway_bin: &Path, workers: usize, procs: &mut Procs) -> Result<Proxies> {
    let (up_port, nginx_port, gw_port, admin_port) = (free_port()?, free_port()?, free_port()?, free_port()?);

    let up_conf = dir.join("upstream.conf");
    std::fs::write(
        &up_conf,
        nginx_conf(
            dir,
            "upstream",
            1,
            &format!(
                "server {{ listen 127.0.0.1:{up_port}; keepalive_requests 10000000; location / {{ return 200 \"ok\\n\"; }} }}"
            ),
        ),
    )?;
    let proxy_conf = dir.join("proxy.conf");
    std::fs::write(
        &proxy_conf,
        nginx_conf(
            dir,
            "proxy",
            workers,
            &proxy_http_block(&format!("listen 127.0.0.1:{nginx_port} backlog=1024;"), up_port),
        ),
    )?;
    let gw_conf = dir.join("gateway.toml");
    std::fs::write(
        &gw_conf,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{gw_port}\"]\nworkers = {}\n[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n[access_log]\noutput = \"off\"\n[upstreams.backend]\nservers = [\"127.0.0.1:{up_port}\"]\nkeepalive = 64\n[[routes]]\nupstream = \"backend\"\n",
            workers
        ),
    )?;

    let upstream_pid = spawn_nginx(procs, "upstream nginx", dir, &up_conf)?;
    let nginx_pid = spawn_nginx(procs, "proxy nginx", dir, &proxy_conf)?;
    let gw_pid = procs.spawn(
        "reference-gateway",
        Command::new(gateway_bin).arg("--config").arg(&gw_conf).stdout(Stdio::null()).stderr(Stdio::null()),
    )?;
    for (name, port) in [("upstream nginx", up_port), ("proxy nginx", nginx_port), ("reference-gateway", gw_port)] {
        wait_ready(name, port, procs)?;
    }
    Ok(Proxies { gateway: (gw_pid, gw_port), nginx: (nginx_pid, nginx_port), upstream_port: up_port, upstream_pid })
}

fn bench(opts: &Options, gateway_bin: &Path, dir: &Path) -> Result<()> {
    let mut procs = Procs::default();
    let proxies = start_proxies(dir, gateway_bin, opts.workers, &mut procs)?;
    let (gw_port, nginx_port) = (proxies.gateway.1, proxies.nginx.1);

    println!(
        "wrk -t{} -c{} -d{}s --latency, {} rounds, {} workers each, loopback upstream nginx (static 200)",
        opts.wrk_threads, opts.connections, opts.duration_s, opts.rounds, opts.workers
    );
    let targets = [("reference-gateway", gw_port), ("nginx", nginx_port)];
    let spec = WrkSpec { threads: opts.wrk_threads, connections: opts.connections, seconds: opts.duration_s };
    let mut results: [Vec<WrkResult>; 2] = [Vec::new(), Vec::new()];
    for round in 0..opts.rounds {
        // Alternate who goes first so neither always runs on a warmer (or hotter) machine.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (name, port) = targets[i];
            procs.check_alive()?;
            let s = wrk::run(spec, port).with_context(|| format!("wrk against {name} failed"))?;
            println!("round {} {:<18} {:>10.0} req/s  p99 {:>7.2} ms{}", round + 1, name, s.rps, s.p99_ms, s.errors);
            results[i].push(s);
        }
    }
    let med = |v: &[WrkResult], f: fn(&WrkResult) -> f64| median(v.iter().map(f).collect());
    let (g_rps, n_rps) = (med(&results[0], |s| s.rps), med(&results[1], |s| s.rps));
    let (g_p99, n_p99) = (med(&results[0], |s| s.p99_ms), med(&results[1], |s| s.p99_ms));
    println!("median reference-gateway {g_rps:>10.0} req/s  p99 {g_p99:>7.2} ms");
    println!("median nginx             {n_rps:>10.0} req/s  p99 {n_p99:>7.2} ms");
    println!("throughput ratio (gateway/nginx, >= 1.0 is the goal): {:.3}", g_rps / n_rps);
    println!("p99 ratio        (gateway/nginx, <= 1.0 is the goal): {:.3}", g_p99 / n_p99);
    Ok(())
}

/// nginx's `http` block for a keep-alive reverse proxy to the upstream on `up_port`, its server
/// listening as `listen` says (a whole `listen ...;` directive, plus any server-level lines).
pub(crate) fn proxy_http_block(listen: &str, up_port: u16) -> String {
    format!(
        r#"upstream backend {{ server 127.0.0.1:{up_port}; keepalive 64; keepalive_requests 10000000; }}
    server {{
        {listen}
        keepalive_requests 10000000;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Request-Id $request_id;
            proxy_connect_timeout 2s;
            proxy_read_timeout 30s;
        }}
    }}"#
    )
}

/// An nginx proxy of its own in front of the bench's upstream, and how curl reaches it.
pub(crate) struct NginxProxy<'a> {
    /// Its config's and pid file's name in the bench directory.
    pub(crate) name: &'a str,
    /// The `listen` directive (and any that go with it, a certificate's).
    pub(crate) listen: &'a str,
    pub(crate) upstream_port: u16,
    pub(crate) workers: usize,
    /// curl's option for the protocol (`-k` for a self-signed certificate, `--http2-prior-knowledge`).
    pub(crate) curl_option: &'a str,
    pub(crate) url: &'a str,
}

impl NginxProxy<'_> {
    /// Writes the config into `dir`, starts nginx into `procs` and waits until curl gets 200 from
    /// `url` (at most `within`; fails as soon as a process of `procs` exits): its pid.
    pub(crate) fn start(&self, dir: &Path, procs: &mut Procs, within: std::time::Duration) -> Result<u32> {
        let conf = dir.join(format!("{}.conf", self.name));
        let http = proxy_http_block(self.listen, self.upstream_port);
        std::fs::write(&conf, nginx_conf(dir, self.name, self.workers, &http))?;
        let pid = spawn_nginx(procs, &format!("{} nginx", self.name), dir, &conf)?;
        let deadline = std::time::Instant::now() + within;
        while self.curl_status().as_deref() != Some("200") {
            procs.check_alive()?;
            if std::time::Instant::now() > deadline {
                anyhow::bail!("the {} nginx did not answer 200 at {} within {within:?}", self.name, self.url);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(pid)
    }

    fn curl_status(&self) -> Option<String> {
        let out = Command::new("curl")
            .args(["-s", self.curl_option, "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}", self.url])
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Starts `nginx -p DIR -c CONF` in the foreground into `procs`: its pid.
pub(crate) fn spawn_nginx(procs: &mut Procs, name: &str, dir: &Path, conf: &Path) -> Result<u32> {
    procs.spawn(
        name,
        Command::new("nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(conf)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
    )
}

pub(crate) fn nginx_conf(dir: &Path, name: &str, workers: usize, http_body: &str) -> String {
    let d = dir.display();
    format!(
        r#"worker_processes {workers};
pid {d}/{name}.pid;
error_log {d}/{name}-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/{name}-body;
    proxy_temp_path {d}/{name}-proxy;
    fastcgi_temp_path {d}/{name}-fastcgi;
    uwsgi_temp_path {d}/{name}-uwsgi;
    scgi_temp_path {d}/{name}-scgi;
    {http_body}
}}
"#
    )
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Checks that `tools` are on PATH, then builds the release binaries the benches start (the
/// daemon, reference-gateway, the tests' fixtures); returns the directory that holds them.
pub(crate) fn release_build(tools: &[&str]) -> Result<PathBuf> {
    for tool in tools {
        which(tool).with_context(|| format!("{tool} not found on PATH (cargo xtask setup installs it)"))?;
    }
    crate::util::cargo(&[
        "build",
        "--release",
        "-p",
        "gateway-observer",
        "-p",
        "reference-gateway",
        "-p",
        "tests",
        "--bins",
    ])?;
    Ok(crate::util::target_dir().join("release"))
}

pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Polls `GET /` (or /health for the gateway, which answers both) until 200, at most 10 s.
fn wait_ready(name: &str, port: u16, procs: &mut Procs) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        procs.check_alive()?;
        if http_status(port).is_some_and(|s| s == 200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} on 127.0.0.1:{port} not answering 200 within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn http_status(port: u16) -> Option<u16> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bench, tests::bench};

    /// `bench gateway ARGS`: rounds, duration, connections, wrk threads, workers.
    fn figures(args: &[&str]) -> [usize; 5] {
        let Bench::Gateway(o) = bench(&[&["gateway"], args].concat()) else { panic!("not bench gateway") };
        [o.rounds, o.duration_s as usize, o.connections, o.wrk_threads, o.workers]
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        // reference-gateway/README.md: [--rounds 5] [--duration 10] [--connections 64] [--workers 2]
        assert_eq!(figures(&[]), [5, 10, 64, 2, 2]);
        let given = ["--rounds", "3", "--duration", "4", "--connections", "8", "--wrk-threads", "1", "--workers", "1"];
        assert_eq!(figures(&given), [3, 4, 8, 1, 1]);
    }

    #[test]
    fn the_name_again_and_repeated_options_still_parse() {
        // The hand-written parser skipped a leading `gateway` and let the last of a repeated
        // option count.
        assert_eq!(figures(&["gateway", "--rounds", "3", "--rounds", "7"]), [7, 10, 64, 2, 2]);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
