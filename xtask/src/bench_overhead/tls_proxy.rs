//! nginx terminating TLS (OpenSSL from Debian's libssl, what the observer's uprobes hook) in front
//! of the same upstream as the plain proxies: its own process, so the plain nginx's phases never
//! carry TLS hooks.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::bench_gateway::{NginxProxy, Procs, free_port};

const READY_WITHIN: Duration = Duration::from_secs(10);

/// Writes a self-signed certificate and the proxy's config into `dir`, starts nginx with
/// `workers` workers into `procs` and waits until it answers 200 over HTTPS: (pid, port).
pub(super) fn start(dir: &Path, upstream_port: u16, workers: usize, procs: &mut Procs) -> Result<(u32, u16)> {
    let (cert, key) = (dir.join("tls-proxy.crt"), dir.join("tls-proxy.key"));
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "2", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("failed to run openssl (cargo xtask setup installs it)")?;
    if !status.success() {
        bail!("openssl req could not make the TLS proxy's certificate: {status}");
    }
    let port = free_port()?;
    let listen = format!(
        "listen 127.0.0.1:{port} ssl backlog=1024;\n        ssl_certificate {};\n        ssl_certificate_key {};",
        cert.display(),
        key.display()
    );
    let proxy = NginxProxy {
        name: "tls-proxy",
        listen: &listen,
        upstream_port,
        workers,
        curl_option: "-k",
        url: &format!("https://127.0.0.1:{port}/"),
    };
    Ok((proxy.start(dir, procs, READY_WITHIN)?, port))
}
