//! HPACK header blocks (RFC 7541) decoded for the pseudo-headers only.
//!
//! The dynamic table is tracked with its real sizes (so eviction matches the peer's) but keeps no
//! header value except the few pseudo-header values this crate reports (method, status, a path
//! cut to [`MAX_PATH`](crate::parser::MAX_PATH) and redacted when read, as HTTP/1.x paths are); every other entry is a name class and
//! a size. Entries whose content is not known (a connection first seen mid-way, a block partly
//! unseen) are simply missing: a reference to one yields nothing, and entries added after are
//! indexed correctly since new entries take the lowest dynamic indexes. The table is capped at [`MAX_TABLE_SIZE`] whatever the peer allows.

use std::collections::VecDeque;

use super::huffman;
use crate::exchange::Method;
use crate::redact::RequestPath;

/// The largest dynamic table tracked (bytes as HPACK counts them).
pub const MAX_TABLE_SIZE: usize = 64 * 1024;
const DEFAULT_TABLE_SIZE: usize = 4096;
/// Bytes of a string decoded at most (longer ones are only measured).
const MAX_DECODED: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    Method,
    Path,
    Status,
    Authority,
    GrpcStatus,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Method(Method),
    Path(RequestPath),
    Code(u16),
    Unkept,
}

#[derive(Clone, Debug)]
struct Entry {
    name: Name,
    name_len: usize,
    value: Value,
    size: usize,
}

/// What a header block said of the fields this crate keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    pub method: Option<Method>,
    pub path: Option<RequestPath>,
    pub status: Option<u16>,
    pub grpc_status: Option<u16>,
}

impl Fields {
    fn set(&mut self, name: Name, value: &Value) {
        match (name, value) {
            (Name::Method, Value::Method(m)) => self.method = Some(*m),
            (Name::Path, Value::Path(p)) => self.path = Some(*p),
            (Name::Status, Value::Code(c)) => self.status = Some(*c),
            (Name::GrpcStatus, Value::Code(c)) => self.grpc_status = Some(*c),
            _ => {}
        }
    }
}

/// One direction's decoding context.
#[derive(Clone, Debug)]
pub struct Decoder {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    scratch: Vec<u8>,
    /// Blocks that could not be decoded to their end.
    broken_blocks: u64,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self { entries: VecDeque::new(), size: 0, max_size: DEFAULT_TABLE_SIZE, scratch: Vec::new(), broken_blocks: 0 }
    }

    pub fn broken_blocks(&self) -> u64 {
        self.broken_blocks
    }

    /// Entries tracked now (bounded by [`MAX_TABLE_SIZE`] / 32).
    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Decodes one header block; `whole` is false when part of it was not seen, in which case what
    /// precedes the gap is still read and the table forgets what it cannot know.
    pub fn decode(&mut self, block: &[u8], whole: bool) -> Fields {
        let mut fields = Fields::default();
        let mut rest = block;
        while !rest.is_empty() {
            match self.field(rest, &mut fields) {
                Some(next) => rest = next,
                None => {
                    self.forget();
                    return fields;
                }
            }
        }
        if !whole {
            self.forget();
        }
        fields
    }

    /// The peer's table went on without this decoder (its frames were unseen): what it holds now
    /// is unknown.
    pub fn forget_all(&mut self) {
        self.entries.clear();
        self.size = 0;
    }

    /// The entries' contents are unknown from here on: drop them (later ones index correctly).
    fn forget(&mut self) {
        self.broken_blocks = self.broken_blocks.saturating_add(1);
        self.entries.clear();
        self.size = 0;
    }

    fn field<'a>(&mut self, b: &'a [u8], fields: &mut Fields) -> Option<&'a [u8]> {
        let first = *b.first()?;
        if first & 0x80 != 0 {
            let (index, rest) = integer(b, 7)?;
            if let Some((name, value)) = self.lookup(index) {
                fields.set(name, &value);
            }
            return Some(rest);
        }
        if first & 0xe0 == 0x20 {
            let (size, rest) = integer(b, 5)?;
            self.max_size = usize::try_from(size).unwrap_or(usize::MAX).min(MAX_TABLE_SIZE);
            self.evict(0);
            return Some(rest);
        }
        let (indexing, prefix) = if first & 0x40 != 0 { (true, 6) } else { (false, 4) };
        let (index, mut rest) = integer(b, prefix)?;
        let (name, name_len) = if index == 0 {
            let (len, after) = self.string(rest)?;
            rest = after;
            (name_class(&self.scratch), len)
        } else if let Some(known) = self.lookup_name(index) {
            known
        } else {
            // An entry this decoder never saw: an insert with its name would have an unknown
            // size, so the table's later eviction could not be followed.
            if indexing {
                self.forget();
            }
            let (_, after) = self.string(rest)?;
            return Some(after);
        };
        let (value_len, after) = self.string(rest)?;
        let value = parse_value(name, &self.scratch);
        fields.set(name, &value);
        if indexing {
            self.insert(Entry { name, name_len, value, size: name_len.saturating_add(value_len).saturating_add(32) });
        }
        Some(after)
    }

    /// A string literal: decoded into `scratch` (at most [`MAX_DECODED`] bytes); returns its
    /// decoded length and what follows it.
    fn string<'a>(&mut self, b: &'a [u8]) -> Option<(usize, &'a [u8])> {
        let huffman_coded = b.first()? & 0x80 != 0;
        let (len, rest) = integer(b, 7)?;
        let len = usize::try_from(len).ok()?;
        let raw = rest.get(..len)?;
        let decoded = if huffman_coded {
            huffman::decode(raw, &mut self.scratch, MAX_DECODED)?
        } else {
            self.scratch.clear();
            self.scratch.extend_from_slice(raw.get(..MAX_DECODED.min(len)).unwrap_or_default());
            len
        };
        Some((decoded, rest.get(len..)?))
    }

    fn lookup(&self, index: u64) -> Option<(Name, Value)> {
        match index {
            0 => None,
            1..=61 => static_entry(index),
            _ => {
                let e = self.entries.get(usize::try_from(index - 62).ok()?)?;
                Some((e.name, e.value.clone()))
            }
        }
    }

    /// The name class and name length of an indexed name; None for an entry not known.
    fn lookup_name(&self, index: u64) -> Option<(Name, usize)> {
        match index {
            1..=61 => Some((static_entry(index).map_or(Name::Other, |(n, _)| n), static_name_len(index))),
            _ => usize::try_from(index.saturating_sub(62))
                .ok()
                .and_then(|i| self.entries.get(i))
                .map(|e| (e.name, e.name_len)),
        }
    }

    fn insert(&mut self, entry: Entry) {
        if entry.size > self.max_size {
            // Too big for the table: it empties it (RFC 7541 §4.4).
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(entry.size);
        self.size += entry.size;
        self.entries.push_front(entry);
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size.saturating_add(room) > self.max_size {
            let Some(old) = self.entries.pop_back() else {
                self.size = 0;
                return;
            };
            self.size = self.size.saturating_sub(old.size);
        }
    }
}

