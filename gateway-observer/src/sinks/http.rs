//! The daemon's HTTP listener: `/metrics` (Prometheus text), `/api/v1/alerts` and
//! `/api/v1/snapshot` (JSON), `/live` and `/ready` (ready only once every probe is attached). Handlers read the latest rendering the collector published; they
//! never wait on the collector.

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get};
use tokio::{net::TcpListener, sync::watch};

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
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/snapshot", get(snapshot))
        .with_state(published);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
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
