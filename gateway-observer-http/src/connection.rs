//! One connection of a watched gateway: its two directions' [`Parser`]s and the FIFO that pairs
//! each request with its response (keep-alive, pipelining, interim 1xx, upgrades).
//!
//! Fallbacks when a message's framing is unknown (its header block was partly unseen, or a chunk
//! size line fell in unseen bytes): a request ends when its response starts; a response ends when
//! the next request starts, when a segment visibly ends with the last chunk, when a segment starts
//! with a new status line, or at close. Each counts once in [`Connection::lost_sync`].
//!
//! Memory per connection is fixed apart from the in-flight FIFO, capped at [`MAX_IN_FLIGHT`].
//! No header value or body byte is kept; nothing here logs.

use std::collections::VecDeque;

use super::exchange::{Direction, Exchange, ExchangeOutcome, InFlight, Method, Pending, Role, Segment, finish};
use super::h2::{self, Session, Signals};
use super::parser::{self, Cursor, Event, Framing, Kind, Parser, StartLine};

/// Requests kept waiting for their responses; beyond, the oldest is dropped.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Bytes that open with HTTP/2's client preface: at least "PRI " (no HTTP/1.x method), so a
/// preface cut over syscalls is still known.
fn opens_with_preface(head: &[u8]) -> bool {
    let preface = h2::PREFACE.as_slice();
    let head = head.get(..preface.len().min(head.len())).unwrap_or_default();
    head.len() >= 4 && preface.starts_with(head)
}

/// Segments of a connection first seen mid-way that may be looked at for HTTP/2 frames before
/// it is judged neither HTTP/1.x nor HTTP/2.
const H2_PROBES: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Http,
    NotHttp,
    Upgraded,
    /// HTTP/2: the session does the work.
    H2,
    /// Not HTTP/1.x from the first bytes seen, which were not at an HTTP/2 frame boundary either:
    /// the next few segments are probed for frames (a connection first seen mid-way).
    MaybeH2(u8),
}

/// Pairs the requests and responses of one connection.
#[derive(Clone, Debug)]
pub struct Connection {
    role: Role,
    mode: Mode,
    request: Parser,
    response: Parser,
    pending: VecDeque<Pending>,
    next_seq: u64,
    /// The pending entry the request parser is filling.
    open_request: Option<u64>,
    /// The pending entry the response being parsed answers.
    open_response: Option<u64>,
    /// Status of the response being parsed (an interim one included).
    response_status: Option<u16>,
    closed: bool,
    non_http_bytes: u64,
    dropped_in_flight: u64,
    /// No byte seen yet: the first one tells HTTP/2 from HTTP/1.x.
    fresh: bool,
    h2: Option<Box<Session>>,
    /// HTTP/2 told from the frames of a connection first seen mid-way, not yet taken by
    /// `take_h2_mid_way`: the kernel, which never saw the preface, is to walk its frames.
    h2_mid_way_untold: bool,
    /// The HTTP/2 session was started as one first seen mid-way.
    h2_mid_way: bool,
    /// Followed since its handshake: its first bytes each way are its first.
    from_start: bool,
}

impl Connection {
    /// A connection whose first bytes may have been missed (first seen at a transfer, or parsed
    /// afresh after lost records).
    pub fn new(role: Role) -> Self {
        Self {
            role,
            mode: Mode::Http,
            request: Parser::new(Kind::Request),
            response: Parser::new(Kind::Response),
            pending: VecDeque::new(),
            next_seq: 0,
            open_request: None,
            open_response: None,
            response_status: None,
            closed: false,
            non_http_bytes: 0,
            dropped_in_flight: 0,
            fresh: true,
            h2: None,
            h2_mid_way_untold: false,
            h2_mid_way: false,
            from_start: false,
        }
    }

