//! The demo's wire clients, std only: one-shot HTTP/1.1 requests (admin and observer APIs), a
//! closed-loop keep-alive load generator, and just enough RESP to PING, SET and `CLIENT PAUSE`
//! Redis. Every read has a timeout and every loop a stop flag plus a count bound.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

const MAX_BODY: usize = 16 << 20;

pub(crate) struct Response {
    pub status: u16,
    pub body: String,
    pub(crate) keep_alive: bool,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads one response: Content-Length, chunked, or close-delimited bodies.
pub(crate) fn read_response(r: &mut impl BufRead) -> io::Result<Response> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before a response"));
    }
    let status: u16 =
        line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| invalid("bad status line"))?;
    let (mut len, mut chunked, mut close) = (None, false, line.starts_with("HTTP/1.0"));
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed in the headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = Some(v.parse::<usize>().map_err(|_| invalid("bad content-length"))?),
                "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
                "connection" => close = v.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let hex = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(hex.trim(), 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers up to the empty line.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err(invalid("body too large"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            line.clear();
            r.read_line(&mut line)?;
        }
    } else if let Some(n) = len {
        if n > MAX_BODY {
            return Err(invalid("body too large"));
        }
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else if !(status < 200 || status == 204 || status == 304) {
        r.take(MAX_BODY as u64).read_to_end(&mut body)?;
        close = true;
    }
    Ok(Response { status, body: String::from_utf8_lossy(&body).into_owned(), keep_alive: !close })
}

/// One request on a fresh connection (`Connection: close`), all of it within `timeout`-bounded
/// reads and writes. It carries the demo's bearer token, which only the gateway looks at.
pub(crate) fn request(port: u16, method: &str, path: &str, body: &str, timeout: Duration) -> Result<Response> {
    let what = || format!("{method} http://127.0.0.1:{port}{path}");
    let s = TcpStream::connect_timeout(&loopback(port), timeout).with_context(what)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer tok\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    (&s).write_all(head.as_bytes()).with_context(what)?;
    read_response(&mut BufReader::new(s)).with_context(what)
}

/// Polls `GET path` until it answers 200, failing after `within` or when `alive` fails (a child
/// that exited) or `interrupted` says so.
pub(crate) fn wait_http_200(
    name: &str,
    port: u16,
    path: &str,
    within: Duration,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        alive()?;
        if request(port, "GET", path, "", Duration::from_secs(1)).is_ok_and(|r| r.status == 200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name}: GET http://127.0.0.1:{port}{path} did not answer 200 within {} s", within.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- Redis (RESP) ----

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

struct Redis(BufReader<TcpStream>);

impl Redis {
    fn connect(port: u16, timeout: Duration) -> io::Result<Self> {
        let s = TcpStream::connect_timeout(&loopback(port), timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Self(BufReader::new(s)))
    }

    /// Sends a command and returns the first reply line (enough for +OK, +PONG, -ERR).
    fn call(&mut self, args: &[&str]) -> io::Result<String> {
        self.0.get_mut().write_all(&resp(args))?;
        let mut line = String::new();
        if self.0.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "redis closed the connection"));
        }
        Ok(line.trim_end().to_owned())
    }
}

/// One command on a fresh connection; an error reply is an error.
pub(super) fn redis_call(port: u16, args: &[&str]) -> Result<String> {
    let what = || format!("redis 127.0.0.1:{port}: {}", args.first().copied().unwrap_or_default());
    let reply = Redis::connect(port, Duration::from_secs(2)).and_then(|mut r| r.call(args)).with_context(what)?;
    if reply.starts_with('-') {
        bail!("{}: {reply}", what());
    }
    Ok(reply)
}

/// Makes Redis slow the way incident 1's Redis was: `CLIENT PAUSE 60 ALL` every 80 ms, so each
/// command waits up to 60 ms. Stops (and unpauses) on drop.
pub(super) struct RedisPauser {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
    port: u16,
}

impl RedisPauser {
    pub fn start(port: u16, max_duration: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + max_duration;
            let max_pauses = max_duration.as_millis() as u64 / 80 + 1;
            let mut pauses = 0;
            let mut conn = None;
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline && pauses < max_pauses {
                if conn.is_none() {
                    conn = Redis::connect(port, Duration::from_secs(1)).ok();
                }
                if let Some(c) = &mut conn {
                    match c.call(&["CLIENT", "PAUSE", "60", "ALL"]) {
                        Ok(reply) if reply == "+OK" => pauses += 1,
                        _ => conn = None,
                    }
                }
                std::thread::sleep(Duration::from_millis(80));
            }
            pauses
        });
        Self { stop, thread: Some(thread), port }
    }

    /// Stops pausing; returns how many pauses were sent.
    pub fn stop(mut self) -> u64 {
        self.finish()
    }

    fn finish(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let pauses = self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0);
        let _ = redis_call(self.port, &["CLIENT", "UNPAUSE"]);
        pauses
    }
}

