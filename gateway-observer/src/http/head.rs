//! The start line and header block of one message as far as framing needs them: method, a path
//! prefix, status, and the framing headers' facts (Content-Length, Transfer-Encoding, Connection,
//! Upgrade), accumulated byte by byte into fixed-size fields. Every other header value is skipped
//! unread, so no value ever lands in memory beyond the token being compared.

use super::{
    connection::Method,
    parser::{Framing, Kind, MAX_PATH},
};

/// Longer method tokens are not HTTP.
const MAX_METHOD: usize = 20;
/// Longer header names are none of the framing headers.
const MAX_NAME: usize = 24;
/// Longer transfer-coding / connection-option tokens are none we look for.
const MAX_TOKEN: usize = 16;
pub(super) const VERSION_PREFIX: &[u8; 7] = b"HTTP/1.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum HeaderKind {
    #[default]
    Other,
    ContentLength,
    TransferEncoding,
    Connection,
    Upgrade,
}

/// What the start line and header block said so far: fixed-size fields only.
#[derive(Clone, Copy, Debug)]
pub struct Accumulated {
    pub(super) method: [u8; MAX_METHOD],
    pub(super) method_len: u8,
    pub(super) path: [u8; MAX_PATH],
    pub(super) path_len: u8,
    pub(super) path_done: bool,
    pub(super) target_len: u64,
    pub(super) status: u16,
    pub(super) status_digits: u8,
    pub(super) framing: Framing,
    pub(super) name: [u8; MAX_NAME],
    pub(super) name_len: u8,
    pub(super) name_overflow: bool,
    pub(super) header: HeaderKind,
    pub(super) token: [u8; MAX_TOKEN],
    pub(super) token_len: u8,
    pub(super) token_overflow: bool,
    pub(super) token_param: bool,
    pub(super) length: Option<u64>,
    pub(super) length_bad: bool,
    pub(super) length_ws_after: bool,
}

impl Default for Accumulated {
    fn default() -> Self {
        Self {
            method: [0; MAX_METHOD],
            method_len: 0,
            path: [0; MAX_PATH],
            path_len: 0,
            path_done: false,
            target_len: 0,
            status: 0,
            status_digits: 0,
            framing: Framing::default(),
            name: [0; MAX_NAME],
            name_len: 0,
            name_overflow: false,
            header: HeaderKind::Other,
            token: [0; MAX_TOKEN],
            token_len: 0,
            token_overflow: false,
            token_param: false,
            length: None,
            length_bad: false,
            length_ws_after: false,
        }
    }
}

impl Accumulated {
    pub fn method(&self) -> Method {
        Method::from_token(self.method.get(..usize::from(self.method_len)).unwrap_or_default())
    }

    pub fn status(&self) -> Option<u16> {
        (self.status_digits == 3).then_some(self.status)
    }

    pub(super) fn path(&self) -> String {
        let raw = self.path.get(..usize::from(self.path_len)).unwrap_or_default();
        match std::str::from_utf8(raw) {
            Ok(s) => s.to_owned(),
            // Cut inside a multi-byte character by the 64-byte limit: keep the whole characters.
            Err(e) if e.error_len().is_none() => {
                String::from_utf8_lossy(raw.get(..e.valid_up_to()).unwrap_or_default()).into_owned()
            }
            Err(_) => {
                let mut s = String::from_utf8_lossy(raw).into_owned();
                let mut end = s.len().min(MAX_PATH);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                s
            }
        }
    }

    pub(super) fn name_kind(&self) -> HeaderKind {
        if self.name_overflow {
            return HeaderKind::Other;
        }
        match self.name.get(..usize::from(self.name_len)).unwrap_or_default() {
            b"content-length" => HeaderKind::ContentLength,
            b"transfer-encoding" => HeaderKind::TransferEncoding,
            b"connection" => HeaderKind::Connection,
            b"upgrade" => HeaderKind::Upgrade,
            _ => HeaderKind::Other,
        }
    }

