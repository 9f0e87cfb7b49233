//! Request paths as the observer keeps them: identifiers and credentials that ride in path
//! segments are replaced before a path is stored, so neither the snapshot, `top`, nor an alert
//! sent on can carry them. Query and fragment are never kept (see `head`); matrix parameters
//! (`;jsessionid=…`) are cut here. What is left is the route: `/api/users/{id}/orders`.

/// What a redacted segment reads as.
pub const REDACTED: &str = "{id}";

/// `path` with each segment that looks like an identifier or a token replaced by [`REDACTED`],
/// and every segment's `;` parameters dropped.
pub fn redact_path(path: &str) -> String {
    if !path.starts_with('/') {
        // `*` (OPTIONS) or a CONNECT's host:port: no route to keep or hide.
        return path.to_owned();
    }
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let segment = segment.split(';').next().unwrap_or_default();
        out.push_str(if looks_like_id(segment) { REDACTED } else { segment });
    }
    out
}

/// Numbers, UUIDs, hex and base64 strings, emails, percent-encoded data and anything of 16
/// bytes or more that is not a lowercase word: what a route's variable parts are made of. Short words with a digit
/// (`v2`, `oauth2`) stay.
fn looks_like_id(segment: &str) -> bool {
    let bytes = segment.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let digits = bytes.iter().filter(|b| b.is_ascii_digit()).count();
    let letters = bytes.iter().filter(|b| b.is_ascii_alphabetic()).count();
    // Lowercase words, in any script (bytes past ASCII are parts of letters here).
    let plain_word = bytes.iter().all(|&b| b.is_ascii_lowercase() || b >= 0x80 || matches!(b, b'-' | b'_' | b'.'));
    digits == bytes.len()
        || bytes.iter().any(|b| matches!(b, b'=' | b'@' | b'%' | b'~' | b':' | b'+'))
        || (bytes.len() >= 6 && bytes.iter().all(u8::is_ascii_hexdigit) && digits > 0)
        || (bytes.len() >= 8 && digits > 0 && letters > 0)
        || (bytes.len() >= 16 && !plain_word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_stay_and_identifiers_go() {
        let cases = [
            ("/", "/"),
            ("/api/v2/users", "/api/v2/users"),
            ("/oauth2/authorize", "/oauth2/authorize"),
            ("/static/app.min.js", "/static/app.min.js"),
            ("/api/users/12345/orders", "/api/users/{id}/orders"),
            ("/users/7", "/users/{id}"),
            ("/orders/3f2a9c1e-7b1d-4c55-9a3e-0c2b6f1d8e77", "/orders/{id}"),
            ("/blobs/deadbeef0cafe", "/blobs/{id}"),
            ("/decade/facade", "/decade/facade"),
            ("CONNECT-less example.com:443", "CONNECT-less example.com:443"),
            ("*", "*"),
            ("/reset/eyJhbGciOiJIUzI1NiJ9", "/reset/{id}"),
            ("/unsubscribe/alice@example.com", "/unsubscribe/{id}"),
            ("/files/a%2Fb", "/files/{id}"),
            ("/cart;jsessionid=0123ABCDEF", "/cart"),
            ("/s/AbCdEfGhIjKlMnOpQr", "/s/{id}"),
            ("/authorization-servers/default", "/authorization-servers/default"),
            ("/t/sk_live_a1b2c3", "/t/{id}"),
        ];
        for (path, kept) in cases {
            assert_eq!(redact_path(path), kept, "{path}");
        }
    }
}