impl Drop for RedisPauser {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish();
        }
    }
}

// ---- load ----

#[derive(Default)]
pub(super) struct LoadStats {
    pub by_status: BTreeMap<u16, u64>,
    pub errors: u64,
    pub elapsed: Duration,
}

impl LoadStats {
    pub fn total(&self) -> u64 {
        self.by_status.values().sum()
    }

    /// "12345 requests (617/s): 200 x12000, 503 x345; 2 errors".
    pub fn describe(&self) -> String {
        let secs = self.elapsed.as_secs_f64().max(1e-3);
        let statuses: Vec<String> = self.by_status.iter().map(|(s, n)| format!("{s} x{n}")).collect();
        let mut out = format!("{} responses ({:.0}/s)", self.total(), self.total() as f64 / secs);
        if !statuses.is_empty() {
            out += &format!(": {}", statuses.join(", "));
        }
        if self.errors > 0 {
            out += &format!("; {} connection errors/timeouts", self.errors);
        }
        out
    }
}

/// A closed loop: `connections` threads, each sending GETs back to back on a keep-alive
/// connection. Stopping shuts every socket down, so a thread blocked on a slow response returns at
/// once.
pub(super) struct Load {
    stop: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<Option<TcpStream>>>>,
    threads: Vec<JoinHandle<LoadStats>>,
    started: Instant,
}

/// Per connection: a safety bound on top of the stop flag.
const MAX_REQUESTS_PER_CONNECTION: u64 = 5_000_000;

impl Load {
    pub fn start(port: u16, path: &str, connections: usize, max_duration: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new((0..connections).map(|_| None).collect::<Vec<_>>()));
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer tok\r\n\r\n");
        let threads = (0..connections)
            .map(|i| {
                let (stop, sockets, request) = (Arc::clone(&stop), Arc::clone(&sockets), request.clone());
                std::thread::spawn(move || connection_loop(i, port, &request, &stop, &sockets, max_duration))
            })
            .collect();
        Self { stop, sockets, threads, started: Instant::now() }
    }

    pub fn stop(mut self) -> LoadStats {
        self.finish()
    }

    fn finish(&mut self) -> LoadStats {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(sockets) = self.sockets.lock() {
            for s in sockets.iter().flatten() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let mut total = LoadStats { elapsed: self.started.elapsed(), ..LoadStats::default() };
        for t in self.threads.drain(..) {
            if let Ok(s) = t.join() {
                for (status, n) in s.by_status {
                    *total.by_status.entry(status).or_default() += n;
                }
                total.errors += s.errors;
            }
        }
        total
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.finish();
        }
    }
}

fn connection_loop(
    slot: usize,
    port: u16,
    request: &str,
    stop: &AtomicBool,
    sockets: &Mutex<Vec<Option<TcpStream>>>,
    max_duration: Duration,
) -> LoadStats {
    let mut stats = LoadStats::default();
    let deadline = Instant::now() + max_duration;
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && sent < MAX_REQUESTS_PER_CONNECTION {
        if conn.is_none() {
            match TcpStream::connect_timeout(&loopback(port), Duration::from_secs(1)) {
                Ok(s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                    if let (Ok(mut v), Ok(clone)) = (sockets.lock(), s.try_clone()) {
                        v[slot] = Some(clone);
                    }
                    // The stop may have come between the check above and the registration.
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    conn = Some(BufReader::new(s));
                }
                Err(_) => {
                    stats.errors += 1;
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
        }
        let Some(c) = &mut conn else { continue };
        sent += 1;
        let result = c.get_mut().write_all(request.as_bytes()).and_then(|()| read_response(c));
        match result {
            Ok(r) => {
                *stats.by_status.entry(r.status).or_default() += 1;
                if !r.keep_alive {
                    conn = None;
                }
                if r.status >= 500 {
                    // Rejections come back at once; don't turn them into a busy loop.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Err(_) => {
                if !stop.load(Ordering::Relaxed) {
                    stats.errors += 1;
                }
                conn = None;
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_length_chunked_and_close_delimited_bodies() {
        let mut r = io::Cursor::new(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\nHTTP/1.1 503 X\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n".to_vec());
        let a = read_response(&mut r).unwrap();
        assert_eq!((a.status, a.body.as_str(), a.keep_alive), (200, "ok\n", true));
        let b = read_response(&mut r).unwrap();
        assert_eq!((b.status, b.body.as_str(), b.keep_alive), (503, "abc", true));
        let mut r = io::Cursor::new(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"a\":1}".to_vec());
        let c = read_response(&mut r).unwrap();
        assert_eq!((c.body.as_str(), c.keep_alive), ("{\"a\":1}", false));
    }

    #[test]
    fn encodes_resp_arrays() {
        assert_eq!(
            resp(&["CLIENT", "PAUSE", "60", "ALL"]),
            b"*4\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$2\r\n60\r\n$3\r\nALL\r\n"
        );
    }
}
