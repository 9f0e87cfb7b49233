//! What the TLS tests share: a fresh self-signed certificate, a server process ended with the
//! test, and waiting for targets to be hooked.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    time::Duration,
};

use crate::{observer::Observer, temp_dir, wait_until, wrk::metric_sum};

/// A self-signed certificate and its key for 127.0.0.1, made by the `openssl` CLI in `dir`.
pub fn self_signed(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (Debian's openssl package)");
    assert!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
    (cert.display().to_string(), key.display().to_string())
}

/// A temp dir holding a fresh self-signed certificate and key: (dir, cert, key).
pub fn certified_dir(tag: &str) -> (PathBuf, String, String) {
    let dir = temp_dir(tag);
    let (cert, key) = self_signed(&dir);
    (dir, cert, key)
}

/// Waits until `processes` targets have their TLS library hooked.
pub fn wait_hooked(observer: &Observer, processes: f64) {
    wait_until(&format!("{processes} processes with their TLS library hooked"), Duration::from_secs(10), || {
        let metrics = observer.get("/metrics").map(|(_, body)| body).unwrap_or_default();
        metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[]) >= processes
    });
}

/// A child process killed and reaped when the test ends, passed or failed.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something listens on 127.0.0.1:`port`.
pub fn wait_listening(what: &str, port: u16) {
    wait_until(&format!("{what} to listen"), Duration::from_secs(15), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}
