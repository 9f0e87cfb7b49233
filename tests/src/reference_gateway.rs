//! The reference gateway (`reference-gateway`) as a child process, configured per test in a
//! fresh directory, killed on drop; ready once it holds both its listeners and answers /health
//! (polled with a deadline), started again on fresh ports when another process took one first.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    free_port,
    http_client::{Response, request, try_request},
    listens_on,
    redis_server::Redis,
    temp_dir,
    upstream::Upstream,
};

/// Pairs of fresh ports tried before giving up: each was free a moment before the gateway bound it.
const START_ATTEMPTS: usize = 5;

pub struct Gateway {
    pub child: Child,
    pub port: u16,
    pub admin_port: u16,
    pub dir: PathBuf,
}

impl Gateway {
    /// Starts the gateway with `[server]`/`[admin]` filled in and `extra` appended; waits for /health.
    pub fn start(extra: &str) -> Gateway {
        Self::start_with(extra, "")
    }

    /// `server_extra` goes inside `[server]` (e.g. `workers = 2`).
    pub fn start_with(extra: &str, server_extra: &str) -> Gateway {
        for _ in 0..START_ATTEMPTS {
            match Self::start_on(free_port(), free_port(), extra, server_extra) {
                Ok(gw) => return gw,
                Err(taken) => eprintln!("reference-gateway could not listen: {taken}; other ports"),
            }
        }
        panic!("reference-gateway could not listen on any of {START_ATTEMPTS} pairs of free ports");
    }

    /// One start listening on `port` and `admin_port`; Err (with the gateway's complaint) when
    /// another process holds one of them, even one that answers /health there.
    pub fn start_on(port: u16, admin_port: u16, extra: &str, server_extra: &str) -> Result<Gateway, String> {
        let dir = temp_dir("gw");
        let config = format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n{server_extra}\n[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n[access_log]\noutput = \"{}\"\n{extra}\n",
            dir.join("access.log").display()
        );
        let config_path = dir.join("gateway.toml");
        std::fs::write(&config_path, config).unwrap();
        let stderr = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let child = Command::new(crate::binary("reference-gateway"))
            .arg("--config")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start reference-gateway");
        let mut gw = Gateway { child, port, admin_port, dir };
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = gw.child.try_wait() {
                let stderr = gw.stderr();
                if stderr.contains("Address already in use") {
                    // anyhow's error and its cause, without the backtrace that may follow.
                    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).take(3).collect();
                    return Err(lines.join(" "));
                }
                panic!("gateway exited during startup ({status}): {stderr}");
            }
            // Healthy once this gateway holds both listeners and answers: a /health alone may
            // be answered by another test's gateway that took the port first, and this test
            // would then talk to that one (and to its Redis: an unknown token, 401).
            if listens_on(gw.pid(), port)
                && listens_on(gw.pid(), admin_port)
                && let Ok(r) = try_request(port, "GET", "/health", &[], b"", Duration::from_secs(1))
                && r.status == 200
            {
                return Ok(gw);
            }
            assert!(Instant::now() < end, "gateway not healthy within 15 s: {}", gw.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> Response {
        request(self.port, "GET", path, &[], b"")
    }

    pub fn metrics(&self) -> String {
        request(self.admin_port, "GET", "/metrics", &[], b"").body
    }

    /// The value of a metric line, e.g. `reference_gateway_upstream_errors_total{kind="connect_refused"}`.
    pub fn metric(&self, series: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
    }

    pub fn sigterm(&self) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill SIGTERM");
    }

    /// Threads of the gateway as (tid, name).
    pub fn threads(&self) -> Vec<(u32, String)> {
        crate::threads(self.pid())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `[server]` lines for a TLS listener on 127.0.0.1:`port` with the PEM certificate and key at
/// those paths (the plain listener stays: the harness checks /health there).
pub fn tls_listener(port: u16, certificate: &str, key: &str) -> String {
    format!("tls_listen = [\"127.0.0.1:{port}\"]\ntls_certificate = \"{certificate}\"\ntls_key = \"{key}\"\n")
}

/// Gateway config for the access-check scenarios: `/api/` protected and `/` optional, both to
/// `up`, with the Redis client in `mode` ("async" or "blocking").
pub fn access_config(redis: &Redis, up: &Upstream, mode: &str) -> String {
    format!(
        r#"
        [redis]
        url = "{}"
        timeout = "5s"
        [faults]
        redis_client = "{mode}"
        [upstreams.u]
        servers = ["{}"]
        [[routes]]
        path_prefix = "/api/"
        upstream = "u"
        access_check = "protected"
        [[routes]]
        path_prefix = "/"
        upstream = "u"
        access_check = "optional"
        "#,
        redis.url(),
        up.addr()
    )
}
