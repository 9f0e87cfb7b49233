//! Upstream pools: round-robin server choice, passive health (eject after consecutive failures,
//! readmit after `fail_timeout`), pooled keep-alive connections, and the classification of
//! upstream failures into the kinds that become 502 or 504.
//!
//! Owns the outbound HTTP/1.1 connections, plain or over TLS (`upstreams.NAME.tls`). Knows nothing of routes, access checks or the client side.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::{TimeoutConfig, UpstreamConfig};
use crate::metrics::UpstreamErrorKind;
use crate::tls::{Connector, Stream, TlsError};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("upstream {addr}: {kind:?}")]
    Upstream { addr: SocketAddr, kind: UpstreamErrorKind },
    /// The client's body went over `limits.max_body_bytes` while being streamed upstream.
    #[error("request body over the limit")]
    BodyTooLarge,
}

struct Server {
    addr: SocketAddr,
    fails: AtomicU32,
    /// Milliseconds since `Upstreams::epoch`; 0 when not ejected.
    ejected_until_ms: AtomicU64,
    /// Idle keep-alive connections, most recently used last.
    idle: Mutex<Vec<(Instant, UpConn)>>,
}

/// One upstream HTTP/1 connection: hyper's sender plus the connection state machine, which is
/// polled by whoever uses the sender (the request's own task) rather than by a task of its own.
/// That keeps a proxied exchange inside one task: no cross-task wake-ups per request.
struct UpConn {
    sender: SendRequest<ProxyBody>,
    conn: Pin<Box<Connection<TokioIo<Stream>, ProxyBody>>>,
    /// The connection future has completed (closed or failed); never poll it again.
    done: bool,
}

impl UpConn {
    /// Drives the connection; true once it has ended.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.done && self.conn.as_mut().poll(cx).is_ready() {
            self.done = true;
        }
        self.done
    }

    /// Ready for a new request (the previous exchange fully processed), or `Err` if closed.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        if self.drive(cx) {
            return Poll::Ready(Err(()));
        }
        self.sender.poll_ready(cx).map_err(|_| ())
    }
}

/// One upstream pool of keep-alive HTTP/1 connections. A connection goes back to the pool when
/// its response body has been read to the end (see `PooledBody`); no task is spawned per request
/// or per connection.
pub struct Pool {
    servers: Vec<Server>,
    next: AtomicUsize,
    max_fails: u32,
    fail_timeout: Duration,
    keepalive: usize,
    connect_timeout: Duration,
    idle_timeout: Duration,
    /// TLS to the servers, when the upstream asks for it.
    tls: Option<Connector>,
}

pub struct Upstreams {
    pools: HashMap<String, Arc<Pool>>,
    epoch: Instant,
}

impl Upstreams {
    /// Fails when an upstream's TLS cannot be set up (its CA file unreadable, say).
    pub fn new(
        config: &std::collections::BTreeMap<String, UpstreamConfig>,
        timeouts: &TimeoutConfig,
    ) -> Result<Self, TlsError> {
        let pools = config
            .iter()
            .map(|(name, up)| {
                let tls = up
                    .tls
                    .then(|| Connector::new(up.tls_ca.as_deref(), up.tls_server_name.clone(), up.tls_verify))
                    .transpose()?;
                let servers = up
                    .servers
                    .iter()
                    .map(|addr| Server {
                        addr: *addr,
                        fails: AtomicU32::new(0),
                        ejected_until_ms: AtomicU64::new(0),
                        idle: Mutex::new(Vec::new()),
                    })
                    .collect();
                let pool = Pool {
                    servers,
                    next: AtomicUsize::new(0),
                    max_fails: up.max_fails,
                    fail_timeout: up.fail_timeout,
                    keepalive: up.keepalive,
                    connect_timeout: timeouts.connect,
                    idle_timeout: timeouts.upstream_idle,
                    tls,
                };
                Ok((name.clone(), Arc::new(pool)))
            })
            .collect::<Result<_, TlsError>>()?;
        Ok(Self { pools, epoch: Instant::now() })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.get(name)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Next server in round-robin order that is not ejected. If every server is ejected, the
    /// next one anyway: trying a maybe-recovered server beats failing every request.
    pub fn pick(&self, pool: &Pool) -> usize {
        let n = pool.servers.len();
        let start = pool.next.fetch_add(1, Relaxed);
        let now = self.now_ms();
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| pool.servers[i].ejected_until_ms.load(Relaxed) <= now)
            .unwrap_or(start % n)
    }

