//! Python's single-threaded `http.server` as a gateway nobody here wrote, in another language.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::free_port;

/// Seconds the server sleeps in each /slow request.
pub const SLOW_SECONDS: f64 = 1.0;

const SERVER: &str = r#"
import http.server, sys, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow"):
            time.sleep(float(sys.argv[2]))
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.HTTPServer):
    request_queue_size = 128
Server((sys.argv[3], int(sys.argv[1])), Handler).serve_forever()
"#;

pub struct PythonServer {
    pub child: Child,
    pub port: u16,
}

impl PythonServer {
    /// Serves on 127.0.0.1 at a free port; `/slow` sleeps `SLOW_SECONDS`, anything else answers at once.
    pub fn start() -> PythonServer {
        Self::start_at(&[], "127.0.0.1", free_port())
    }

    /// The same, started through `prefix` (`ip netns exec NAME`: in a network namespace) and
    /// bound to `host:port`.
    pub fn start_at(prefix: &[&str], host: &str, port: u16) -> PythonServer {
        let command: Vec<&str> = prefix.iter().copied().chain(["python3"]).collect();
        let child = Command::new(command[0])
            .args(&command[1..])
            .args(["-c", SERVER, &port.to_string(), &SLOW_SECONDS.to_string(), host])
            .stdout(Stdio::null())
            .spawn()
            .expect("start python3");
        let end = Instant::now() + Duration::from_secs(10);
        while get(host, port, "/").is_err() {
            assert!(Instant::now() < end, "python3 http.server not answering on {host}:{port}");
            thread::sleep(Duration::from_millis(50));
        }
        PythonServer { child, port }
    }
}

/// GET `path` from `host:port` (HTTP/1.0, the server closes); the status.
pub fn get(host: &str, port: u16, path: &str) -> std::io::Result<u16> {
    use std::io::{Read as _, Write as _};
    let address = std::net::SocketAddr::new(host.parse().map_err(std::io::Error::other)?, port);
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status line"))
}

/// `clients` threads GETting `path` from `host:port` one at a time until `stop` (at most 30 s).
pub fn load_at(
    host: &str,
    port: u16,
    path: &'static str,
    clients: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (host, stop) = (host.to_owned(), stop.clone());
            thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if get(&host, port, path).is_err() {
                        thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect()
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
