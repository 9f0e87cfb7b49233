//! Test upstreams: tiny HTTP/1.1 keep-alive servers on loopback with a chosen behaviour.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

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