    /// Records the outcome of a request to server `i`; true when this failure ejected it.
    pub fn report(&self, pool: &Pool, i: usize, ok: bool) -> bool {
        let s = &pool.servers[i];
        if ok {
            if s.fails.load(Relaxed) != 0 {
                s.fails.store(0, Relaxed);
            }
            return false;
        }
        let fails = s.fails.fetch_add(1, Relaxed) + 1;
        if fails >= pool.max_fails {
            s.fails.store(0, Relaxed);
            let until = self.now_ms() + u64::try_from(pool.fail_timeout.as_millis()).unwrap_or(u64::MAX / 2);
            s.ejected_until_ms.store(until, Relaxed);
            return true;
        }
        false
    }
}

impl Pool {
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.servers[i].addr
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    fn lock_idle(&self, i: usize) -> std::sync::MutexGuard<'_, Vec<(Instant, UpConn)>> {
        match self.servers[i].idle.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A pooled connection that is not known closed and not too old, if any.
    fn take_idle(&self, i: usize) -> Option<UpConn> {
        let mut idle = self.lock_idle(i);
        while let Some((since, up)) = idle.pop() {
            if !up.done && !up.sender.is_closed() && since.elapsed() < self.idle_timeout {
                return Some(up);
            }
        }
        None
    }

    fn put_idle(&self, i: usize, up: UpConn) {
        if up.done || up.sender.is_closed() {
            return;
        }
        let mut idle = self.lock_idle(i);
        if idle.len() < self.keepalive {
            idle.push((Instant::now(), up));
        }
    }

    /// A new connection to server `i`: TCP, then TLS if the upstream speaks it, both within the
    /// connect timeout.
    async fn connect(&self, i: usize) -> Result<UpConn, UpstreamErrorKind> {
        let addr = self.servers[i].addr;
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Err(_) => return Err(UpstreamErrorKind::ConnectTimeout),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(UpstreamErrorKind::ConnectRefused);
            }
            Ok(Err(_)) => return Err(UpstreamErrorKind::Connect),
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        let stream = match &self.tls {
            None => Stream::Plain(stream),
            Some(tls) => match tokio::time::timeout_at(deadline, tls.connect(addr, stream)).await {
                Err(_) => return Err(UpstreamErrorKind::ConnectTimeout),
                Ok(Err(e)) => {
                    eprintln!("reference-gateway: TLS handshake with upstream {addr} failed: {e}");
                    return Err(UpstreamErrorKind::Tls);
                }
                Ok(Ok(s)) => s,
            },
        };
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(|_| UpstreamErrorKind::Connect)?;
        Ok(UpConn { sender, conn: Box::pin(conn), done: false })
    }

    /// Sends `req` (origin-form target) to server `i` and waits for response headers at most
    /// `response_timeout`, driving the connection from this task meanwhile.
    pub async fn send(
        self: &Arc<Self>,
        i: usize,
        req: http::Request<ProxyBody>,
        response_timeout: Duration,
    ) -> Result<http::Response<PooledBody>, ForwardError> {
        let addr = self.servers[i].addr;
        let upstream = |kind| ForwardError::Upstream { addr, kind };
        let exchange = async {
            let mut req = req;
            // A pooled connection may have been closed by the upstream since it was parked; hyper
            // then hands the unsent request back and it goes out on the next idle connection or a
            // new one. If the close raced with the request (sent, then the connection ended before
            // any answer), an idempotent request without a body is sent again the same way: nginx
            // does so too (and, by default, not for POST or PATCH).
            while let Some(mut up) = self.take_idle(i) {
                if std::future::poll_fn(|cx| up.poll_ready(cx)).await.is_err() {
                    continue;
                }
                let replay = replayable(&req);
                match (exchange(&mut up, req, true).await, replay) {
                    (Ok(resp), _) => return Ok((resp, up)),
                    (Err(Retry::Unsent(unsent)), _) => req = *unsent,
                    (Err(Retry::Failed(e)), Some(copy)) if closed_before_answer(&e) => req = copy,
                    (Err(Retry::Failed(e)), _) => return Err(classify(addr, &e)),
                }
            }
            // Boxed: connecting is rare with keep-alive, and its futures (handshake included)
            // would otherwise make every request's state machine much larger.
            let mut up = Box::pin(self.connect(i)).await.map_err(upstream)?;
            if std::future::poll_fn(|cx| up.poll_ready(cx)).await.is_err() {
                return Err(upstream(UpstreamErrorKind::Protocol));
            }
            match exchange(&mut up, req, false).await {
                Ok(resp) => Ok((resp, up)),
                Err(Retry::Failed(e)) => Err(classify(addr, &e)),
                Err(Retry::Unsent(_)) => Err(upstream(UpstreamErrorKind::Protocol)),
            }
        };
        match tokio::time::timeout(response_timeout, exchange).await {
            Err(_) => Err(upstream(UpstreamErrorKind::ResponseTimeout)),
            Ok(Err(e)) => Err(e),
            Ok(Ok((resp, up))) => {
                let (parts, body) = resp.into_parts();
                let mut pooled = PooledBody { inner: body, up: Some(up), home: (Arc::clone(self), i) };
                pooled.release_if_done();
                Ok(http::Response::from_parts(parts, pooled))
            }
        }
    }
}