    pub(super) fn value_byte(&mut self, b: u8) {
        match self.header {
            HeaderKind::Other | HeaderKind::Upgrade => {}
            HeaderKind::ContentLength => match b {
                b' ' | b'\t' => self.length_ws_after = self.length.is_some(),
                b'0'..=b'9' if !self.length_ws_after => {
                    self.length = self
                        .length
                        .unwrap_or(0)
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(b - b'0')));
                    if self.length.is_none() {
                        self.length_bad = true;
                    }
                }
                _ => self.length_bad = true,
            },
            HeaderKind::TransferEncoding | HeaderKind::Connection => match b {
                b',' => self.finish_token(),
                b' ' | b'\t' => {}
                b';' => self.token_param = true,
                _ if self.token_param => {}
                _ => match self.token.get_mut(usize::from(self.token_len)) {
                    Some(slot) => {
                        *slot = b.to_ascii_lowercase();
                        self.token_len += 1;
                    }
                    None => self.token_overflow = true,
                },
            },
        }
    }

    fn finish_token(&mut self) {
        let token = if self.token_overflow { &b"?"[..] } else { self.token.get(..usize::from(self.token_len)).unwrap_or_default() };
        if !token.is_empty() {
            match self.header {
                HeaderKind::TransferEncoding => self.framing.chunked = token == b"chunked",
                HeaderKind::Connection if token == b"close" => self.framing.close = true,
                HeaderKind::Connection if token == b"upgrade" => self.framing.upgrade = true,
                _ => {}
            }
        }
        self.token_len = 0;
        self.token_overflow = false;
        self.token_param = false;
    }

    pub(super) fn finish_value(&mut self) {
        match self.header {
            HeaderKind::ContentLength => match (self.length, self.length_bad) {
                (Some(n), false) if self.framing.content_length.is_none_or(|m| m == n) => {
                    self.framing.content_length = Some(n);
                }
                _ => self.framing.invalid_length = true,
            },
            HeaderKind::TransferEncoding => {
                self.framing.transfer_encoding = true;
                self.finish_token();
            }
            HeaderKind::Connection => self.finish_token(),
            HeaderKind::Upgrade => self.framing.upgrade = true,
            HeaderKind::Other => {}
        }
        self.header = HeaderKind::Other;
        self.length = None;
        self.length_bad = false;
        self.length_ws_after = false;
    }
}

/// Request methods are upper-case tokens (`M-SEARCH`, `BASELINE_CONTROL`).
pub(super) fn is_method_byte(b: u8) -> bool {
    b.is_ascii_uppercase() || b == b'-' || b == b'_'
}

/// RFC 9110 tchar.
pub(super) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `bytes` begin with a whole, valid start line of a `kind` message: used to find the
/// next message after a message whose framing was unknown.
pub fn looks_like_start(kind: Kind, bytes: &[u8]) -> bool {
    match kind {
        Kind::Response => {
            let Some(line) = bytes.get(..12) else { return false };
            line.starts_with(VERSION_PREFIX)
                && line.get(7).is_some_and(u8::is_ascii_digit)
                && line.get(8) == Some(&b' ')
                && line.get(9..12).is_some_and(|d| d.iter().all(u8::is_ascii_digit))
        }
        Kind::Request => {
            let Some(sp) = bytes.iter().take(MAX_METHOD + 1).position(|&b| b == b' ') else { return false };
            let (method, rest) = bytes.split_at(sp);
            if method.is_empty() || !method.iter().all(|&b| is_method_byte(b)) {
                return false;
            }
            let rest = rest.get(1..).unwrap_or_default();
            let Some(sp) = rest.iter().position(|&b| b <= b' ' || b == 0x7f) else { return false };
            let (target, rest) = rest.split_at(sp);
            if target.is_empty() || rest.first() != Some(&b' ') {
                return false;
            }
            let version = rest.get(1..).unwrap_or_default();
            version.starts_with(VERSION_PREFIX)
                && version.get(7).is_some_and(u8::is_ascii_digit)
                && matches!(version.get(8), Some(b'\r' | b'\n'))
        }
    }
}

pub(super) fn push_lower<const N: usize>(buf: &mut [u8; N], len: &mut u8, overflow: &mut bool, b: u8) {
    match buf.get_mut(usize::from(*len)) {
        Some(slot) => {
            *slot = b.to_ascii_lowercase();
            *len += 1;
        }
        None => *overflow = true,
    }
}
