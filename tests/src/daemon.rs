//! The real `gateway-observer` binary as a child process, stopped with SIGTERM on drop.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    time::Duration,
};

use crate::{free_port, wait_for};

/// Path of the daemon binary: $GATEWAY_OBSERVER_BIN, else the workspace's target/debug build
/// (`cargo xtask test` builds it before running the tests).
pub fn observer_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("GATEWAY_OBSERVER_BIN") {
        return path.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let bin = target.join("debug/gateway-observer");
    assert!(bin.exists(), "{} not built: run `cargo xtask test` (or cargo build -p gateway-observer)", bin.display());
    bin
}

pub struct Daemon {
    child: Option<Child>,
    pub port: u16,
}

impl Daemon {
    /// Starts `gateway-observer run` with `args` and waits until /ready answers 200.
    pub fn start(args: &[&str]) -> Self {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new(observer_bin())
            .arg("run")
            .args(["--listen", &listen, "--interval", "200ms"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn gateway-observer");
        let mut daemon = Self { child: Some(child), port };
        let ready = wait_for(Duration::from_secs(30), || {
            if let Some(status) = daemon.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("gateway-observer exited before ready: {status}");
            }
            (http_get(port, "/ready").0 == 200).then_some(())
        });
        assert!(ready.is_some(), "gateway-observer not ready within 30 s");
        daemon
    }

    pub fn metrics(&self) -> String {
        let (status, body) = http_get(self.port, "/metrics");
        assert_eq!(status, 200, "GET /metrics: {body}");
        body
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGTERM, then the exit status (killed after 10 s).
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill with a pid we own and a valid signal.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_for(Duration::from_secs(10), || child.try_wait().ok().flatten());
        status.unwrap_or_else(|| {
            let _ = child.kill();
            child.wait().expect("wait after kill")
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}

/// A minimal HTTP/1.0 GET on loopback: (status, body). Status 0 when nothing answers.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return (0, String::new()) };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}