/// A copy of an idempotent request without a body, to send again; `None` otherwise.
fn replayable(req: &http::Request<ProxyBody>) -> Option<http::Request<ProxyBody>> {
    if !req.body().is_end_stream() || !req.method().is_idempotent() {
        return None;
    }
    let mut copy = http::Request::new(ProxyBody::default());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// The connection ended (closed or reset) before any response byte: the upstream had closed it.
fn closed_before_answer(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(io.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe);
        }
        source = err.source();
    }
    false
}

enum Retry {
    /// Not sent (the pooled connection was gone): safe to send elsewhere.
    Unsent(Box<http::Request<ProxyBody>>),
    Failed(hyper::Error),
}

/// One request/response on `up`, polling the connection alongside the response future.
async fn exchange(
    up: &mut UpConn,
    req: http::Request<ProxyBody>,
    can_retry: bool,
) -> Result<http::Response<Incoming>, Retry> {
    let UpConn { sender, conn, done } = up;
    if can_retry {
        let fut = sender.try_send_request(req);
        let mut fut = std::pin::pin!(fut);
        let res = std::future::poll_fn(|cx| {
            if !*done && conn.as_mut().poll(cx).is_ready() {
                *done = true;
            }
            fut.as_mut().poll(cx)
        })
        .await;
        res.map_err(|mut e| match e.take_message() {
            Some(unsent) => Retry::Unsent(Box::new(unsent)),
            None => Retry::Failed(e.into_error()),
        })
    } else {
        let fut = sender.send_request(req);
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            if !*done && conn.as_mut().poll(cx).is_ready() {
                *done = true;
            }
            fut.as_mut().poll(cx)
        })
        .await
        .map_err(Retry::Failed)
    }
}

/// An upstream response body that keeps driving its connection while it streams and returns the
/// connection to the pool once read to the end. Dropped early (client gone), the connection is
/// dropped with it and closed.
pub struct PooledBody {
    inner: Incoming,
    up: Option<UpConn>,
    home: (Arc<Pool>, usize),
}

impl PooledBody {
    fn release_if_done(&mut self) {
        if self.inner.is_end_stream()
            && let Some(up) = self.up.take()
        {
            self.home.0.put_idle(self.home.1, up);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(up) = &mut self.up {
            up.drive(cx);
        }
        let res = Pin::new(&mut self.inner).poll_frame(cx);
        match &res {
            Poll::Ready(None) | Poll::Ready(Some(Ok(_))) => self.release_if_done(),
            Poll::Ready(Some(Err(_))) => self.up = None,
            Poll::Pending => {}
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn classify(addr: SocketAddr, e: &hyper::Error) -> ForwardError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return ForwardError::BodyTooLarge;
        }
        source = err.source();
    }
    ForwardError::Upstream { addr, kind: UpstreamErrorKind::Protocol }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_robin_skips_ejected_until_fail_timeout() {
        let mut cfg = std::collections::BTreeMap::new();
        cfg.insert(
            "p".to_owned(),
            UpstreamConfig {
                servers: vec!["127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap()],
                max_fails: 2,
                fail_timeout: Duration::from_millis(200),
                keepalive: 1,
                tls: false,
                tls_ca: None,
                tls_server_name: None,
                tls_verify: true,
            },
        );
        let ups = Upstreams::new(&cfg, &TimeoutConfig::default()).unwrap();
        let pool = Arc::clone(ups.get("p").unwrap());
        let picks: Vec<_> = (0..4).map(|_| ups.pick(&pool)).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
        assert!(!ups.report(&pool, 1, false));
        assert!(ups.report(&pool, 1, false));
        assert!((0..4).all(|_| ups.pick(&pool) == 0));
        std::thread::sleep(Duration::from_millis(250));
        let picks: Vec<_> = (0..2).map(|_| ups.pick(&pool)).collect();
        assert!(picks.contains(&1), "{picks:?}");
    }
}