    /// A connection followed since its handshake.
    pub fn from_its_start(role: Role) -> Self {
        Self { from_start: true, ..Self::new(role) }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Feeds one segment; finished exchanges are pushed to `out`.
    pub fn on_segment(&mut self, dir: Direction, seg: &Segment, out: &mut Vec<Exchange>) {
        let is_request = matches!((self.role, dir), (Role::Server, Direction::Read) | (Role::Client, Direction::Write));
        if std::mem::replace(&mut self.fresh, false) && !self.closed {
            self.detect_h2(is_request, seg);
        }
        match self.mode {
            _ if self.closed => return,
            Mode::Http => {}
            Mode::MaybeH2(_) if is_request && opens_with_preface(seg.head) => {
                // The server wrote first (gRPC's C core sends its SETTINGS as it accepts), in a
                // syscall whose frames did not show in its head: the client's preface says the
                // session starts here.
                self.start_h2(Session::new(self.role, true));
            }
            Mode::MaybeH2(left) => {
                if h2::frames::plausible_start(seg.head, seg.len) {
                    self.start_h2_mid_way();
                } else {
                    self.mode = if left > 1 { Mode::MaybeH2(left - 1) } else { Mode::NotHttp };
                    self.non_http_bytes = self.non_http_bytes.saturating_add(seg.len);
                    return;
                }
            }
            Mode::NotHttp => {
                self.non_http_bytes = self.non_http_bytes.saturating_add(seg.len);
                return;
            }
            Mode::Upgraded => return,
            Mode::H2 => {}
        }
        if self.h2_mid_way && is_request && opens_with_preface(seg.head) {
            // Taken for one first seen mid-way because the server wrote first (gRPC's C core sends
            // its SETTINGS as it accepts) on a connection not followed since its handshake: the
            // client's preface says the session starts here.
            self.start_h2(Session::new(self.role, true));
        }
        if let Some(session) = self.h2.as_mut() {
            session.on_segment(dir, seg, out);
            return;
        }
        let mut cur = Cursor::new(seg);
        if is_request {
            while let Some(event) = self.request.step(&mut cur) {
                self.on_request_event(event, out);
            }
            let (bytes, last_ts_ns) = (self.request.msg_bytes(), self.request.last_ts_ns());
            if let Some(p) = self.open_request.and_then(|seq| self.find(seq)) {
                p.info.request_bytes = bytes;
                p.request_end_ns = last_ts_ns;
            }
        } else {
            while let Some(event) = self.response.step(&mut cur) {
                self.on_response_event(event, out);
            }
        }
    }

    /// The connection closed (or was reset) at `ts_ns`: a response delimited by the close
    /// completes, every other request in flight finishes as Closed. Later segments are ignored.
    pub fn on_close(&mut self, ts_ns: u64, out: &mut Vec<Exchange>) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        if let Some(session) = self.h2.as_mut() {
            session.on_close(ts_ns, out);
            return;
        }
        if self.mode == Mode::Http
            && let Some(event) = self.response.close(ts_ns)
        {
            self.on_response_event(event, out);
        }
        let open_response = self.open_response;
        let partial_response = self.response.msg_bytes();
        for p in self.pending.drain(..) {
            let extra = if Some(p.seq) == open_response { partial_response } else { 0 };
            out.push(finish(p, ts_ns, extra, ExchangeOutcome::Closed));
        }
        self.request.stop();
        self.response.stop();
    }

    /// Requests whose response is not complete, oldest first.
    pub fn in_flight(&self) -> impl Iterator<Item = &InFlight> {
        self.pending.iter().map(|p| &p.info).chain(self.h2.iter().flat_map(|s| s.in_flight()))
    }

    /// Still an exchange of requests (HTTP/1.x or HTTP/2): not judged another protocol (TLS) and
    /// not upgraded (a websocket or tunnel, whose reader may legitimately pause).
    pub fn exchanges_requests(&self) -> bool {
        matches!(self.mode, Mode::Http | Mode::H2)
    }

    /// False once the traffic was judged neither HTTP/1.x nor HTTP/2 (or while it is probed).
    pub fn is_http(&self) -> bool {
        !matches!(self.mode, Mode::NotHttp | Mode::MaybeH2(_))
    }

