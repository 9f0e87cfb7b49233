//! Request paths as the observer keeps them: identifiers and credentials that ride in path
//! segments are replaced before a path is stored, so neither the snapshot, `top`, nor an alert
//! sent on can carry them. Query and fragment are never kept (see `head`); matrix parameters
//! (`;jsessionid=…`) are cut here. What is left is the route: `/api/users/{id}/orders`.

/// What a redacted segment reads as.
pub const REDACTED: &str = "{id}";

/// `path` with each segment that looks like an identifier or a token replaced by [`REDACTED`],
/// and every segment's `;` parameters dropped, in at most `max_len` bytes: a redacted segment
/// can be longer than the one it hides (`/7` → `/{id}`), so the bound is kept here. Where the
/// route does not fit, it ends early with whole characters, and never with part of a
/// [`REDACTED`], which would read as a literal segment.
pub fn redact_path(path: &str, max_len: usize) -> String {
    if !path.starts_with('/') {
        // `*` (OPTIONS) or a CONNECT's host:port: no route to keep or hide.
        return truncated(path, max_len).to_owned();
    }
    let mut out = String::with_capacity(path.len().min(max_len));
    for (i, segment) in path.split('/').enumerate() {
        let separator = if i > 0 { "/" } else { "" };
        let segment = segment.split(';').next().unwrap_or_default();
        let redacted = looks_like_id(segment);
        let piece = if redacted { REDACTED } else { segment };
        let room = max_len.saturating_sub(out.len() + separator.len());
        if out.len() + separator.len() > max_len || (piece.len() > room && redacted) {
            break;
        }
        out.push_str(separator);
        out.push_str(truncated(piece, room));
        if piece.len() > room {
            break;
        }
    }
    out
}

/// The longest prefix of `s` of at most `max_len` bytes that ends on a character boundary.
fn truncated(s: &str, max_len: usize) -> &str {
    let mut end = s.len().min(max_len);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
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
            assert_eq!(redact_path(path, 64), kept, "{path}");
        }
    }

    #[test]
    fn a_redacted_route_stays_within_its_bound() {
        // Short identifiers grow when redacted: found by the fuzzer, a 64-byte path of them.
        let path = "/a/1/2/3/4/5/6/7/8/9/1/2/3/4/5/6/7/8/9/1/2/3/4/5/6/7/8/9/1/2/3/4";
        assert_eq!(path.len(), 64);
        let kept = redact_path(path, 64);
        assert!(kept.len() <= 64, "{kept}");
        assert!(kept.ends_with("/{id}"), "no part of a redaction at the end: {kept}");
        assert_eq!(redact_path("/ab/cdéf", 7), "/ab/cd", "whole characters only");
        assert_eq!(redact_path("/abc/12", 6), "/abc", "a redaction that does not fit is left out");
        assert_eq!(redact_path("*", 0), "");
    }
}
