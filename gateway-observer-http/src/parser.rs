//! One direction of an HTTP/1.x connection: an incremental framing state machine over the
//! segments the kernel reports — the first bytes of a syscall's data, an unseen middle skipped by
//! count, the last bytes.
//!
//! It keeps no header value and no body byte: only the method, at most [`MAX_PATH`] bytes of the
//! path, the status code and the framing facts (content length, chunked, close, upgrade). The
//! partial state carried between segments is a few fixed-size fields, never a copy of the input.
//! Nothing here logs. [`super::connection`] pairs the messages of the two directions.
//!
//! Pull style: [`Parser::step`] returns one [`Event`] at a time, so that the caller can decide a
//! response's body framing (it depends on the request method) with [`Parser::set_body`] after
//! [`Event::Head`] and before the parser goes on.

mod bytes;
mod cursor;
mod message;

use super::exchange::Method;
pub use super::head::looks_like_start;
use super::head::{Accumulated, VERSION_PREFIX, find_lf, is_method_byte, is_tchar, is_version, push_lower};
pub use cursor::Cursor;
use message::default_body;
pub use message::{Body, Event, Framing, Kind, MAX_PATH, StartLine, request_body, response_body};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between messages (bare CR/LF skipped).
    Idle,
    Method,
    Target,
    ReqVersion(u8),
    ReqLineEnd,
    RespVersion(u8),
    RespSpace,
    StatusCode(u8),
    Reason,
    LineStart,
    Name,
    Value,
    /// An obs-fold continuation line: skipped.
    Fold,
    /// A CR at a line start: the header block ends at the LF.
    HeadEnd,
    /// Head reported; waiting for [`Parser::set_body`].
    AwaitBody,
    EndNow(After),
    Body(u64),
    ChunkSize {
        digits: u8,
        value: u64,
        ext: bool,
    },
    ChunkData(u64),
    ChunkDataEnd {
        cr: bool,
    },
    TrailerStart,
    TrailerLine,
    TrailerEnd,
    UntilClose,
    Unknown,
    Held,
    Stopped,
}

impl State {
    fn in_head(self) -> bool {
        matches!(
            self,
            State::Method
                | State::Target
                | State::ReqVersion(_)
                | State::ReqLineEnd
                | State::RespVersion(_)
                | State::RespSpace
                | State::StatusCode(_)
                | State::Reason
                | State::LineStart
                | State::Name
                | State::Value
                | State::Fold
                | State::HeadEnd
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Idle,
    Held,
    Stopped,
}

/// One direction's parser.
#[derive(Clone, Debug)]
pub struct Parser {
    kind: Kind,
    state: State,
    acc: Accumulated,
    start_reported: bool,
    msg_bytes: u64,
    last_ts_ns: u64,
    first_ts_ns: u64,
    first_tid: u32,
    first_queued_since_ns: Option<u64>,
    lost_sync: u64,
}

impl Parser {
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            state: State::Idle,
            acc: Accumulated::default(),
            start_reported: false,
            msg_bytes: 0,
            last_ts_ns: 0,
            first_ts_ns: 0,
            first_tid: 0,
            first_queued_since_ns: None,
            lost_sync: 0,
        }
    }

    /// Times a message's framing became unknown.
    pub fn lost_sync(&self) -> u64 {
        self.lost_sync
    }

    /// Bytes of the message in progress so far.
    pub fn msg_bytes(&self) -> u64 {
        self.msg_bytes
    }

    /// Time of the last segment with bytes of the message in progress.
    pub fn last_ts_ns(&self) -> u64 {
        self.last_ts_ns
    }

    pub fn is_unknown(&self) -> bool {
        self.state == State::Unknown
    }

    /// Chooses the body framing after [`Event::Head`].
    pub fn set_body(&mut self, body: Body) {
        if self.state == State::AwaitBody {
            self.apply_body(body);
        }
    }

    /// Parsing resumes after a held message (a CONNECT that was refused).
    pub fn release(&mut self) {
        if self.state == State::Held {
            self.state = State::Idle;
        }
    }

    /// Ends a message whose framing is unknown, at the last segment that carried its bytes.
    pub fn end_unknown(&mut self) -> Option<Event> {
        (self.state == State::Unknown).then(|| self.end(self.last_ts_ns, After::Idle))
    }

