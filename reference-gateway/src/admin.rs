//! The admin listener (loopback only): `GET /metrics`, `GET /health`, and the fault switches at
//! `GET /admin/faults` and `PUT /admin/faults` (a JSON patch of `FaultState` fields).
//!
//! Runs on the same runtime as the proxy, on purpose: when the workers are blocked the admin
//! endpoint is as slow as everything else, as `/actuator` was in incident 1.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::App;
use crate::faults::FaultPatch;
use crate::responses::{json, text};
use crate::upstream::ProxyBody;

pub async fn serve(app: Arc<App>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            r = listener.accept() => r,
        };
        let Ok((stream, _peer)) = accepted else { continue };
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let app = Arc::clone(&app);
                async move { Ok::<_, Infallible>(handle(&app, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(app: &App, req: Request<Incoming>) -> Response<ProxyBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => text(StatusCode::OK, "ok", false),
        (&Method::GET, "/metrics") => {
            let mut resp = text(StatusCode::OK, "", false);
            *resp.body_mut() = crate::responses::full(app.render_metrics());
            resp.headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; version=0.0.4"));
            resp
        }
        (&Method::GET, "/admin/faults") => faults_json(app),
        (&Method::PUT, "/admin/faults") => {
            let body: Bytes = match Limited::new(req.into_body(), 64 * 1024).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return text(StatusCode::BAD_REQUEST, "400 Bad Request: unreadable body", false),
            };
            let patch: FaultPatch = match serde_json::from_slice(&body) {
                Ok(p) => p,
                Err(e) => return text(StatusCode::BAD_REQUEST, &format!("400 Bad Request: {e}"), false),
            };
            match app.faults.apply(patch) {
                Ok(_) => {
                    eprintln!(
                        "reference-gateway: faults changed: {}",
                        serde_json::to_string(&*app.faults.snapshot()).unwrap_or_default()
                    );
                    faults_json(app)
                }
                Err(e) => text(StatusCode::BAD_REQUEST, &format!("400 Bad Request: {e}"), false),
            }
        }
        (_, "/admin/faults") => text(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed: use GET or PUT", false),
        _ => text(StatusCode::NOT_FOUND, "404 Not Found", false),
    }
}

fn faults_json(app: &App) -> Response<ProxyBody> {
    match serde_json::to_string(&*app.faults.snapshot()) {
        Ok(s) => json(StatusCode::OK, s),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("500 Internal Server Error: {e}"), false),
    }
}
