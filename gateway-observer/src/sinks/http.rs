//! The daemon's HTTP listener: `/metrics` (Prometheus text), `/api/v1/alerts` and
//! `/api/v1/snapshot` (JSON), `/live` and `/ready` (ready only once every probe is attached).
//! Handlers read the latest rendering the collector published; the metrics and the snapshot
//! are rendered when asked for, at most once per tick (`publication`).
//!
//! The listener is bounded so that nobody who can connect can take the daemon's descriptors or
//! memory: at most `ServeLimits::connections` at once (more are closed at accept), and a
//! connection that does not send a whole request head within `header_timeout` (an idle
//! keep-alive one included) is closed.
//!
//! Only `/metrics` and the health checks answer anyone who can connect. The API's evidence
//! (threads, paths, peers) is for the host: it answers loopback clients, and remote ones only
//! with the bearer token of `api_token_file` when one is configured.

use std::{
    net::SocketAddr,
    sync::Arc,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use axum::{
    Extension, Router,
    extract::{Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore};

use super::publication::{METRICS, SNAPSHOT};
pub use super::publication::{Published, Shared};

/// Bounds on the listener's connections.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections served at once: a Prometheus or two, a few `top`s and curls.
    pub connections: usize,
    /// Time a connection has to send a whole request head, also between keep-alive requests
    /// (`top` polls every second; Prometheus scrapes every 15 to 60 s and reconnects).
    pub header_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self { connections: 64, header_timeout: Duration::from_secs(10) }
    }
}

/// Who may read the API besides loopback clients.
#[derive(Debug, Clone, Default)]
pub struct ApiAccess {
    /// The bearer token remote readers must send; none: loopback clients only.
    pub token: Option<Arc<str>>,
}

impl ApiAccess {
    /// The token in `path` (surrounding whitespace ignored, so a file ending in a newline works).
    pub fn from_token_file(path: &std::path::Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read api_token_file {}: {e}", path.display()))?;
        let token = text.trim();
        if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "api_token_file {}: the token must be at least 16 characters, one line without spaces",
                path.display()
            ));
        }
        Ok(Self { token: Some(Arc::from(token)) })
    }

    fn allows(&self, peer: SocketAddr, headers: &HeaderMap) -> bool {
        if peer.ip().is_loopback() || peer.ip().to_canonical().is_loopback() {
            return true;
        }
        let Some(token) = &self.token else { return false };
        let sent = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        sent.and_then(|v| v.strip_prefix("Bearer ")).is_some_and(|sent| same_secret(sent.as_bytes(), token.as_bytes()))
    }
}

/// Compares without an early exit, so the time taken says nothing of how much of a guess matched.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The client's address, for the API's access check.
#[derive(Debug, Clone, Copy)]
struct Peer(SocketAddr);

async fn api_guard(
    State(access): State<ApiAccess>,
    Extension(Peer(peer)): Extension<Peer>,
    request: Request,
    next: Next,
) -> Response {
    if access.allows(peer, request.headers()) {
        next.run(request).await
    } else {
        let why = if access.token.is_some() {
            "the API answers loopback clients, and others with the bearer token of api_token_file\n"
        } else {
            "the API answers loopback clients only; set api_token_file to let others read it\n"
        };
        (StatusCode::FORBIDDEN, why).into_response()
    }
}

/// Connections closed at accept because `ServeLimits::connections` were open.
pub static REFUSED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

pub async fn serve(
    listener: TcpListener,
    published: Shared,
    limits: ServeLimits,
    access: ApiAccess,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let api = Router::new()
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/snapshot", get(snapshot))
        .route_layer(middleware::from_fn_with_state(access, api_guard));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .merge(api)
        .with_state(published);
    let slots = Arc::new(Semaphore::new(limits.connections));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors or a connection reset before accept: not the listener's end.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            REFUSED_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone().layer(Extension(Peer(peer))));
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            // A client gone or timed out ends only its own connection.
            let _ = connection.await;
            drop(slot);
        });
    }
}

async fn metrics(State(shared): State<Shared>) -> impl IntoResponse {
    let text = shared.fresh(METRICS).await.metrics;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text.as_str().to_owned())
}

async fn alerts(State(shared): State<Shared>) -> impl IntoResponse {
    let json = shared.latest().alerts_json;
    ([(header::CONTENT_TYPE, "application/json")], json.as_str().to_owned())
}

async fn snapshot(State(shared): State<Shared>) -> impl IntoResponse {
    let json = shared.fresh(SNAPSHOT).await.snapshot_json;
    ([(header::CONTENT_TYPE, "application/json")], json.as_str().to_owned())
}