    /// True once after HTTP/2 was told from the frames of a connection first seen mid-way.
    pub fn take_h2_mid_way(&mut self) -> bool {
        std::mem::take(&mut self.h2_mid_way_untold)
    }

    /// The connection speaks HTTP/2.
    pub fn is_h2(&self) -> bool {
        self.mode == Mode::H2
    }

    /// HTTP/2 signals (refused and reset streams, GOAWAY); zero for HTTP/1.x.
    pub fn h2_signals(&self) -> Signals {
        self.h2.as_ref().map(|s| s.signals(None)).unwrap_or_default()
    }

    /// As [`Connection::h2_signals`], a flow-control stall still open timed up to `now_ns`.
    pub fn h2_signals_at(&self, now_ns: u64) -> Signals {
        self.h2.as_ref().map(|s| s.signals(Some(now_ns))).unwrap_or_default()
    }

    /// An HTTP/2 flow-control stall is open now.
    pub fn h2_stalled(&self) -> bool {
        self.h2.as_ref().is_some_and(|s| s.stalled())
    }

    /// Bytes ignored because they were not HTTP.
    pub fn non_http_bytes(&self) -> u64 {
        self.non_http_bytes
    }

    /// Times a message's framing was lost and its end found by a fallback.
    pub fn lost_sync(&self) -> u64 {
        let h2 = self.h2.as_ref().map_or(0, |s| s.lost_sync());
        self.request.lost_sync().saturating_add(self.response.lost_sync()).saturating_add(h2)
    }

    /// Requests dropped unanswered because more than [`MAX_IN_FLIGHT`] were waiting.
    pub fn dropped_in_flight(&self) -> u64 {
        self.dropped_in_flight.saturating_add(self.h2.as_ref().map_or(0, |s| s.dropped_in_flight()))
    }

    fn find(&mut self, seq: u64) -> Option<&mut Pending> {
        self.pending.iter_mut().find(|p| p.seq == seq)
    }

    /// The first bytes of the connection: the client preface, or (first seen mid-way) frames.
    fn detect_h2(&mut self, is_request: bool, seg: &Segment) {
        if is_request && opens_with_preface(seg.head) {
            self.start_h2(Session::new(self.role, true));
        } else if h2::frames::plausible_start(seg.head, seg.len) {
            if self.from_start && !is_request {
                // A server that writes first (its SETTINGS, as over TLS) on a connection followed
                // since its handshake: the client's preface is still to come, and the kernel
                // will see it. Told mid-way, the kernel's mark could reach the connection before
                // the preface, and its walk would then miss it.
                self.start_h2(Session::new(self.role, true));
            } else {
                self.start_h2_mid_way();
            }
        }
    }

    fn start_h2_mid_way(&mut self) {
        self.start_h2(Session::midway(self.role));
        self.h2_mid_way = true;
        self.h2_mid_way_untold = true;
    }

    fn start_h2(&mut self, session: Session) {
        self.h2_mid_way = false;
        self.mode = Mode::H2;
        self.h2 = Some(Box::new(session));
        self.request.stop();
        self.response.stop();
    }

    fn not_http(&mut self, bytes: u64) {
        // Seen from its start it would have been recognised; mid-way, frames may still show.
        if self.next_seq == 0 && self.mode == Mode::Http {
            self.mode = Mode::MaybeH2(H2_PROBES);
            self.non_http_bytes = self.non_http_bytes.saturating_add(bytes);
            self.request.stop();
            self.response.stop();
            return;
        }
        self.mode = Mode::NotHttp;
        self.non_http_bytes = self.non_http_bytes.saturating_add(bytes);
        self.request.stop();
        self.response.stop();
    }

