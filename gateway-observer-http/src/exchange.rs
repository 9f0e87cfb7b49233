//! What the HTTP layer takes in and gives out: a syscall's [`Segment`], the finished
//! [`Exchange`]s and the requests still [`InFlight`], and the words they are told in
//! ([`Role`], [`Direction`], [`Method`], [`ExchangeOutcome`]).

use super::redact::RequestPath;

/// Which end of the connection the gateway is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The gateway accepted the connection: it reads requests and writes responses.
    Server,
    /// The gateway connected to an upstream: it writes requests and reads responses.
    Client,
}

/// A data syscall's direction, from the gateway's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

/// What the kernel saw of one data syscall.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    pub ts_ns: u64,
    pub tid: u32,
    /// Bytes the syscall transferred.
    pub len: u64,
    /// The first bytes of them (at most 512).
    pub head: &'a [u8],
    /// The last bytes of them (at most 16), covering `[len - tail.len(), len)`.
    pub tail: &'a [u8],
    /// Reads: when the data first arrived in the socket.
    pub queued_since_ns: Option<u64>,
    /// HTTP/2 frame headers the kernel walked past the head (empty for most syscalls).
    pub walked: crate::h2::Walked<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Patch,
    Options,
    Connect,
    Trace,
    Other,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Patch => "PATCH",
            Method::Options => "OPTIONS",
            Method::Connect => "CONNECT",
            Method::Trace => "TRACE",
            Method::Other => "OTHER",
        }
    }

    /// The method a request-line token names (methods are case-sensitive).
    pub fn from_token(token: &[u8]) -> Self {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"PATCH" => Method::Patch,
            b"OPTIONS" => Method::Options,
            b"CONNECT" => Method::Connect,
            b"TRACE" => Method::Trace,
            _ => Method::Other,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeOutcome {
    /// The response was complete.
    Complete,
    /// The connection closed before the response was complete.
    Closed,
    /// A 101 or a 2xx to CONNECT: what follows is not HTTP and is not parsed.
    Upgraded,
}

impl ExchangeOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeOutcome::Complete => "complete",
            ExchangeOutcome::Closed => "closed",
            ExchangeOutcome::Upgraded => "upgraded",
        }
    }
}

/// One finished request/response pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub method: Method,
    /// The request target without query or fragment, at most 64 bytes; empty if unseen.
    pub path: RequestPath,
    /// The final status; None when no final response was seen.
    pub status: Option<u16>,
    /// gRPC's status (HTTP/2 `grpc-status`, from the trailers or a trailers-only response).
    pub grpc_status: Option<u16>,
    /// The thread that read (Server) or wrote (Client) the request's first bytes.
    pub tid: u32,
    pub request_start_ns: u64,
    /// When the request's first bytes arrived in the socket (from the segment that carried them:
    /// reads only, so Server role).
    pub queued_since_ns: Option<u64>,
    pub request_end_ns: u64,
    /// First bytes of the final response (interim 1xx responses do not count).
    pub response_start_ns: Option<u64>,
    /// Response complete, or the close.
    pub response_end_ns: u64,
    pub request_bytes: u64,
    /// Including interim 1xx responses.
    pub response_bytes: u64,
    pub outcome: ExchangeOutcome,
}

/// A request whose response is not complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub method: Method,
    pub path: RequestPath,
    pub tid: u32,
    pub request_start_ns: u64,
    pub queued_since_ns: Option<u64>,
    /// So far.
    pub request_bytes: u64,
    /// A final response has started.
    pub response_started: bool,
    /// The request's last byte was read: the gateway holds all of it. Until then the client may
    /// be the one that is slow (an upload, a client stalled mid-request).
    pub request_complete: bool,
}

/// A request waiting for its response (an HTTP/2 stream: `seq` is its id).
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) seq: u64,
    pub(crate) info: InFlight,
    /// The request's last byte so far.
    pub(crate) request_end_ns: u64,
    pub(crate) status: Option<u16>,
    pub(crate) grpc_status: Option<u16>,
    pub(crate) response_start_ns: Option<u64>,
    pub(crate) response_bytes: u64,
}

/// The exchange a pending request makes once its response ends (or its connection closes).
pub(crate) fn finish(
    p: Pending,
    response_end_ns: u64,
    extra_response_bytes: u64,
    outcome: ExchangeOutcome,
) -> Exchange {
    Exchange {
        method: p.info.method,
        path: p.info.path,
        status: p.status,
        grpc_status: p.grpc_status,
        tid: p.info.tid,
        request_start_ns: p.info.request_start_ns,
        queued_since_ns: p.info.queued_since_ns,
        request_end_ns: p.request_end_ns,
        response_start_ns: p.response_start_ns,
        response_end_ns,
        request_bytes: p.info.request_bytes,
        response_bytes: p.response_bytes.saturating_add(extra_response_bytes),
        outcome,
    }
}