async fn ready(State(shared): State<Shared>) -> impl IntoResponse {
    if shared.latest().ready {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "probes not attached yet\n")
    }
}

pub fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9464))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::watch;

    use super::*;

    async fn start(limits: ServeLimits) -> (SocketAddr, watch::Sender<bool>) {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let published = Published { metrics: Arc::new("up 1\n".to_owned()), ..Published::default() };
        let (_publish, receiver) = watch::channel(published);
        let receiver = Shared { published: receiver, renders: Arc::default() };
        let (stop, mut stopped) = watch::channel(false);
        tokio::spawn(async move {
            let _keep = _publish;
            serve(listener, receiver, limits, ApiAccess::default(), async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
        });
        (addr, stop)
    }

    /// Reads until the server closes the connection, or `within` passes: Some(time to close).
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(within.saturating_sub(start.elapsed()), stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
                Ok(Ok(_)) => {}
            }
        }
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut reply = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply)).await.unwrap().unwrap();
        reply
    }

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_api_answers_loopback_and_remote_readers_with_the_token() {
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let local6: SocketAddr = "[::1]:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        let remote: SocketAddr = "10.1.2.3:5000".parse().unwrap();
        let open = ApiAccess::default();
        assert!(open.allows(local, &headers(None)) && open.allows(local6, &headers(None)));
        assert!(open.allows(mapped, &headers(None)));
        assert!(!open.allows(remote, &headers(None)), "no token configured: loopback only");
        assert!(!open.allows(remote, &headers(Some("Bearer "))), "an empty token is no token");
        let with_token = ApiAccess { token: Some(Arc::from("s3cret-token")) };
        assert!(with_token.allows(remote, &headers(Some("Bearer s3cret-token"))));
        assert!(!with_token.allows(remote, &headers(Some("Bearer s3cret-tokeN"))));
        assert!(!with_token.allows(remote, &headers(Some("Bearer s3cret"))));
        assert!(!with_token.allows(remote, &headers(Some("s3cret-token"))), "the scheme is required");
        assert!(!with_token.allows(remote, &headers(None)));
        assert!(with_token.allows(local, &headers(None)), "the host needs no token");
    }

    #[test]
    fn a_token_file_must_hold_a_real_token() {
        let dir = std::env::temp_dir().join(format!("go-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let good = ApiAccess::from_token_file(&file("good", "0123456789abcdef-token\n")).unwrap();
        assert_eq!(good.token.as_deref(), Some("0123456789abcdef-token"));
        for (name, text) in [("empty", ""), ("short", "abc\n"), ("spaces", "0123456789 abcdef ghij")] {
            let err = ApiAccess::from_token_file(&file(name, text)).unwrap_err();
            assert!(err.contains("at least 16 characters"), "{name}: {err}");
        }
        let err = ApiAccess::from_token_file(&dir.join("missing")).unwrap_err();
        assert!(err.starts_with("cannot read api_token_file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
        let limits = ServeLimits { connections: 8, header_timeout: Duration::from_millis(300) };
        let (addr, _stop) = start(limits).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let closed = closed_within(&mut idle, Duration::from_secs(5)).await.expect("the idle connection stays open");
        assert!(closed >= Duration::from_millis(250) && closed < Duration::from_secs(3), "closed after {closed:?}");
        // So is one idle after a keep-alive request.
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET /live HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let closed =
            closed_within(&mut kept, Duration::from_secs(5)).await.expect("the kept-alive connection stays open");
        assert!(closed < Duration::from_secs(3), "closed after {closed:?}");
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_and_the_listener_recovers() {
        let limits = ServeLimits { connections: 4, header_timeout: Duration::from_millis(500) };
        let (addr, _stop) = start(limits).await;
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused_before = REFUSED_CONNECTIONS.load(Ordering::Relaxed);
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let closed = closed_within(&mut extra, Duration::from_millis(400)).await;
        assert!(closed.is_some(), "a fifth connection is closed at once, not held");
        assert!(REFUSED_CONNECTIONS.load(Ordering::Relaxed) > refused_before, "and counted");
        // Once the held ones time out, /metrics answers again.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let reply = get(addr, "/metrics").await;
        assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with("up 1\n"), "{reply}");
        let reply = get(addr, "/api/v1/alerts").await;
        assert!(reply.starts_with("HTTP/1.1 200"), "a loopback client reads the API: {reply}");
        drop(held);
    }
}