    fn on_request_event(&mut self, event: Event, out: &mut Vec<Exchange>) {
        match event {
            Event::Start(start) => {
                // A response of unknown framing ends when the next request starts.
                if let Some(end) = self.response.end_unknown() {
                    self.on_response_event(end, out);
                }
                self.push(start);
            }
            Event::Head(framing) => {
                let method = self.open_request.and_then(|seq| self.find(seq)).map_or(Method::Other, |p| p.info.method);
                self.request.set_body(parser::request_body(method, &framing));
            }
            Event::End { bytes, ts_ns } => {
                if let Some(p) = self.open_request.take().and_then(|seq| self.find(seq)) {
                    p.info.request_bytes = bytes;
                    p.request_end_ns = ts_ns;
                    p.info.request_complete = true;
                }
            }
            Event::NotHttp { bytes } => self.not_http(bytes),
        }
    }

    fn push(&mut self, start: StartLine) {
        if self.pending.len() >= MAX_IN_FLIGHT
            && let Some(dropped) = self.pending.pop_front()
        {
            self.dropped_in_flight = self.dropped_in_flight.saturating_add(1);
            if self.open_response == Some(dropped.seq) {
                self.open_response = None;
            }
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.pending.push_back(Pending {
            seq,
            info: InFlight {
                method: start.method,
                path: start.path,
                tid: start.tid,
                request_start_ns: start.ts_ns,
                queued_since_ns: start.queued_since_ns,
                request_bytes: self.request.msg_bytes(),
                response_started: false,
                request_complete: false,
            },
            request_end_ns: start.ts_ns.max(self.request.last_ts_ns()),
            status: None,
            grpc_status: None,
            response_start_ns: None,
            response_bytes: 0,
        });
        self.open_request = Some(seq);
    }

    fn on_response_event(&mut self, event: Event, out: &mut Vec<Exchange>) {
        match event {
            Event::Start(start) => {
                let is_final = !matches!(start.status, Some(100..=199)) || start.status == Some(101);
                let front = self.pending.front().map(|p| p.seq);
                // A request of unknown framing ends when its response starts.
                if is_final
                    && front.is_some()
                    && self.open_request == front
                    && let Some(end) = self.request.end_unknown()
                {
                    self.on_request_event(end, out);
                }
                self.open_response = front;
                self.response_status = start.status;
                if is_final && let Some(p) = self.pending.front_mut() {
                    p.response_start_ns.get_or_insert(start.ts_ns);
                    p.info.response_started = true;
                    p.status = start.status;
                }
            }
            Event::Head(framing) => self.on_response_head(&framing),
            Event::End { bytes, ts_ns } => self.on_response_end(bytes, ts_ns, out),
            Event::NotHttp { bytes } => self.not_http(bytes),
        }
    }

    fn on_response_head(&mut self, framing: &Framing) {
        let method = self.open_response.and_then(|seq| self.find(seq)).map(|p| p.info.method);
        let body = parser::response_body(self.response_status, method, framing);
        self.response.set_body(body);
    }

    fn on_response_end(&mut self, bytes: u64, ts_ns: u64, out: &mut Vec<Exchange>) {
        let status = self.response_status.take();
        let Some(seq) = self.open_response.take() else { return };
        let Some(index) = self.pending.iter().position(|p| p.seq == seq) else { return };
        let Some(p) = self.pending.get_mut(index) else { return };
        p.response_bytes = p.response_bytes.saturating_add(bytes);
        let connect = p.info.method == Method::Connect;
        let outcome = match status {
            Some(101) => ExchangeOutcome::Upgraded,
            Some(100..=199) => return, // interim: the final response is still to come
            Some(200..=299) if connect => ExchangeOutcome::Upgraded,
            _ => ExchangeOutcome::Complete,
        };
        let Some(p) = self.pending.remove(index) else { return };
        if self.open_request == Some(seq) && outcome == ExchangeOutcome::Upgraded {
            self.open_request = None;
        }
        out.push(finish(p, ts_ns, 0, outcome));
        match outcome {
            ExchangeOutcome::Upgraded => {
                self.mode = Mode::Upgraded;
                self.request.stop();
                self.response.stop();
            }
            // A refused CONNECT: what the client sent after it is HTTP again.
            _ if connect => self.request.release(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod h2_start_tests;
#[cfg(test)]
mod tests;
