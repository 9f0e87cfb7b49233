//! The daemon's HTTP listener: `/metrics` (Prometheus text), `/api/v1/alerts` and
//! `/api/v1/snapshot` (JSON), `/live` and `/ready` (ready only once every probe is attached).
//! Handlers read the latest rendering the collector published; they never wait on the collector.
//!
//! The listener is bounded so that nobody who can connect can take the daemon's descriptors or
//! memory: at most `ServeLimits::connections` at once (more are closed at accept), and a
//! connection that does not send a whole request head within `header_timeout` (an idle
//! keep-alive one included) is closed.

use std::{
    net::SocketAddr,
    sync::Arc,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use axum::{Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore, sync::watch};

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

/// Connections closed at accept because `ServeLimits::connections` were open.
pub static REFUSED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// What the collector publishes after each tick.
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub metrics: Arc<String>,
    pub alerts_json: Arc<String>,
    pub snapshot_json: Arc<String>,
    pub ready: bool,
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

pub async fn serve(
    listener: TcpListener,
    published: watch::Receiver<Published>,
    limits: ServeLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/snapshot", get(snapshot))
        .with_state(published);
    let slots = Arc::new(Semaphore::new(limits.connections));
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
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
        let service = TowerToHyperService::new(app.clone());
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

async fn metrics(State(published): State<watch::Receiver<Published>>) -> impl IntoResponse {
    let text = published.borrow().metrics.clone();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text.as_str().to_owned())
}

async fn alerts(State(published): State<watch::Receiver<Published>>) -> impl IntoResponse {
    let json = published.borrow().alerts_json.clone();
    ([(header::CONTENT_TYPE, "application/json")], json.as_str().to_owned())
}

async fn snapshot(State(published): State<watch::Receiver<Published>>) -> impl IntoResponse {
    let json = published.borrow().snapshot_json.clone();
    ([(header::CONTENT_TYPE, "application/json")], json.as_str().to_owned())
}

async fn ready(State(published): State<watch::Receiver<Published>>) -> impl IntoResponse {
    if published.borrow().ready {
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

    use super::*;

    async fn start(limits: ServeLimits) -> (SocketAddr, watch::Sender<bool>) {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let published = Published { metrics: Arc::new("up 1\n".to_owned()), ..Published::default() };
        let (_publish, receiver) = watch::channel(published);
        let (stop, mut stopped) = watch::channel(false);
        tokio::spawn(async move {
            let _keep = _publish;
            serve(listener, receiver, limits, async move {
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

    async fn get_metrics(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut reply = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply)).await.unwrap().unwrap();
        reply
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
        let reply = get_metrics(addr).await;
        assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with("up 1\n"), "{reply}");
        drop(held);
    }
}
