//! The client socket (plain or TLS: the bytes here are plaintext) as hyper sees it, plus two things hyper does not do: it stamps the time of
//! the last byte in either direction (for the idle keep-alive timeout) and feeds read bytes to
//! the framing scanner (for the CL+TE rejection).
//!
//! Owns nothing but the socket; the connection task reads the shared `ConnState`.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::framing::Scanner;
use crate::tls::Stream;

/// Per-connection facts shared between the socket wrapper, the service and the connection task.
pub struct ConnState {
    epoch: Instant,
    last_activity_ms: AtomicU64,
    /// Milliseconds since `epoch` + 1 when the current request head began arriving; 0 if none.
    head_started_ms: AtomicU64,
    /// Requests being handled on this connection (the idle timer waits while any is).
    pub in_flight: AtomicUsize,
    /// Requests started on this connection, 1-based index of the current one.
    pub requests: AtomicU64,
    scanner: Mutex<Scanner>,
    /// The client connected through a TLS listener (`X-Forwarded-Proto: https`).
    pub tls: bool,
}

impl ConnState {
    pub fn new(tls: bool) -> Self {
        Self {
            tls,
            epoch: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            scanner: Mutex::new(Scanner::default()),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn touch(&self) {
        self.last_activity_ms.store(self.now_ms(), Relaxed);
    }

    fn feed(&self, bytes: &[u8]) {
        let mut scanner = match self.scanner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        scanner.feed(bytes);
        if !scanner.head_in_progress() {
            self.head_started_ms.store(0, Relaxed);
        } else if self.head_started_ms.load(Relaxed) == 0 {
            self.head_started_ms.store(self.now_ms() + 1, Relaxed);
        }
    }

    /// When the request head now arriving started, if one is partly read.
    pub fn head_started(&self) -> Option<Instant> {
        match self.head_started_ms.load(Relaxed) {
            0 => None,
            ms => Some(self.epoch + std::time::Duration::from_millis(ms - 1)),
        }
    }

    /// When the last byte moved.
    pub fn last_activity(&self) -> Instant {
        self.epoch + std::time::Duration::from_millis(self.last_activity_ms.load(Relaxed))
    }

    /// True when request number `index` (1-based) on this connection has ambiguous framing.
    pub fn is_smuggling_attempt(&self, index: u64) -> bool {
        let scanner = match self.scanner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        scanner.bad_request() == Some(index)
    }
}

pub struct ConnIo {
    stream: Stream,
    state: Arc<ConnState>,
}

impl ConnIo {
    pub fn new(stream: Stream, state: Arc<ConnState>) -> Self {
        Self { stream, state }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                self.state.touch();
                self.state.feed(new);
            }
        }
        res
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let res = Pin::new(&mut self.stream).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = res
            && n > 0
        {
            self.state.touch();
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let res = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = res
            && n > 0
        {
            self.state.touch();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
