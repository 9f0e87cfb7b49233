//! What the churn bench runs: an upstream nginx (two ports), the baseline reference-gateway under
//! light load, the daemon, and each phase's processes and clients. Every process is a child in
//! a `Procs`, ended when it drops (also on error); every wait has a deadline.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::Binaries;
use super::measure::{self, Scrape};
use crate::bench_gateway::{Procs, free_port, nginx_conf, spawn_nginx};
use crate::demo::net::{read_response, request, wait_http_200};

/// The second gateway's comm (a symlink's name: the kernel names a process after the file it ran).
pub(crate) const CHURN_COMM: &str = "churn-gateway";
const THREADS_COMM: &str = "napping-threads";
const READY_WITHIN: Duration = Duration::from_secs(30);
/// After /ready: a few collections, and the first count of SOCKS (every 10 ticks).
const WARM_UP: Duration = Duration::from_secs(12);
/// Light load on the baseline gateway: one keep-alive request this often.
const LIGHT_LOAD_EVERY: Duration = Duration::from_millis(50);

pub(crate) struct Fleet {
    // Dropped first: the load stops before the processes it talks to.
    light: LightLoad,
    procs: Procs,
    pub(crate) daemon_pid: u32,
    pub(crate) daemon_port: u16,
    pub(crate) gateway_pid: u32,
    gateway_port: u16,
    churn_bin: PathBuf,
    churn_conf: PathBuf,
    churn_port: u16,
    napping_threads: PathBuf,
}

impl Fleet {
    pub(crate) fn start(bins: &Binaries, dir: &Path) -> Result<Fleet> {
        let mut procs = Procs::default();
        let (up, churn_up, gateway_port, churn_port) = (free_port()?, free_port()?, free_port()?, free_port()?);
        let upstream_conf = dir.join("upstream.conf");
        let servers = [up, churn_up].map(|port| {
            format!("server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ return 200 \"ok\\n\"; }} }}")
        });
        std::fs::write(&upstream_conf, nginx_conf(dir, "upstream", 1, &servers.join("\n    ")))?;
        spawn_nginx(&mut procs, "upstream nginx", dir, &upstream_conf)?;
        let gateway_conf = dir.join("gateway.toml");
        std::fs::write(&gateway_conf, gateway_toml(gateway_port, up)?)?;
        let churn_conf = dir.join("churn-gateway.toml");
        std::fs::write(&churn_conf, gateway_toml(churn_port, churn_up)?)?;
        let churn_bin = dir.join(CHURN_COMM);
        std::os::unix::fs::symlink(&bins.gateway, &churn_bin)
            .with_context(|| format!("failed to link {}", churn_bin.display()))?;
        for port in [up, churn_up] {
            wait_http_200("upstream nginx", port, "/", READY_WITHIN, || procs.check_alive())?;
        }
        let gateway_pid = procs.spawn(
            "reference-gateway",
            Command::new(&bins.gateway).arg("--config").arg(&gateway_conf).stdout(Stdio::null()).stderr(Stdio::null()),
        )?;
        wait_http_200("reference-gateway", gateway_port, "/", READY_WITHIN, || procs.check_alive())?;
        let daemon_port = free_port()?;
        let log_path = dir.join("observer.log");
        let log = std::fs::File::create(&log_path)?;
        let daemon_pid = procs.spawn(
            "gateway-observer",
            Command::new(&bins.observer)
                .args(["run", "--target", &format!("pid={gateway_pid}")])
                .args(["--target", &format!("comm={CHURN_COMM}"), "--target", &format!("comm={THREADS_COMM}")])
                .args(["--listen", &format!("127.0.0.1:{daemon_port}")])
                .stdout(Stdio::null())
                .stderr(log),
        )?;
        wait_http_200("gateway-observer", daemon_port, "/ready", READY_WITHIN, || procs.check_alive()).with_context(
            || format!("the daemon's log:\n{}", std::fs::read_to_string(&log_path).unwrap_or_default()),
        )?;
        let light = LightLoad::start(gateway_port);
        std::thread::sleep(WARM_UP);
        Ok(Fleet {
            light,
            procs,
            daemon_pid,
            daemon_port,
            gateway_pid,
            gateway_port,
            churn_bin,
            churn_conf,
            churn_port,
            napping_threads: bins.napping_threads.clone(),
        })
    }

    pub(crate) fn check_alive(&mut self) -> Result<()> {
        self.procs.check_alive()?;
        if self.light.stopped() {
            bail!("the light load on the baseline gateway stopped: it failed 100 requests in a row");
        }
        Ok(())
    }

    pub(crate) fn scrape(&self) -> Result<Scrape> {
        measure::scrape(self.daemon_port)
    }

