//! nginx terminating TLS (OpenSSL from Debian's libssl, what the observer's uprobes hook) in front
//! of the same upstream as the plain proxies: its own process, so the plain nginx's phases never
//! carry TLS hooks.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::bench_gateway::{Procs, free_port, nginx_conf, proxy_http_block, spawn_nginx, wait_until_200};

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
    let conf = dir.join("tls-proxy.conf");
    std::fs::write(&conf, nginx_conf(dir, "tls-proxy", workers, &proxy_http_block(&listen, upstream_port)))?;
    let pid = spawn_nginx(procs, "TLS proxy nginx", dir, &conf)?;
    let what = format!("the TLS proxy nginx on 127.0.0.1:{port} (HTTPS)");
    wait_until_200(procs, &what, READY_WITHIN, || https_status(port))?;
    Ok((pid, port))
}

fn https_status(port: u16) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}/"))
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}
