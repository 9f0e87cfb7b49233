//! The start line and header block of one message as far as framing needs them: method, a path
//! prefix, status, and the framing headers' facts (Content-Length, Transfer-Encoding, Connection,
//! Upgrade), accumulated byte by byte into fixed-size fields. Every other header value is skipped
//! unread, so no value ever lands in memory beyond the token being compared.

use super::{
    exchange::Method,
    parser::{Framing, Kind, MAX_PATH},
    redact::RequestPath,
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

    /// The request path as seen, redacted when read.
    pub(super) fn path(&self) -> RequestPath {
        RequestPath::new(self.path.get(..usize::from(self.path_len)).unwrap_or_default())
    }

    pub(super) fn name_kind(&self) -> HeaderKind {
        if self.name_overflow {
            return HeaderKind::Other;
        }
        header_kind(self.name.get(..usize::from(self.name_len)).unwrap_or_default())
    }

    /// The whole header lines (and obs-fold lines) at the start of `bytes`, one after the
    /// other: [`Self::header_line`] in a loop of its own, as a header block is mostly such
    /// lines. Returns how many bytes they took.
    pub(super) fn header_lines(&mut self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        while let Some(n) = bytes.get(taken..).map(|rest| self.header_line(rest)).filter(|&n| n > 0) {
            taken += n;
        }
        taken
    }

    /// A whole header line at the start of `bytes` (name, colon, value, LF) or a whole obs-fold
    /// continuation line, taken in one go without copying the name. Returns its length, or 0 when
    /// `bytes` hold no whole line or it is not well-formed: the per-byte state machine then takes
    /// it (carrying a line cut by a segment end over to the next, in its fixed-size fields) and
    /// reports what is wrong.
    #[inline]
    fn header_line(&mut self, bytes: &[u8]) -> usize {
        match bytes.first() {
            Some(b' ' | b'\t') => return find_lf(bytes).map_or(0, |lf| lf + 1),
            Some(&b) if is_tchar(b) => {}
            _ => return 0,
        }
        // The name, then the LF looked for after the colon only: an LF is no tchar, so it cannot
        // be in the name, and the name's bytes are not scanned twice.
        let colon = tchar_run(bytes);
        let (name, rest) = bytes.split_at(colon);
        let Some((b':', rest)) = rest.split_first() else { return 0 };
        let Some(lf) = find_lf(rest) else { return 0 };
        // Most names have none of the framing headers' lengths: no call for them.
        self.header = if matches!(name.len(), 7 | 10 | 14 | 17) { header_kind(name) } else { HeaderKind::Other };
        // Other headers leave nothing to finish: their values are never read.
        if self.header != HeaderKind::Other {
            self.value_bytes(rest.get(..lf).unwrap_or_default());
            self.finish_value();
        }
        colon + 1 + lf + 1
    }

    /// [`Self::value_byte`] over each byte of `value` but CR, the header's kind matched once
    /// rather than per byte.
    fn value_bytes(&mut self, value: &[u8]) {
        if self.simple_value(value) {
            return;
        }
        match self.header {
            HeaderKind::Other | HeaderKind::Upgrade => {}
            HeaderKind::ContentLength => {
                for &b in value {
                    if b != b'\r' {
                        self.length_byte(b);
                    }
                }
            }
            HeaderKind::TransferEncoding | HeaderKind::Connection => {
                for &b in value {
                    if b != b'\r' {
                        self.token_byte(b);
                    }
                }
            }
        }
    }

    /// The common values taken whole, leaving the state the bytes one by one would: a
    /// Content-Length of digits only, or a single token without parameters, each after optional
    /// blanks and before an optional CR, at the start of a value (nothing of it taken yet).
    /// False, with nothing taken, for any other value.
    fn simple_value(&mut self, value: &[u8]) -> bool {
        if matches!(self.header, HeaderKind::Other | HeaderKind::Upgrade) {
            return false;
        }
        let start = value.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(value.len());
        let value = value.get(start..).unwrap_or_default();
        let value = value.strip_suffix(b"\r").unwrap_or(value);
        match self.header {
            HeaderKind::ContentLength => {
                // 19 digits cannot overflow a u64.
                let fresh = self.length.is_none() && !self.length_bad && !self.length_ws_after;
                if !fresh || value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
                    return false;
                }
                self.length = Some(value.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')));
                true
            }
            HeaderKind::TransferEncoding | HeaderKind::Connection => {
                let fresh = self.token_len == 0 && !self.token_overflow && !self.token_param;
                let plain = !value.iter().any(|b| matches!(b, b',' | b';' | b' ' | b'\t' | b'\r'));
                let Some(slots) = self.token.get_mut(..value.len()).filter(|_| fresh && plain) else { return false };
                for (slot, b) in slots.iter_mut().zip(value) {
                    *slot = b.to_ascii_lowercase();
                }
                self.token_len = value.len() as u8; // at most MAX_TOKEN, as it fit
                true
            }
            HeaderKind::Other | HeaderKind::Upgrade => false,
        }
    }

    #[inline]
    pub(super) fn value_byte(&mut self, b: u8) {
        match self.header {
            HeaderKind::Other | HeaderKind::Upgrade => {}
            HeaderKind::ContentLength => self.length_byte(b),
            HeaderKind::TransferEncoding | HeaderKind::Connection => self.token_byte(b),
        }
    }

    /// One byte of a Content-Length value.
    #[inline]
    fn length_byte(&mut self, b: u8) {
        match b {
            b' ' | b'\t' => self.length_ws_after = self.length.is_some(),
            b'0'..=b'9' if !self.length_ws_after => {
                self.length = self.length.unwrap_or(0).checked_mul(10).and_then(|n| n.checked_add(u64::from(b - b'0')));
                if self.length.is_none() {
                    self.length_bad = true;
                }
            }
            _ => self.length_bad = true,
        }
    }

    /// One byte of a Transfer-Encoding or Connection value: a list of tokens.
    #[inline]
    fn token_byte(&mut self, b: u8) {
        match b {
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
        }
    }

    /// A whole request line but its LF at the start of `bytes` (`METHOD SP target SP HTTP/1.x`
    /// and a CR if one follows), for a message with nothing accumulated yet. Returns its length,
    /// or 0 (nothing taken) when `bytes` do not hold it whole and well-formed.
    pub(super) fn request_line(&mut self, bytes: &[u8]) -> usize {
        let Some(sp) = bytes.iter().take(MAX_METHOD + 1).position(|&b| !is_method_byte(b)) else { return 0 };
        let (method, rest) = bytes.split_at(sp);
        let Some(rest) = rest.strip_prefix(b" ") else { return 0 };
        let Some(sp) = rest.iter().position(|&b| b <= b' ' || b == 0x7f) else { return 0 };
        let (target, rest) = rest.split_at(sp);
        let version = rest.strip_prefix(b" ").and_then(|v| v.get(..VERSION_PREFIX.len() + 1)).unwrap_or_default();
        if method.is_empty() || target.is_empty() || !is_version(version) {
            return 0;
        }
        // Both were scanned whole above: kept without scanning them again.
        if let Some(dst) = self.method.get_mut(..method.len()) {
            dst.copy_from_slice(method);
            self.method_len = method.len() as u8; // at most MAX_METHOD, by the scan's bound
        }
        self.target_len = target.len() as u64;
        self.keep_path(target);
        let taken = method.len() + target.len() + version.len() + 2;
        if bytes.get(taken) == Some(&b'\r') { taken + 1 } else { taken }
    }

    /// `HTTP/1.x SP` and a three-digit status code and the space or CR after it, at the start of
    /// `bytes`, for a message with nothing accumulated yet. Returns its length, or 0 (nothing
    /// taken) when `bytes` do not hold it whole and well-formed.
    pub(super) fn status_line(&mut self, bytes: &[u8]) -> usize {
        let Some(line) = bytes.get(..VERSION_PREFIX.len() + 6) else { return 0 };
        let (version, rest) = line.split_at(VERSION_PREFIX.len() + 1);
        let [b' ', d0 @ b'1'..=b'9', d1 @ b'0'..=b'9', d2 @ b'0'..=b'9', b' ' | b'\r'] = *rest else { return 0 };
        if !is_version(version) {
            return 0;
        }
        self.status = u16::from(d0 - b'0') * 100 + u16::from(d1 - b'0') * 10 + u16::from(d2 - b'0');
        self.status_digits = 3;
        line.len()
    }

    /// Takes the longest prefix of `bytes` that continues the method token and fits; the byte
    /// that ends it (or would overflow) is left for the per-byte state machine.
    pub(super) fn method_run(&mut self, bytes: &[u8]) -> usize {
        let len = usize::from(self.method_len);
        let Some(space) = self.method.get_mut(len..) else { return 0 };
        let run =
            bytes.iter().take(space.len()).position(|&b| !is_method_byte(b)).unwrap_or(bytes.len().min(space.len()));
        if let (Some(dst), Some(src)) = (space.get_mut(..run), bytes.get(..run)) {
            dst.copy_from_slice(src);
            self.method_len += run as u8; // run <= MAX_METHOD
        }
        run
    }

    /// Takes the longest prefix of `bytes` that continues the request target (up to a space or
    /// control byte), keeping its path part up to [`MAX_PATH`] bytes.
    pub(super) fn target_run(&mut self, bytes: &[u8]) -> usize {
        let run = bytes.iter().position(|&b| b <= b' ' || b == 0x7f).unwrap_or(bytes.len());
        self.target_len = self.target_len.saturating_add(run as u64);
        self.keep_path(bytes.get(..run).unwrap_or_default());
        run
    }

    /// Keeps the path part of `target` (more of the request target) up to [`MAX_PATH`] bytes.
    fn keep_path(&mut self, target: &[u8]) {
        if self.path_done {
            return;
        }
        let len = usize::from(self.path_len);
        let space = self.path.get_mut(len..).unwrap_or_default();
        // Only the bytes that fit are looked at for the query or fragment: past them, the path
        // is done either way.
        let seen = target.get(..space.len().saturating_add(1)).unwrap_or(target);
        let end = seen.iter().position(|&b| b == b'?' || b == b'#');
        let path = seen.get(..end.unwrap_or(seen.len())).unwrap_or_default();
        let take = path.len().min(space.len());
        if let (Some(dst), Some(src)) = (space.get_mut(..take), path.get(..take)) {
            dst.copy_from_slice(src);
            self.path_len += take as u8; // take <= MAX_PATH
        }
        self.path_done = end.is_some() || path.len() > take;
    }

    /// Takes the longest prefix of `bytes` that continues a header name, lower-cased into the
    /// name buffer while it fits.
    pub(super) fn name_run(&mut self, bytes: &[u8]) -> usize {
        let run = tchar_run(bytes);
        let name = bytes.get(..run).unwrap_or_default();
        let len = usize::from(self.name_len);
        let space = self.name.get_mut(len..).unwrap_or_default();
        let take = name.len().min(space.len());
        for (slot, b) in space.iter_mut().zip(name) {
            *slot = b.to_ascii_lowercase();
        }
        self.name_len += take as u8; // take <= MAX_NAME
        self.name_overflow |= name.len() > take;
        run
    }

    /// Takes the bytes of a header value up to its LF: values of headers other than the framing
    /// ones are skipped unread.
    pub(super) fn value_run(&mut self, bytes: &[u8]) -> usize {
        let run = find_lf(bytes).unwrap_or(bytes.len());
        self.value_bytes(bytes.get(..run).unwrap_or_default());
        run
    }

    fn finish_token(&mut self) {
        let token = if self.token_overflow {
            &b"?"[..]
        } else {
            self.token.get(..usize::from(self.token_len)).unwrap_or_default()
        };
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

/// `HTTP/1.` and a digit.
pub(super) fn is_version(bytes: &[u8]) -> bool {
    bytes.len() == VERSION_PREFIX.len() + 1
        && bytes.starts_with(VERSION_PREFIX)
        && bytes.last().is_some_and(u8::is_ascii_digit)
}

/// Which framing header `name` is (case-insensitive). It runs on every header line: the length
/// rules out most names at once (each candidate has its own), and the compare has no early exit,
/// so that it is a few wide operations rather than a loop of branches.
#[inline]
fn header_kind(name: &[u8]) -> HeaderKind {
    let (candidate, kind) = match name.len() {
        14 => (&b"content-length"[..], HeaderKind::ContentLength),
        10 => (&b"connection"[..], HeaderKind::Connection),
        17 => (&b"transfer-encoding"[..], HeaderKind::TransferEncoding),
        7 => (&b"upgrade"[..], HeaderKind::Upgrade),
        _ => return HeaderKind::Other,
    };
    if same_name(name, candidate) { kind } else { HeaderKind::Other }
}

/// Whether header name `name` is `lower` (a lower-case name of 8 bytes or more, of letters and
/// `-`) in any case: three 8-byte words compared with their case bit (0x20) masked, rather than a
/// byte at a time. Masking the bit matches each letter in either case; it also matches a `-` with
/// a CR, which no header name holds (names are tchars), and nothing else.
fn same_name(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = u64::from_ne_bytes([0x20; 8]);
    if name.len() != lower.len() || name.len() < 8 {
        return name.eq_ignore_ascii_case(lower);
    }
    let word = |bytes: &[u8], at: usize| bytes.get(at..at + 8).and_then(|w| w.try_into().ok()).map(u64::from_ne_bytes);
    // The first, the middle (or a second) and the last eight bytes cover names of up to 24.
    let last = name.len() - 8;
    [0, last.min(8), last].into_iter().all(|at| match (word(name, at), word(lower, at)) {
        (Some(a), Some(b)) => (a ^ b) & !CASE == 0,
        _ => false,
    })
}

/// Request methods are upper-case tokens (`M-SEARCH`, `BASELINE_CONTROL`).
pub(super) fn is_method_byte(b: u8) -> bool {
    b.is_ascii_uppercase() || b == b'-' || b == b'_'
}

/// RFC 9110 tchar.
pub(super) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// How many bytes at the start of `bytes` are tchars (a header name's length), eight at a time:
/// eight independent lookups and one branch rather than a branch per byte.
#[inline]
fn tchar_run(bytes: &[u8]) -> usize {
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        if !chunk.iter().fold(true, |all, &b| all & is_tchar(b)) {
            return offset + chunk.iter().position(|&b| !is_tchar(b)).unwrap_or(chunk.len());
        }
        offset += 8;
    }
    let rest = chunks.remainder();
    offset + rest.iter().position(|&b| !is_tchar(b)).unwrap_or(rest.len())
}

const TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        b += 1;
    }
    table
};

/// The first LF in `bytes`, eight bytes at a time (header lines are mostly tens of bytes, and
/// this runs on every line of every head).
pub(super) fn find_lf(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const LFS: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_ne_bytes(word) ^ LFS;
        // Non-zero iff some byte of x is zero, i.e. some byte was an LF.
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            return chunk.iter().position(|&b| b == b'\n').map(|i| offset + i);
        }
        offset += 8;
    }
    chunks.remainder().iter().position(|&b| b == b'\n').map(|i| offset + i)
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
