//! Header rewriting for proxied messages: hop-by-hop removal, `X-Forwarded-For`,
//! `X-Forwarded-Proto`, and `X-Request-Id` (kept when the client sent a sane one).
//!
//! Pure functions over `http::HeaderMap`; no I/O.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// RFC 9110 §7.6.1 connection-specific fields, plus the legacy ones proxies still see.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// The client's `X-Request-Id` when it is short visible ASCII, else a fresh one.
pub fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(v) = headers.get(&X_REQUEST_ID)
        && (1..=128).contains(&v.len())
        && v.as_bytes().iter().all(u8::is_ascii_graphic)
    {
        return v.clone();
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        t ^ (u64::from(std::process::id()) << 32)
    });
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let id = format!("{seed:016x}{n:08x}");
    // Hex digits only: always a valid header value.
    HeaderValue::from_str(&id).unwrap_or(HeaderValue::from_static("0"))
}

/// Prepares a client request's headers for the upstream.
pub fn forward_request_headers(headers: &mut HeaderMap, client: IpAddr, tls: bool, request_id: &HeaderValue) {
    strip_hop_by_hop(headers);
    // The gateway reads the client's body itself (answering 100-continue); the upstream gets it whole.
    headers.remove(header::EXPECT);
    let xff = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {client}"),
        None => client.to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(if tls { "https" } else { "http" }));
    headers.insert(X_REQUEST_ID, request_id.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_for_upstream() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        h.insert(header::EXPECT, "100-continue".parse().unwrap());
        let id = request_id(&h);
        forward_request_headers(&mut h, "127.0.0.1".parse().unwrap(), true, &id);
        assert_eq!(h["x-forwarded-proto"], "https");
        assert!(h.get("x-secret").is_none() && h.get(header::CONNECTION).is_none());
        assert!(h.get(header::TRANSFER_ENCODING).is_none() && h.get(header::EXPECT).is_none());
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-request-id"], id);
        let mut given = HeaderMap::new();
        given.insert("x-request-id", "abc-1".parse().unwrap());
        assert_eq!(request_id(&given), "abc-1");
        assert_ne!(request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
    }
}
