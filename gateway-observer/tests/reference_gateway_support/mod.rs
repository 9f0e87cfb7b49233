//! Test harness for the reference-gateway integration tests: the real binary, real upstream
//! servers and a real Redis on loopback, all killed on drop. Readiness is polled with a deadline.

#![allow(dead_code, reason = "each test file uses a different part of the harness")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A fresh directory for one test's files.
pub fn temp_dir(tag: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "refgw-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn wait_until(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < end, "timed out after {deadline:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts `got` is within ±20 % of `want`.
pub fn assert_about(what: &str, got: Duration, want: Duration) {
    let lo = want.mul_f64(0.8);
    let hi = want.mul_f64(1.2);
    assert!(got >= lo && got <= hi, "{what}: took {got:?}, expected {want:?} ±20 % ({lo:?}..{hi:?})");
}

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
        let port = free_port();
        let admin_port = free_port();
        let dir = temp_dir("gw");
        let config = format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n{server_extra}\n[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n[access_log]\noutput = \"{}\"\n{extra}\n",
            dir.join("access.log").display()
        );
        let config_path = dir.join("gateway.toml");
        std::fs::write(&config_path, config).unwrap();
        let stderr = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_reference-gateway"))
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
                panic!("gateway exited during startup ({status}): {}", gw.stderr());
            }
            if let Ok(r) = try_request(port, "GET", "/health", &[], b"", Duration::from_secs(1))
                && r.status == 200
            {
                break;
            }
            assert!(Instant::now() < end, "gateway not healthy within 15 s: {}", gw.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
        gw
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
        threads(self.pid())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn threads(pid: u32) -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((tid, comm.trim().to_owned()))
        })
        .collect()
}

/// The syscall number a thread is blocked in (`/proc/PID/task/TID/syscall`), if any.
pub fn thread_syscall(pid: u32, tid: u32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    try_request(port, method, path, headers, body, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{method} {path} on port {port}: {e}"))
}

/// One request on a fresh connection with `Connection: close`, read to EOF.
pub fn try_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), timeout)?;
    s.set_read_timeout(Some(timeout))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str("Host: test.local\r\n");
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
        .ok_or_else(|| std::io::Error::other(format!("unparsable response: {:?}", String::from_utf8_lossy(&raw))))
}

pub fn parse_response(raw: &[u8]) -> Option<Response> {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Response { status, head: head.to_owned(), body: body.to_owned() })
}

/// Sends raw bytes on a new connection and reads until EOF or `timeout`;
/// returns what came back and how long until the connection closed.
pub fn raw_exchange(port: u16, bytes: &[u8], timeout: Duration) -> (String, Duration, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    let start = Instant::now();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), start.elapsed(), closed)
}

/// How a test upstream answers.
#[derive(Clone, Copy, Debug)]
pub enum Behavior {
    /// 200, body = "<name>\n" + the request head, then the request body.
    Echo,
    /// Sleeps, then echoes.
    Delay(Duration),
    /// Accepts and reads the request, never answers (incident 3's broken return path).
    BlackHole,
    /// Echoes, then closes the connection without announcing it (a keep-alive race).
    EchoThenClose,
    /// Echoes with a chunked body (one chunk, then the last-chunk marker).
    EchoChunked,
}

/// A tiny HTTP/1.1 keep-alive server on loopback, one thread per connection.
pub struct Upstream {
    pub port: u16,
    stop: Arc<AtomicBool>,
    pub requests: Arc<AtomicUsize>,
    pub connections: Arc<AtomicUsize>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Upstream {
    pub fn start(name: &str, behavior: Behavior) -> Upstream {
        Self::start_on(0, name, behavior)
    }

    pub fn start_on(port: u16, name: &str, behavior: Behavior) -> Upstream {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (s, r, c, o, name) = (stop.clone(), requests.clone(), connections.clone(), open.clone(), name.to_owned());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                c.fetch_add(1, Ordering::Relaxed);
                if let Ok(clone) = conn.try_clone() {
                    o.lock().unwrap().push(clone);
                }
                let (r, name) = (r.clone(), name.clone());
                std::thread::spawn(move || serve_upstream(conn, &name, behavior, &r));
            }
        });
        Upstream { port, stop, requests, connections, open }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn serve_upstream(conn: TcpStream, name: &str, behavior: Behavior, requests: &AtomicUsize) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" && !head.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        requests.fetch_add(1, Ordering::Relaxed);
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if lower.contains("transfer-encoding: chunked") {
            loop {
                let mut size = String::new();
                if reader.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
                let mut chunk = vec![0u8; n + 2];
                if reader.read_exact(&mut chunk).is_err() {
                    return;
                }
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(len) =
            lower.lines().find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()))
        {
            body.resize(len, 0);
            if reader.read_exact(&mut body).is_err() {
                return;
            }
        }
        match behavior {
            Behavior::BlackHole => {
                // Hold the connection open without answering until the peer gives up.
                let mut sink = [0u8; 1024];
                while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
                return;
            }
            Behavior::Delay(d) => std::thread::sleep(d),
            Behavior::Echo | Behavior::EchoThenClose | Behavior::EchoChunked => {}
        }
        let mut out = format!("{name}\n{head}").into_bytes();
        out.extend_from_slice(&body);
        let resp = if let Behavior::EchoChunked = behavior {
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                out.len()
            )
            .into_bytes();
            r.extend_from_slice(&out);
            r.extend_from_slice(b"\r\n0\r\n\r\n");
            r
        } else {
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n",
                out.len()
            )
            .into_bytes();
            r.extend_from_slice(&out);
            r
        };
        // One write: head and body in two would meet Nagle and delayed ACKs (40 ms a response).
        if writer.write_all(&resp).is_err() {
            return;
        }
        if let Behavior::EchoThenClose = behavior {
            let _ = writer.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// A real redis-server on a free loopback port; `None` (with the reason printed) when the
/// binary is missing outside CI. In CI (CI=true) a missing redis-server fails the test.
pub struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Option<Redis> {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("redis-server").is_file()));
        if !found {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("redis-server not found on PATH and CI=true: install it (apt-get install redis-server)");
            }
            eprintln!(
                "SKIPPED: redis-server not found on PATH (apt-get install redis-server); this test needs a real Redis"
            );
            return None;
        }
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let redis = Redis { child, port };
        wait_until("redis-server PING", Duration::from_secs(10), || {
            redis.try_conn().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok()).is_some()
        });
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_conn(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url()).ok()?.get_connection_with_timeout(Duration::from_secs(1)).ok()
    }

    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to test redis")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
