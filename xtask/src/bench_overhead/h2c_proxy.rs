//! nginx speaking HTTP/2 in cleartext to its clients (`listen ... http2`, prior knowledge) and
//! HTTP/1.1 to the same upstream as the plain proxies: its own process, so the observer's HTTP/2
//! work (frames walked past each write's head, HPACK) shows apart from HTTP/1.1's.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::bench_gateway::{Procs, free_port, nginx_conf, proxy_http_block, spawn_nginx, wait_until_200};

const READY_WITHIN: Duration = Duration::from_secs(10);
/// Streams each h2load connection keeps open at once: nginx then writes several streams' frames
/// in one syscall, as a gateway multiplexing clients does.
pub(super) const STREAMS: u32 = 8;

/// Writes the proxy's config into `dir`, starts nginx with `workers` workers into `procs` and
/// waits until it answers 200 over h2c: (pid, port).
pub(super) fn start(dir: &Path, upstream_port: u16, workers: usize, procs: &mut Procs) -> Result<(u32, u16)> {
    let port = free_port()?;
    let listen = format!("listen 127.0.0.1:{port} http2 backlog=1024;");
    let conf = dir.join("h2c-proxy.conf");
    std::fs::write(&conf, nginx_conf(dir, "h2c-proxy", workers, &proxy_http_block(&listen, upstream_port)))?;
    let pid = spawn_nginx(procs, "h2c proxy nginx", dir, &conf)?;
    let what = format!("the h2c proxy nginx on 127.0.0.1:{port} (h2c)");
    wait_until_200(procs, &what, READY_WITHIN, || h2c_status(port))?;
    Ok((pid, port))
}

fn h2c_status(port: u16) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "--http2-prior-knowledge", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}
