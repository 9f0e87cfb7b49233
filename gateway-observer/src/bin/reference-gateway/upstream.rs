//! Upstream pools: round-robin server choice, passive health (eject after consecutive failures,
//! readmit after `fail_timeout`), pooled keep-alive connections, and the classification of
//! upstream failures into the kinds that become 502 or 504.
//!
//! Owns the outbound HTTP/1.1 clients. Knows nothing of routes, access checks or the client side.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{TimeoutConfig, UpstreamConfig};
use crate::metrics::UpstreamErrorKind;

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
}

pub struct Pool {
    servers: Vec<Server>,
    next: AtomicUsize,
    max_fails: u32,
    fail_timeout: Duration,
    client: Client<HttpConnector, ProxyBody>,
}

pub struct Upstreams {
    pools: HashMap<String, Arc<Pool>>,
    epoch: Instant,
}

impl Upstreams {
    pub fn new(config: &std::collections::BTreeMap<String, UpstreamConfig>, timeouts: &TimeoutConfig) -> Self {
        let pools = config
            .iter()
            .map(|(name, up)| {
                let mut connector = HttpConnector::new();
                connector.set_connect_timeout(Some(timeouts.connect));
                connector.set_nodelay(true);
                let client = Client::builder(TokioExecutor::new())
                    .pool_timer(TokioTimer::new())
                    .pool_idle_timeout(timeouts.upstream_idle)
                    .pool_max_idle_per_host(up.keepalive)
                    .build(connector);
                let servers = up
                    .servers
                    .iter()
                    .map(|addr| Server { addr: *addr, fails: AtomicU32::new(0), ejected_until_ms: AtomicU64::new(0) })
                    .collect();
                let pool =
                    Pool { servers, next: AtomicUsize::new(0), max_fails: up.max_fails, fail_timeout: up.fail_timeout, client };
                (name.clone(), Arc::new(pool))
            })
            .collect();
        Self { pools, epoch: Instant::now() }
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

    /// Sends `req` (its URI already absolute for server `i`) and waits for response headers
    /// at most `response_timeout`.
    pub async fn send(
        &self,
        i: usize,
        req: http::Request<ProxyBody>,
        response_timeout: Duration,
    ) -> Result<http::Response<Incoming>, ForwardError> {
        let addr = self.servers[i].addr;
        match tokio::time::timeout(response_timeout, self.client.request(req)).await {
            Err(_) => Err(ForwardError::Upstream { addr, kind: UpstreamErrorKind::ResponseTimeout }),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(classify(addr, &e)),
        }
    }
}

fn classify(addr: SocketAddr, e: &hyper_util::client::legacy::Error) -> ForwardError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut io_kind = None;
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return ForwardError::BodyTooLarge;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        source = err.source();
    }
    let kind = if e.is_connect() {
        match io_kind {
            Some(std::io::ErrorKind::ConnectionRefused) => UpstreamErrorKind::ConnectRefused,
            Some(std::io::ErrorKind::TimedOut) => UpstreamErrorKind::ConnectTimeout,
            _ => UpstreamErrorKind::Connect,
        }
    } else {
        UpstreamErrorKind::Protocol
    };
    ForwardError::Upstream { addr, kind }
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
            },
        );
        let ups = Upstreams::new(&cfg, &TimeoutConfig::default());
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
