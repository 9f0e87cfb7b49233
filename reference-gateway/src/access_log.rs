//! The access log: one JSON object per line, written by a dedicated thread.
//!
//! Request handlers only format a line and `try_send` it, so a slow disk or a blocked stdout
//! pipe never stalls a tokio worker (that would itself look like incident 1 to the observer);
//! lines that do not fit in the buffer are counted and dropped. Records method, path (no query),
//! status, durations, upstream and request id; never header values or bodies, which carry
//! credentials.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum AccessLogError {
    #[error("cannot open access log {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("cannot start the access log thread: {0}")]
    Thread(std::io::Error),
}

#[derive(Serialize)]
pub struct Entry<'a> {
    pub request_id: &'a str,
    pub client: Option<SocketAddr>,
    pub method: &'a str,
    pub path: &'a str,
    pub protocol: &'a str,
    pub status: u16,
    pub route: Option<usize>,
    pub upstream: Option<SocketAddr>,
    pub duration_ms: f64,
    pub upstream_ms: Option<f64>,
}

#[derive(Serialize)]
struct Line<'a> {
    ts: f64,
    #[serde(flatten)]
    entry: &'a Entry<'a>,
}

pub struct AccessLog {
    tx: Option<SyncSender<String>>,
    dropped: AtomicU64,
}

impl AccessLog {
    /// `output` is `"stdout"`, `"off"` or a path to append to.
    pub fn start(output: &str) -> Result<Self, AccessLogError> {
        let sink: Box<dyn Write + Send> = match output {
            "off" => return Ok(Self { tx: None, dropped: AtomicU64::new(0) }),
            "stdout" => Box::new(std::io::stdout()),
            path => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| AccessLogError::Open { path: path.to_owned(), source })?,
            ),
        };
        let (tx, rx) = sync_channel(16 * 1024);
        std::thread::Builder::new()
            .name("gw-access-log".into())
            .spawn(move || writer(rx, sink))
            .map_err(AccessLogError::Thread)?;
        Ok(Self { tx: Some(tx), dropped: AtomicU64::new(0) })
    }

    pub fn log(&self, entry: &Entry<'_>) {
        let Some(tx) = &self.tx else { return };
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs_f64();
        let Ok(mut line) = serde_json::to_string(&Line { ts, entry }) else { return };
        line.push('\n');
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn writer(rx: Receiver<String>, sink: Box<dyn Write + Send>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, sink);
    while let Ok(line) = rx.recv() {
        let _ = out.write_all(line.as_bytes());
        // Drain what is already queued before flushing: one write(2) per burst, not per line.
        while let Ok(more) = rx.try_recv() {
            let _ = out.write_all(more.as_bytes());
        }
        let _ = out.flush();
    }
}
