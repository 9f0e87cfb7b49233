//! Python's single-threaded `http.server` as a gateway nobody here wrote, in another language.
#![allow(dead_code, reason = "each test file uses a different part of the support module")]

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::reference_gateway_support::{free_port, try_request};

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
Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"#;

pub struct PythonServer {
    pub child: Child,
    pub port: u16,
}

impl PythonServer {
    /// Serves on 127.0.0.1 at a free port; `/slow` sleeps `SLOW_SECONDS`, anything else answers at once.
    pub fn start() -> PythonServer {
        let port = free_port();
        let child = Command::new("python3")
            .args(["-c", SERVER, &port.to_string(), &SLOW_SECONDS.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start python3");
        let end = Instant::now() + Duration::from_secs(10);
        while try_request(port, "GET", "/", &[], b"", Duration::from_secs(1)).is_err() {
            assert!(Instant::now() < end, "python3 http.server not answering");
            thread::sleep(Duration::from_millis(50));
        }
        PythonServer { child, port }
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

