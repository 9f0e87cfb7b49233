//! nginx speaking HTTP/2 in cleartext to its clients (`listen ... http2`, prior knowledge) and
//! HTTP/1.1 to the same upstream as the plain proxies: its own process, so the observer's HTTP/2
//! work (frames walked past each write's head, HPACK) shows apart from HTTP/1.1's.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::bench_gateway::{NginxProxy, Procs, free_port};

const READY_WITHIN: Duration = Duration::from_secs(10);
/// Streams each h2load connection keeps open at once: nginx then writes several streams' frames
/// in one syscall, as a gateway multiplexing clients does.
pub(super) const STREAMS: u32 = 8;

/// Writes the proxy's config into `dir`, starts nginx with `workers` workers into `procs` and
/// waits until it answers 200 over h2c: (pid, port).
pub(super) fn start(dir: &Path, upstream_port: u16, workers: usize, procs: &mut Procs) -> Result<(u32, u16)> {
    let port = free_port()?;
    let proxy = NginxProxy {
        name: "h2c-proxy",
        listen: &format!("listen 127.0.0.1:{port} http2 backlog=1024;"),
        upstream_port,
        workers,
        curl_option: "--http2-prior-knowledge",
        url: &format!("http://127.0.0.1:{port}/"),
    };
    Ok((proxy.start(dir, procs, READY_WITHIN)?, port))
}
