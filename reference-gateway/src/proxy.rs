//! The request pipeline of the client listeners: health, framing and size checks, routing,
//! the access check, then the route's handler (forward to an upstream pool, or the rpc handler),
//! and finally the access log line and metrics.
//!
//! Every request ends in a response with an `X-Request-Id`; upstream failures become 502
//! (refused, reset, bad response) or 504 (connect or response timeout) with a body that says so.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::{Body, Incoming};
use tokio::sync::oneshot;

use crate::access_check::{USER_ID_HEADER, USER_NAME_HEADER, Verdict};
use crate::access_log::Entry;
use crate::app::App;
use crate::config::{AccessCheckMode, HandlerKind, RedisClientMode};
use crate::conn_io::ConnState;
use crate::faults::FaultState;
use crate::headers::{self, X_REQUEST_ID};
use crate::metrics::{AccessResult, UpstreamErrorKind};
use crate::responses::{json, text};
use crate::routes::Route;
use crate::upstream::{BoxError, ForwardError, ProxyBody};

/// What the access log needs to know besides the response.
#[derive(Default)]
struct Outcome {
    route: Option<usize>,
    upstream: Option<SocketAddr>,
    upstream_time: Option<Duration>,
}

/// Decrements the in-flight gauges even when hyper drops the request (client went away).
struct InFlight<'a> {
    app: &'a App,
    conn: &'a ConnState,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.app.metrics.request_done();
        self.conn.in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub async fn handle(
    app: Arc<App>,
    conn: Arc<ConnState>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let start = Instant::now();
    app.metrics.request_started();
    conn.in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let _guard = InFlight { app: &app, conn: &conn };
    let index = conn.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;

    let request_id = headers::request_id(req.headers());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let version = req.version();
    let mut outcome = Outcome::default();

    let mut resp = if req.version() <= Version::HTTP_11 && conn.is_smuggling_attempt(index) {
        text(
            StatusCode::BAD_REQUEST,
            "400 Bad Request: ambiguous request framing (Content-Length with Transfer-Encoding, or conflicting Content-Length)",
            true,
        )
    } else {
        dispatch(&app, Client { addr: peer, tls: conn.tls }, &request_id, req, &mut outcome).await
    };
    resp.headers_mut().insert(X_REQUEST_ID, request_id.clone());

    let took = start.elapsed();
    let status = resp.status().as_u16();
    app.metrics.request_finished(status, took);
    app.log.log(&Entry {
        request_id: request_id.to_str().unwrap_or("-"),
        client: Some(peer),
        method: method.as_str(),
        path: &path,
        protocol: protocol(version),
        status,
        route: outcome.route,
        upstream: outcome.upstream,
        duration_ms: took.as_secs_f64() * 1e3,
        upstream_ms: outcome.upstream_time.map(|d| d.as_secs_f64() * 1e3),
    });
    resp
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2",
        _ => "other",
    }
}

/// Who sent a request, as the upstream is told (`X-Forwarded-For`, `X-Forwarded-Proto`).
#[derive(Clone, Copy)]
struct Client {
    addr: SocketAddr,
    /// Through a TLS listener.
    tls: bool,
}

async fn dispatch(
    app: &App,
    client: Client,
    request_id: &HeaderValue,
    mut req: Request<Incoming>,
    outcome: &mut Outcome,
) -> Response<ProxyBody> {
    if req.uri().path() == "/health" {
        // Liveness answered by the gateway itself: if this is slow, the runtime is.
        return text(StatusCode::OK, "ok", false);
    }
    let max_body = app.config.limits.max_body_bytes;
    if req.body().size_hint().exact().is_some_and(|n| n > max_body) {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("413 Payload Too Large: body over {max_body} bytes"),
            true,
        );
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    let Some(route) = app.routes.find(host, req.uri().path()) else {
        return text(StatusCode::NOT_FOUND, "404 Not Found: no route for this host and path", false);
    };
    outcome.route = Some(route.index);
    let faults = app.faults.snapshot();

    // Only the filter may set user headers; whatever the client sent is dropped.
    req.headers_mut().remove(USER_ID_HEADER);
    req.headers_mut().remove(USER_NAME_HEADER);
    if route.access_check != AccessCheckMode::Off
        // Boxed: the Redis futures are large and would otherwise be inlined (and memmoved) into
        // every request's state machine, also on routes without the check.
        && let Some(denied) = Box::pin(access_check(app, route, &faults, &mut req)).await
    {
        return denied;
    }

    match route.handler {
        HandlerKind::Pool => Box::pin(rpc_handler(app, &faults)).await,
        HandlerKind::Proxy => forward(app, route, &faults, client, request_id, req, outcome).await,
    }
}

