//! Responses the gateway writes itself (errors, health, the rpc handler), with clear bodies.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

use crate::upstream::ProxyBody;

pub fn full(body: impl Into<Bytes>) -> ProxyBody {
    Full::new(body.into()).map_err(|never| match never {}).boxed_unsync()
}

/// A plain-text response; `close` asks hyper to close the connection after it.
pub fn text(status: StatusCode, body: &str, close: bool) -> Response<ProxyBody> {
    let mut resp = Response::new(full(format!("{body}\n")));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if close {
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

pub fn json(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