/// An HPACK integer with an `prefix`-bit prefix (RFC 7541 §5.1), capped at 2^40.
fn integer(b: &[u8], prefix: u32) -> Option<(u64, &[u8])> {
    let (first, mut rest) = b.split_first()?;
    let max = (1u64 << prefix) - 1;
    let mut value = u64::from(*first) & max;
    if value < max {
        return Some((value, rest));
    }
    let mut shift = 0u32;
    loop {
        let (byte, after) = rest.split_first()?;
        rest = after;
        value = value.checked_add(u64::from(byte & 0x7f).checked_shl(shift)?)?;
        if byte & 0x80 == 0 || value > 1 << 40 {
            return (value <= 1 << 40).then_some((value, rest));
        }
        shift += 7;
    }
}

fn name_class(name: &[u8]) -> Name {
    match name {
        b":method" => Name::Method,
        b":path" => Name::Path,
        b":status" => Name::Status,
        b":authority" => Name::Authority,
        b"grpc-status" => Name::GrpcStatus,
        _ => Name::Other,
    }
}

/// A kept value parsed from its decoded bytes; values of other names are never kept.
fn parse_value(name: Name, v: &[u8]) -> Value {
    match name {
        Name::Method => Value::Method(Method::from_token(v)),
        Name::Path => {
            // As HTTP/1.x paths are kept: no query or fragment, bounded, redacted when read.
            let end = v.iter().position(|&c| c == b'?' || c == b'#').unwrap_or(v.len());
            Value::Path(RequestPath::new(v.get(..end).unwrap_or_default()))
        }
        Name::Status | Name::GrpcStatus => {
            std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).map_or(Value::Unkept, Value::Code)
        }
        Name::Authority | Name::Other => Value::Unkept,
    }
}

/// The static table (RFC 7541 Appendix A) as far as the kept fields go.
fn static_entry(index: u64) -> Option<(Name, Value)> {
    Some(match index {
        1 => (Name::Authority, Value::Unkept),
        2 => (Name::Method, Value::Method(Method::Get)),
        3 => (Name::Method, Value::Method(Method::Post)),
        4 => (Name::Path, Value::Path("/".into())),
        5 => (Name::Path, Value::Path("/index.html".into())),
        6 | 7 => (Name::Other, Value::Unkept), // :scheme
        8 => (Name::Status, Value::Code(200)),
        9 => (Name::Status, Value::Code(204)),
        10 => (Name::Status, Value::Code(206)),
        11 => (Name::Status, Value::Code(304)),
        12 => (Name::Status, Value::Code(400)),
        13 => (Name::Status, Value::Code(404)),
        14 => (Name::Status, Value::Code(500)),
        15..=61 => (Name::Other, Value::Unkept),
        _ => return None,
    })
}

/// Names of the static table's entries (RFC 7541 Appendix A), for entry sizes.
const STATIC_NAMES: [&str; 61] = [
    ":authority",
    ":method",
    ":method",
    ":path",
    ":path",
    ":scheme",
    ":scheme",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
];

fn static_name_len(index: u64) -> usize {
    usize::try_from(index).ok().and_then(|i| STATIC_NAMES.get(i.checked_sub(1)?)).map_or(0, |n| n.len())
}

#[cfg(test)]
mod tests;