    /// Phase 1: the second gateway started, sent 5 requests (each on its own connection, each
    /// proxied upstream), kept until the daemon lists it (3 s at most), stopped; `n` times.
    /// Returns how many of them the daemon was seen following.
    pub(crate) fn restart_gateway(&mut self, n: usize) -> Result<usize> {
        let mut seen = 0;
        for i in 0..n {
            let mut gateway = Procs::default();
            let pid = gateway.spawn(
                CHURN_COMM,
                Command::new(&self.churn_bin)
                    .arg("--config")
                    .arg(&self.churn_conf)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )?;
            wait_http_200(CHURN_COMM, self.churn_port, "/", READY_WITHIN, || gateway.check_alive())?;
            for _ in 0..5 {
                request(self.churn_port, "GET", "/", "", Duration::from_secs(5))?;
            }
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if measure::snapshot_pids(self.daemon_port)?.contains(&pid) {
                    seen += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(gateway); // SIGTERM, waited for
            self.check_alive()?;
            if (i + 1) % 20 == 0 {
                eprintln!("churn: {} restarts", i + 1);
            }
        }
        Ok(seen)
    }

    /// Phase 2: `n` threads napping 100 ms for 8 s, then exiting. Returns the phase's note.
    pub(crate) fn many_threads(&mut self, n: usize) -> Result<String> {
        let mut fixture = Procs::default();
        let (pid, stdout) = fixture.spawn_with_stdout(
            THREADS_COMM,
            Command::new(&self.napping_threads).args([&n.to_string(), "100", "8"]).stderr(Stdio::inherit()),
        )?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).context("napping-threads said nothing")?;
        if line.trim() != "ready" {
            bail!("napping-threads did not start its threads: {line:?}");
        }
        let mut peak = 0.0f64;
        let deadline = Instant::now() + Duration::from_secs(15);
        while measure::task_count(pid) > 0 && Instant::now() < deadline {
            peak = peak.max(self.scrape()?.map_entries("threads"));
            std::thread::sleep(Duration::from_millis(500));
        }
        drop(fixture);
        Ok(format!("{n} threads napping 100 ms for 8 s; the daemon followed up to {peak:.0} threads"))
    }

    /// Phase 3: `n` keep-alive connections to the baseline gateway, each answered once, held
    /// until the daemon's SOCKS count has seen them (15 s at most), then closed at once.
    pub(crate) fn many_connections(&mut self, n: usize) -> Result<String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.gateway_port));
        let head = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", self.gateway_port);
        let mut held = Vec::with_capacity(n);
        let (mut answered, mut failed) = (0, 0);
        // In batches, so the listen backlog never overflows into SYN retries.
        for batch in 0..n.div_ceil(500) {
            let mut streams = Vec::new();
            for _ in batch * 500..n.min((batch + 1) * 500) {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                    Ok(s) => streams.push(s),
                    Err(_) => failed += 1,
                }
            }
            for s in &mut streams {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                if s.write_all(head.as_bytes()).is_err() {
                    failed += 1;
                }
            }
            for s in streams {
                let mut reader = BufReader::new(s);
                match read_response(&mut reader) {
                    Ok(r) if r.status == 200 => answered += 1,
                    _ => failed += 1,
                }
                held.push(reader);
            }
        }
        let mut peak = 0.0f64;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            peak = peak.max(self.scrape()?.map_entries("sockets"));
            if peak >= answered as f64 {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        drop(held);
        Ok(format!(
            "{} connections held, {answered} answered ({failed} failed); the daemon counted up to {peak:.0} in SOCKS",
            n
        ))
    }

    /// Phase 4: wrk with `Connection: close` for `length`: every request on a connection of its own.
    pub(crate) fn short_connection_burst(&mut self, length: Duration) -> Result<String> {
        let out = Command::new("wrk")
            .args(["-t2", "-c64", &format!("-d{}s", length.as_secs().max(1)), "-H", "Connection: close"])
            .arg(format!("http://127.0.0.1:{}/", self.gateway_port))
            .output()
            .context("failed to run wrk")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("wrk failed ({}): {text}", out.status);
        }
        // "  123456 requests in 5.00s, ..."
        let requests = text.lines().find(|l| l.contains(" requests in ")).and_then(|l| l.split_whitespace().next());
        Ok(format!(
            "{} short connections in {} s (wrk -c64, Connection: close)",
            requests.unwrap_or("?"),
            length.as_secs()
        ))
    }
}

fn gateway_toml(port: u16, upstream: u16) -> Result<String> {
    let admin = free_port()?;
    Ok(format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nworkers = 2\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [limits]\nmax_connections = 40000\n\
         [access_log]\noutput = \"off\"\n[upstreams.backend]\nservers = [\"127.0.0.1:{upstream}\"]\nkeepalive = 16\n\
         [[routes]]\nupstream = \"backend\"\n"
    ))
}

/// Raises this process's open-file limit (its children inherit it): the clients' and the
/// gateway's sockets of the connection phase.
pub(crate) fn raise_fd_limit(wanted: u64) -> Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        bail!("getrlimit(RLIMIT_NOFILE): {}", std::io::Error::last_os_error());
    }
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    if limit.rlim_max < wanted {
        // Raising the hard limit takes CAP_SYS_RESOURCE, which a container may not grant.
        bail!("RLIMIT_NOFILE's hard limit is {}, {wanted} are needed: lower --connections", limit.rlim_max);
    }
    let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max };
    // SAFETY: setrlimit reads one rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        bail!("cannot raise RLIMIT_NOFILE to {wanted}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// One keep-alive connection sending a GET every `LIGHT_LOAD_EVERY` until dropped; reconnects on
/// error, and gives up after 100 failures in a row (the gateway is gone).
struct LightLoad {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LightLoad {
    fn start(port: u16) -> LightLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let head = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
            let mut conn: Option<BufReader<TcpStream>> = None;
            let mut failures = 0;
            while !flag.load(Ordering::Relaxed) && failures < 100 {
                std::thread::sleep(LIGHT_LOAD_EVERY);
                let reader = match conn.take() {
                    Some(reader) => reader,
                    None => match TcpStream::connect(("127.0.0.1", port)) {
                        Ok(s) => {
                            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                            BufReader::new(s)
                        }
                        Err(_) => {
                            failures += 1;
                            continue;
                        }
                    },
                };
                let mut reader = reader;
                let ok = reader.get_mut().write_all(head.as_bytes()).is_ok()
                    && read_response(&mut reader).is_ok_and(|r| r.status == 200 && r.keep_alive);
                if ok {
                    failures = 0;
                    conn = Some(reader);
                } else {
                    failures += 1;
                }
            }
            flag.store(true, Ordering::Relaxed);
        });
        LightLoad { stop, thread: Some(thread) }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

impl Drop for LightLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
