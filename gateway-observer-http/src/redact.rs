//! Request paths as the observer keeps them: identifiers and credentials that ride in path
//! segments are replaced before a path is stored, so neither the snapshot, `top`, nor an alert
//! sent on can carry them. Query and fragment are never kept (see `head`); matrix parameters
//! (`;jsessionid=…`) are cut here. What is left is the route: `/api/users/{id}/orders`.

use crate::parser::MAX_PATH;

/// What a redacted segment reads as.
pub const REDACTED: &str = "{id}";

/// A request's path as its start line or `:path` gave it: at most [`MAX_PATH`] bytes, without
/// query or fragment. Kept as it came and redacted when read: redacting every request's path was
/// about a third of the daemon's work per request (`cargo xtask bench records`), and a path is
/// read only for the few requests shown (slowest, in flight, stalled). [`Self::redacted`] is the
/// only way to read it, and `Debug` prints that form, so the raw bytes reach no log, snapshot
/// or alert.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RequestPath {
    raw: [u8; MAX_PATH],
    len: u8,
}

impl Default for RequestPath {
    fn default() -> Self {
        Self { raw: [0; MAX_PATH], len: 0 }
    }
}

impl RequestPath {
    /// The first [`MAX_PATH`] bytes of `path`.
    pub fn new(path: &[u8]) -> Self {
        let mut kept = Self::default();
        let len = path.len().min(MAX_PATH);
        if let (Some(dst), Some(src)) = (kept.raw.get_mut(..len), path.get(..len)) {
            dst.copy_from_slice(src);
            kept.len = len as u8; // len <= MAX_PATH
        }
        kept
    }

    /// The path as kept: for an absolute-form target (`http://user:pass@host/x`, sent to
    /// proxies) only the path, since the authority may carry credentials; identifiers and tokens
    /// in its segments redacted.
    pub fn redacted(&self) -> String {
        redact_path(without_authority(&self.text()), MAX_PATH)
    }

    /// The path as it came, for this crate's tests of what the parsers keep (redaction has its
    /// own tests).
    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.raw.get(..usize::from(self.len)).unwrap_or_default()).unwrap_or("<not UTF-8>")
    }

    /// The raw bytes as text; a character cut by the length limit is dropped.
    fn text(&self) -> std::borrow::Cow<'_, str> {
        let raw = self.raw.get(..usize::from(self.len)).unwrap_or_default();
        match std::str::from_utf8(raw) {
            Ok(s) => s.into(),
            Err(e) if e.error_len().is_none() => {
                String::from_utf8_lossy(raw.get(..e.valid_up_to()).unwrap_or_default())
            }
            Err(_) => {
                let mut s = String::from_utf8_lossy(raw).into_owned();
                let mut end = s.len().min(MAX_PATH);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                s.into()
            }
        }
    }
}

impl std::fmt::Debug for RequestPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RequestPath").field(&self.redacted()).finish()
    }
}

impl From<&str> for RequestPath {
    fn from(path: &str) -> Self {
        Self::new(path.as_bytes())
    }
}

/// For tests: compares the redacted form, as every reader sees it (`==` between two paths
/// compares what was kept).
#[cfg(test)]
impl PartialEq<&str> for RequestPath {
    fn eq(&self, other: &&str) -> bool {
        self.redacted() == *other
    }
}

/// `http://user:pass@host:80/a/b` → `/a/b` (`/` when the path was cut off); other targets as is.
fn without_authority(target: &str) -> &str {
    let has_prefix = |prefix: &str| target.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    let scheme_len = if has_prefix("http://") {
        7
    } else if has_prefix("https://") {
        8
    } else {
        return target;
    };
    let rest = target.get(scheme_len..).unwrap_or_default();
    rest.find('/').and_then(|i| rest.get(i..)).unwrap_or("/")
}

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

    #[test]
    fn a_kept_path_is_read_only_redacted() {
        let path = RequestPath::new(b"http://user:secret@host/api/users/12345/orders");
        assert_eq!(path.redacted(), "/api/users/{id}/orders", "no authority, no id");
        assert!(path == "/api/users/{id}/orders");
        let shown = format!("{path:?}");
        assert!(!shown.contains("secret") && !shown.contains("12345"), "{shown}");
        // Bounded as the parser bounds it: the first MAX_PATH bytes, a cut character dropped.
        let long = format!("/{}", "é".repeat(40));
        let kept = RequestPath::new(long.as_bytes());
        assert_eq!(kept.redacted(), format!("/{}", "é".repeat(31)), "64 bytes cut the 32nd 'é' in half");
        assert!(RequestPath::default().redacted().is_empty());
    }
}
