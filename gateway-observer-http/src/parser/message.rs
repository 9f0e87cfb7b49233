//! What a parser reports of one message (its start line, framing and end) and what ends a
//! message's body: the framing rules of RFC 9112 §6.3.

use super::Accumulated;
use crate::exchange::Method;

/// The longest path kept, in bytes.
pub const MAX_PATH: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request,
    Response,
}

/// A message's start line, reported once it is parsed (or, when its end was unseen, as much of it
/// as was seen). Time, thread and queueing time are those of the segment with its first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartLine {
    pub method: Method,
    /// Without query and fragment, at most [`MAX_PATH`] bytes.
    pub path: crate::redact::RequestPath,
    pub status: Option<u16>,
    pub ts_ns: u64,
    pub tid: u32,
    pub queued_since_ns: Option<u64>,
}

/// What the header block says about the body; `complete` is false when part of the block was
/// unseen, so that framing headers may have been missed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Framing {
    pub complete: bool,
    pub content_length: Option<u64>,
    /// A Transfer-Encoding header was present.
    pub transfer_encoding: bool,
    /// The last transfer coding is `chunked`.
    pub chunked: bool,
    /// `Connection: close`.
    pub close: bool,
    /// An `Upgrade` header or `Connection: upgrade`.
    pub upgrade: bool,
    /// A malformed or conflicting Content-Length.
    pub invalid_length: bool,
}

/// How a message's body is delimited, decided after its header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
    /// Everything until the connection closes.
    UntilClose,
    /// Framing not known: the message ends by a fallback (see [`super::connection`]).
    Unknown,
    /// No body, and the bytes after it are not parsed until [`Parser::release`] (a CONNECT
    /// request: the client may send tunnel bytes before the answer).
    Hold,
    /// No body, and nothing after it is HTTP (a 101 or a 2xx to CONNECT).
    Upgrade,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Start(StartLine),
    /// The header block ended (or was cut by unseen bytes). The caller may call
    /// [`Parser::set_body`] before the next step; otherwise [`default_body`] applies.
    Head(Framing),
    /// The message ended; `ts_ns` is the time of the segment with its last byte.
    End {
        bytes: u64,
        ts_ns: u64,
    },
    /// The bytes at a message start are not HTTP/1.x; `bytes` counts from that message's first
    /// byte to the end of the segment. The parser stops.
    NotHttp {
        bytes: u64,
    },
}

/// The framing a request's header block implies (RFC 9112 §6.3).
pub fn request_body(method: Method, framing: &Framing) -> Body {
    if !framing.complete || framing.invalid_length {
        return Body::Unknown;
    }
    if method == Method::Connect {
        return Body::Hold;
    }
    if framing.transfer_encoding {
        return if framing.chunked { Body::Chunked } else { Body::Unknown };
    }
    match framing.content_length {
        Some(n) => Body::Length(n),
        None => Body::None,
    }
}

/// The framing of a response to a `request` (None: not known, taken as GET).
pub fn response_body(status: Option<u16>, request: Option<Method>, framing: &Framing) -> Body {
    if status == Some(101) {
        return Body::Upgrade;
    }
    if !framing.complete || (framing.invalid_length && !framing.transfer_encoding) {
        return Body::Unknown;
    }
    let status = status.unwrap_or(200);
    if matches!(status, 100..=199 | 204 | 304) || request == Some(Method::Head) {
        return Body::None;
    }
    if request == Some(Method::Connect) && (200..=299).contains(&status) {
        return Body::Upgrade;
    }
    if framing.transfer_encoding {
        return if framing.chunked { Body::Chunked } else { Body::UntilClose };
    }
    match framing.content_length {
        Some(n) => Body::Length(n),
        None => Body::UntilClose,
    }
}

/// The framing used when the caller does not choose: a request's own, a response's as if to GET.
pub(super) fn default_body(kind: Kind, start: &Accumulated, framing: &Framing) -> Body {
    match kind {
        Kind::Request => request_body(start.method(), framing),
        Kind::Response => response_body(start.status(), None, framing),
    }
}