    /// The connection closed at `ts_ns`: a body delimited by the close ends now, one of unknown
    /// framing at its last bytes. None when no message was in progress or it was cut short.
    pub fn close(&mut self, ts_ns: u64) -> Option<Event> {
        let event = match self.state {
            State::UntilClose => Some(self.end(ts_ns, After::Stopped)),
            State::Unknown => Some(self.end(self.last_ts_ns, After::Stopped)),
            _ => None,
        };
        self.state = State::Stopped;
        event
    }

    /// Stops parsing for good (the connection is not HTTP, or was upgraded).
    pub fn stop(&mut self) {
        self.state = State::Stopped;
    }

    /// The next event from this segment, or None when it is used up.
    pub fn step(&mut self, cur: &mut Cursor) -> Option<Event> {
        if std::mem::take(&mut cur.fresh) && self.state == State::Unknown && looks_like_start(self.kind, cur.vis) {
            // A new message starts this segment: the one of unknown framing ended before it.
            return Some(self.end(self.last_ts_ns, After::Idle));
        }
        loop {
            match self.state {
                State::Stopped => return None,
                State::AwaitBody => {
                    let body = default_body(self.kind, &self.acc, &self.acc.framing);
                    self.apply_body(body);
                    continue;
                }
                State::EndNow(after) => return Some(self.end(cur.ts_ns, after)),
                _ => {}
            }
            if !cur.vis.is_empty() {
                if let Some(event) = self.consume(cur) {
                    return Some(event);
                }
            } else if cur.gap > 0 {
                if let Some(event) = self.skip_unseen(cur) {
                    return Some(event);
                }
            } else if !cur.rest.is_empty() {
                cur.vis = std::mem::take(&mut cur.rest);
            } else {
                if !std::mem::replace(&mut cur.end_checked, true)
                    && self.state == State::Unknown
                    && cur.ends_with_last_chunk()
                {
                    return Some(self.end(cur.ts_ns, After::Idle));
                }
                return None;
            }
        }
    }

    fn apply_body(&mut self, body: Body) {
        self.state = match body {
            Body::None | Body::Length(0) => State::EndNow(After::Idle),
            Body::Hold => State::EndNow(After::Held),
            Body::Upgrade => State::EndNow(After::Stopped),
            Body::Length(n) => State::Body(n),
            Body::Chunked => State::ChunkSize { digits: 0, value: 0, ext: false },
            Body::UntilClose => State::UntilClose,
            Body::Unknown => {
                self.lost_sync = self.lost_sync.saturating_add(1);
                State::Unknown
            }
        };
    }

    fn end(&mut self, ts_ns: u64, after: After) -> Event {
        let event = Event::End { bytes: self.msg_bytes, ts_ns };
        self.state = match after {
            After::Idle => State::Idle,
            After::Held => State::Held,
            After::Stopped => State::Stopped,
        };
        self.msg_bytes = 0;
        self.start_reported = false;
        event
    }

    fn begin(&mut self, cur: &Cursor) {
        self.acc = Accumulated::default();
        self.start_reported = false;
        self.msg_bytes = 0;
        self.first_ts_ns = cur.ts_ns;
        self.first_tid = cur.tid;
        self.first_queued_since_ns = cur.queued_since_ns;
        self.last_ts_ns = cur.ts_ns;
        self.state = match self.kind {
            Kind::Request => State::Method,
            Kind::Response => State::RespVersion(0),
        };
    }

    fn start_event(&mut self) -> Event {
        self.start_reported = true;
        Event::Start(StartLine {
            method: match self.kind {
                Kind::Request => self.acc.method(),
                Kind::Response => Method::Other,
            },
            path: self.acc.path(),
            status: self.acc.status(),
            ts_ns: self.first_ts_ns,
            tid: self.first_tid,
            queued_since_ns: self.first_queued_since_ns,
        })
    }

    fn head_event(&mut self, complete: bool) -> Event {
        self.state = State::AwaitBody;
        self.acc.framing.complete = complete;
        Event::Head(self.acc.framing)
    }

    fn not_http(&mut self, cur: &Cursor) -> Event {
        self.state = State::Stopped;
        Event::NotHttp { bytes: self.msg_bytes.saturating_add(cur.remaining()) }
    }

    fn count(&mut self, n: u64, cur: &Cursor) {
        self.msg_bytes = self.msg_bytes.saturating_add(n);
        self.last_ts_ns = cur.ts_ns;
    }
}

#[cfg(test)]
mod tests;