/// Returns the refusal, or `None` to let the request through.
async fn access_check(
    app: &App,
    route: &Route,
    faults: &FaultState,
    req: &mut Request<Incoming>,
) -> Option<Response<ProxyBody>> {
    let verdict = match crate::access_check::bearer_token(req.headers()) {
        None => Verdict::Unknown,
        Some(token) => match faults.redis_client {
            RedisClientMode::Async => app.access.check_async(token).await,
            // The incident 1 fault: a synchronous Redis round trip on this tokio worker thread.
            RedisClientMode::Blocking => app.access.check_blocking(token),
        },
    };
    let protected = route.access_check == AccessCheckMode::Protected;
    match verdict {
        Verdict::User { id, name } => {
            app.metrics.access_check(AccessResult::Allowed);
            if let Ok(v) = HeaderValue::from_str(&id) {
                req.headers_mut().insert(USER_ID_HEADER, v);
            }
            if let Some(v) = name.and_then(|n| HeaderValue::from_str(&n).ok()) {
                req.headers_mut().insert(USER_NAME_HEADER, v);
            }
            None
        }
        Verdict::Unknown => {
            app.metrics.access_check(AccessResult::Unknown);
            protected
                .then(|| text(StatusCode::UNAUTHORIZED, "401 Unauthorized: missing or unknown bearer token", false))
        }
        Verdict::Error(why) => {
            app.metrics.access_check(AccessResult::Error);
            eprintln!("reference-gateway: access check failed: {why}");
            protected.then(|| {
                text(StatusCode::SERVICE_UNAVAILABLE, "503 Service Unavailable: access check unavailable", false)
            })
        }
    }
}

/// The incident 2 route. With the pool fault off it answers inline; with it on, the work runs on
/// the bounded `rpc-pool-N` threads behind the sleeping rate limiter, and a full pool is a 503.
async fn rpc_handler(app: &App, faults: &FaultState) -> Response<ProxyBody> {
    if !faults.pool_enabled {
        return json(StatusCode::OK, r#"{"handled_by":"inline","limiter_wait_ms":0}"#.to_owned());
    }
    let (tx, rx) = oneshot::channel();
    let limiter = Arc::clone(&app.limiter);
    let rate = faults.pool_permits_per_second;
    let submitted = app.pool.submit(Box::new(move || {
        let waited = limiter.acquire(rate);
        let _ = tx.send(waited);
    }));
    if let Err(e) = submitted {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("503 Service Unavailable: {e}, request rejected"),
            false,
        );
    }
    match rx.await {
        Ok(waited) => {
            json(StatusCode::OK, format!(r#"{{"handled_by":"rpc-pool","limiter_wait_ms":{}}}"#, waited.as_millis()))
        }
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "500 Internal Server Error: rpc handler failed", false),
    }
}

async fn forward(
    app: &App,
    route: &Route,
    faults: &FaultState,
    client: Client,
    request_id: &HeaderValue,
    req: Request<Incoming>,
    outcome: &mut Outcome,
) -> Response<ProxyBody> {
    let Some(pool) = route.upstream.as_deref().and_then(|n| app.upstreams.get(n)) else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "500 Internal Server Error: route has no upstream", false);
    };
    let (mut parts, body) = req.into_parts();
    if !parts.headers.contains_key(header::HOST)
        && let Some(v) = parts.uri.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, v);
    }
    headers::forward_request_headers(&mut parts.headers, client.addr.ip(), client.tls, request_id);
    let path_and_query =
        parts.uri.path_and_query().cloned().unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let timeout = faults.upstream_response_timeout.unwrap_or(app.config.timeouts.upstream_response);

    // Without a body the request can be replayed, so a refused connection moves on to the next
    // server; with one, the body may be half sent and only one attempt is made.
    let bodiless = body.is_end_stream();
    let mut body = Some(body);
    let attempts = if bodiless { pool.len().min(2) } else { 1 };
    for attempt in 1..=attempts {
        let i = app.upstreams.pick(pool);
        let addr = pool.addr(i);
        outcome.upstream = Some(addr);
        let upstream_body: ProxyBody = match body.take() {
            Some(b) if !bodiless => {
                Limited::new(b, usize::try_from(app.config.limits.max_body_bytes).unwrap_or(usize::MAX))
                    .map_err(BoxError::from)
                    .boxed_unsync()
            }
            _ => Empty::new().map_err(|never| match never {}).boxed_unsync(),
        };
        // Origin-form target: the connection already goes to `addr`, Host says who it is for.
        let builder =
            Request::builder().method(parts.method.clone()).version(Version::HTTP_11).uri(path_and_query.clone());
        let Ok(mut up_req) = builder.body(upstream_body) else {
            return text(StatusCode::BAD_REQUEST, "400 Bad Request: unusable request target", false);
        };
        // Only a retry needs the headers again; the last attempt takes them.
        *up_req.headers_mut() =
            if attempt == attempts { std::mem::take(&mut parts.headers) } else { parts.headers.clone() };

        let sent = Instant::now();
        // Boxed: hyper moves each request's future into its slot, and the upstream exchange is
        // most of its size (kilobytes of memmove per request otherwise).
        let result = Box::pin(pool.send(i, up_req, timeout)).await;
        outcome.upstream_time = Some(sent.elapsed());
        match result {
            Ok(resp) => {
                app.upstreams.report(pool, i, true);
                let (mut rparts, rbody) = resp.into_parts();
                headers::strip_hop_by_hop(&mut rparts.headers);
                return Response::from_parts(rparts, rbody.map_err(BoxError::from).boxed_unsync());
            }
            Err(ForwardError::BodyTooLarge) => {
                let max = app.config.limits.max_body_bytes;
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("413 Payload Too Large: body over {max} bytes"),
                    true,
                );
            }
            Err(ForwardError::Upstream { addr, kind }) => {
                app.metrics.upstream_error(kind);
                if app.upstreams.report(pool, i, false) {
                    app.metrics.upstream_ejected();
                    eprintln!("reference-gateway: upstream {addr} ejected after repeated failures ({})", kind.as_str());
                }
                let fast_connect_failure =
                    matches!(kind, UpstreamErrorKind::ConnectRefused | UpstreamErrorKind::Connect);
                if fast_connect_failure && attempt < attempts {
                    continue;
                }
                return upstream_failure(kind, addr, timeout, app.config.timeouts.connect);
            }
        }
    }
    text(StatusCode::BAD_GATEWAY, "502 Bad Gateway: no upstream server answered", false)
}

fn upstream_failure(
    kind: UpstreamErrorKind,
    addr: SocketAddr,
    response_timeout: Duration,
    connect_timeout: Duration,
) -> Response<ProxyBody> {
    let (status, why) = match kind {
        UpstreamErrorKind::ConnectRefused => {
            (StatusCode::BAD_GATEWAY, format!("upstream {addr} refused the connection"))
        }
        UpstreamErrorKind::Connect => (StatusCode::BAD_GATEWAY, format!("cannot connect to upstream {addr}")),
        UpstreamErrorKind::Tls => (StatusCode::BAD_GATEWAY, format!("TLS handshake with upstream {addr} failed")),
        UpstreamErrorKind::Protocol => {
            (StatusCode::BAD_GATEWAY, format!("upstream {addr} closed or sent an invalid response"))
        }
        UpstreamErrorKind::ConnectTimeout => {
            (StatusCode::GATEWAY_TIMEOUT, format!("connect to upstream {addr} timed out after {connect_timeout:?}"))
        }
        UpstreamErrorKind::ResponseTimeout => {
            (StatusCode::GATEWAY_TIMEOUT, format!("upstream {addr} sent no response within {response_timeout:?}"))
        }
    };
    let reason = status.canonical_reason().unwrap_or("");
    text(status, &format!("{} {reason}: {why}", status.as_u16()), false)
}
