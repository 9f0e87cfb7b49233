//! One HTTP/2 connection: both directions' frames walked, their header blocks decoded, and each
//! stream turned into a request ([`Exchange`]) as HTTP/1.x requests are.
//!
//! A stream starts at the request's HEADERS (its timing is the first frame's syscall) and ends at
//! the response's END_STREAM, or at RST_STREAM. Streams opened by the responder (server push) and
//! streams opened before the connection was first seen are not requests here. When the response
//! direction loses sync, an END_STREAM may pass unseen: every stream open then ends at that
//! syscall, so none stays in flight forever.

use std::collections::VecDeque;

use super::flow::{Flow, Stalls};
use super::frames::{
    self, CONTINUATION, DATA, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY, Frame, GOAWAY, HEADERS, Piece, RST_STREAM,
    SyscallInfo, Walker,
};
use super::hpack::Decoder;
use super::walked;
use crate::connection::MAX_IN_FLIGHT;
use crate::exchange::{Direction, Exchange, ExchangeOutcome, InFlight, Method, Pending, Role, Segment, finish};
use crate::parser::Cursor;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A header block (HEADERS and its CONTINUATIONs) kept at most; the pseudo-headers come first.
const MAX_BLOCK: usize = 64 * 1024;
const REFUSED_STREAM: u32 = 0x7;

/// A header block being gathered.
#[derive(Clone, Debug, Default)]
struct Block {
    stream: u32,
    bytes: Vec<u8>,
    whole: bool,
    end_stream: bool,
    wire_bytes: u64,
    start: Option<SyscallInfo>,
}

/// One direction's walk and decoding context.
#[derive(Clone, Debug, Default)]
struct Side {
    walker: Walker,
    hpack: Decoder,
    block: Block,
    /// Preface bytes still to skip before the first frame.
    preface_left: u64,
}

/// Signals an HTTP/2 connection gives beyond its requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// Streams reset with REFUSED_STREAM (the server would not take them).
    pub refused_streams: u64,
    /// Streams reset with another error.
    pub reset_streams: u64,
    pub goaways: u64,
    /// Times a direction's frame walk resumed after losing sync.
    pub resyncs: u64,
    /// Flow-control stalls of the gateway's sending (responses on connections it accepted,
    /// requests on those it opened), and of its peer's.
    pub gateway_stalls: Stalls,
    pub peer_stalls: Stalls,
}

#[derive(Clone, Debug)]
pub struct Session {
    role: Role,
    requests: Side,
    responses: Side,
    streams: VecDeque<Pending>,
    highest_stream: u32,
    signals: Signals,
    flow: Flow,
    dropped_in_flight: u64,
    /// Syscalls whose frames past the head came from the kernel's walk.
    walked_syscalls: u64,
    /// Scratch for a syscall's pieces (no allocation per syscall).
    pieces: Vec<Piece<'static>>,
}

impl Session {
    /// A connection seen from its start; the client's preface is still to come on the request
    /// direction when `preface` is set.
    pub fn new(role: Role, preface: bool) -> Self {
        let mut session = Self {
            role,
            requests: Side::default(),
            responses: Side::default(),
            streams: VecDeque::new(),
            highest_stream: 0,
            signals: Signals::default(),
            flow: Flow::fresh(),
            dropped_in_flight: 0,
            walked_syscalls: 0,
            pieces: Vec::new(),
        };
        session.requests.preface_left = if preface { PREFACE.len() as u64 } else { 0 };
        session
    }

    /// A connection first seen mid-way: each direction waits for a syscall that starts with a
    /// frame; header blocks decode as far as the static table and later entries allow.
    pub fn midway(role: Role) -> Self {
        let mut session = Self::new(role, false);
        session.requests.walker = Walker::lost();
        session.responses.walker = Walker::lost();
        session.flow = Flow::unknown();
        session
    }

    /// The signals so far; with `now_ns`, a flow-control stall still open counts its time up to
    /// then (without, only finished stalls are timed).
    pub fn signals(&self, now_ns: Option<u64>) -> Signals {
        let gateway_requests = self.role == Role::Client;
        Signals {
            resyncs: self.requests.walker.resyncs().saturating_add(self.responses.walker.resyncs()),
            gateway_stalls: self.flow.stalls(gateway_requests, now_ns),
            peer_stalls: self.flow.stalls(!gateway_requests, now_ns),
            ..self.signals
        }
    }

    /// A flow-control stall is open now: its time grows until a frame ends it.
    pub fn stalled(&self) -> bool {
        self.flow.stalled()
    }

    /// Stream windows followed now (bounded by `flow::MAX_STREAMS` per direction).
    pub fn flow_streams(&self) -> usize {
        self.flow.streams()
    }

    pub fn lost_sync(&self) -> u64 {
        self.requests.walker.lost_sync().saturating_add(self.responses.walker.lost_sync())
    }

    /// Header blocks that could not be decoded to their end.
    pub fn broken_blocks(&self) -> u64 {
        self.requests.hpack.broken_blocks().saturating_add(self.responses.hpack.broken_blocks())
    }

    /// Syscalls whose frames past the head came from the kernel's walk.
    pub fn walked_syscalls(&self) -> u64 {
        self.walked_syscalls
    }

    pub fn dropped_in_flight(&self) -> u64 {
        self.dropped_in_flight
    }

    /// Still waiting for a first syscall that starts with frames (both directions).
    pub fn unsynced(&self) -> bool {
        self.requests.walker.is_lost() && self.responses.walker.is_lost()
    }

    pub fn in_flight(&self) -> impl Iterator<Item = &InFlight> {
        self.streams.iter().map(|p| &p.info)
    }

    pub fn on_segment(&mut self, dir: Direction, seg: &Segment, out: &mut Vec<Exchange>) {
        let is_request = matches!((self.role, dir), (Role::Server, Direction::Read) | (Role::Client, Direction::Write));
        let (head, gap, tail) = Cursor::new(seg).parts();
        let mut len = seg.len;
        let side = if is_request { &mut self.requests } else { &mut self.responses };
        if is_request && side.walker.is_lost() && head.starts_with(PREFACE) {
            // The server spoke first (its SETTINGS): the client's side starts here after all.
            side.walker = Walker::new();
            side.preface_left = PREFACE.len() as u64;
            self.flow.preface();
        }
        let mut pieces = reuse(std::mem::take(&mut self.pieces));
        // The kernel's walk began where this side's walker says the next header is: after the
        // preface bytes still to skip, after the rest of a frame the last syscall left
        // unfinished (a header's included, whose length this syscall's first bytes may complete),
        // at the syscall's start otherwise. Anywhere else it walked payload bytes.
        let preface_here = side.preface_left.min(seg.len);
        let expected =
            side.walker.to_next_header(head).map(|rest| if side.preface_left > 0 { preface_here } else { rest });
        if !seg.walked.is_empty() && expected == Some(seg.walked.origin) {
            walked::pieces(seg.head, seg.len, seg.tail, &seg.walked, &mut pieces);
            self.walked_syscalls = self.walked_syscalls.saturating_add(1);
        } else {
            pieces.clear();
            pieces.extend([Piece::Seen(head), Piece::Unseen(gap), Piece::Seen(tail)]);
        }
        if side.preface_left > 0 {
            let skipped = skip(&mut pieces, side.preface_left);
            side.preface_left -= skipped;
            len = len.saturating_sub(skipped);
        }
        let info = SyscallInfo { ts_ns: seg.ts_ns, tid: seg.tid, queued_since_ns: seg.queued_since_ns };
        let mut walker = std::mem::take(&mut side.walker);
        let in_sync = walker.feed(info, len, &pieces, &mut |frame| self.on_frame(is_request, &frame, out));
        self.pieces = reuse(pieces);
        let side = if is_request { &mut self.requests } else { &mut self.responses };
        side.walker = walker;
        if !in_sync {
            self.flow.lost(seg.ts_ns);
            side.block = Block::default();
            side.hpack.forget_all();
            if !is_request {
                self.end_all(seg.ts_ns, ExchangeOutcome::Complete, out);
            }
        }
    }

    /// The connection closed: every stream still open ends as Closed.
    pub fn on_close(&mut self, ts_ns: u64, out: &mut Vec<Exchange>) {
        self.flow.close(ts_ns);
        self.end_all(ts_ns, ExchangeOutcome::Closed, out);
    }

    fn end_all(&mut self, ts_ns: u64, outcome: ExchangeOutcome, out: &mut Vec<Exchange>) {
        out.extend(self.streams.drain(..).map(|p| finish(p, ts_ns, 0, outcome)));
    }

    fn on_frame(&mut self, is_request: bool, frame: &Frame, out: &mut Vec<Exchange>) {
        self.flow.on_frame(is_request, frame);
        let h = frame.header;
        let wire = u64::from(h.len) + frames::HEADER_LEN as u64;
        if !is_request
            && h.stream != 0
            && h.kind != HEADERS
            && h.kind != CONTINUATION
            && let Some(p) = self.find(h.stream)
        {
            p.response_bytes = p.response_bytes.saturating_add(wire);
        }
        match h.kind {
            HEADERS => {
                let side = if is_request { &mut self.requests } else { &mut self.responses };
                side.block = Block {
                    stream: h.stream,
                    bytes: Vec::new(),
                    whole: true,
                    end_stream: h.end_stream(),
                    wire_bytes: 0,
                    start: Some(SyscallInfo {
                        ts_ns: frame.start_ns,
                        tid: frame.tid,
                        queued_since_ns: frame.queued_since_ns,
                    }),
                };
                side.block.append(frame, header_fragment(frame), wire);
                if h.flags & FLAG_END_HEADERS != 0 {
                    self.on_block(is_request, frame.end_ns, out);
                }
            }
            CONTINUATION => {
                let side = if is_request { &mut self.requests } else { &mut self.responses };
                if side.block.start.is_none() || side.block.stream != h.stream {
                    return;
                }
                side.block.append(frame, frame.payload, wire);
                if h.flags & FLAG_END_HEADERS != 0 {
                    self.on_block(is_request, frame.end_ns, out);
                }
            }
            DATA => {
                if is_request {
                    if let Some(p) = self.find(h.stream) {
                        p.info.request_bytes = p.info.request_bytes.saturating_add(wire);
                        p.request_end_ns = frame.end_ns;
                        p.info.request_complete |= h.end_stream();
                    }
                } else if h.end_stream() {
                    self.end(h.stream, frame.end_ns, out);
                }
            }
            RST_STREAM => {
                let code = frame.payload.first_chunk::<4>().map(|b| u32::from_be_bytes(*b));
                if code == Some(REFUSED_STREAM) {
                    self.signals.refused_streams = self.signals.refused_streams.saturating_add(1);
                } else {
                    self.signals.reset_streams = self.signals.reset_streams.saturating_add(1);
                }
                self.end(h.stream, frame.end_ns, out);
            }
            GOAWAY => self.signals.goaways = self.signals.goaways.saturating_add(1),
            _ => {}
        }
    }

    /// A header block is complete.
    fn on_block(&mut self, is_request: bool, end_ns: u64, out: &mut Vec<Exchange>) {
        let side = if is_request { &mut self.requests } else { &mut self.responses };
        let block = std::mem::take(&mut side.block);
        let fields = side.hpack.decode(&block.bytes, block.whole);
        let Some(start) = block.start else { return };
        if is_request {
            if block.stream > self.highest_stream {
                self.highest_stream = block.stream;
                self.open(block.stream, start, fields.method, fields.path, block.wire_bytes, end_ns, block.end_stream);
            } else if let Some(p) = self.find(block.stream) {
                // Trailers.
                p.info.request_bytes = p.info.request_bytes.saturating_add(block.wire_bytes);
                p.request_end_ns = end_ns;
                p.info.request_complete |= block.end_stream;
            }
            return;
        }
        let Some(p) = self.find(block.stream) else { return };
        p.response_bytes = p.response_bytes.saturating_add(block.wire_bytes);
        let interim = matches!(fields.status, Some(100..=199));
        if !interim && !p.info.response_started {
            p.info.response_started = true;
            p.response_start_ns = Some(start.ts_ns);
            p.status = fields.status;
        }
        // In the trailers, or in the only block of a trailers-only response.
        p.grpc_status = fields.grpc_status.or(p.grpc_status);
        if block.end_stream {
            self.end(block.stream, end_ns, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn open(
        &mut self,
        stream: u32,
        start: SyscallInfo,
        method: Option<Method>,
        path: Option<crate::redact::RequestPath>,
        bytes: u64,
        end_ns: u64,
        complete: bool,
    ) {
        if self.streams.len() >= MAX_IN_FLIGHT && self.streams.pop_front().is_some() {
            self.dropped_in_flight = self.dropped_in_flight.saturating_add(1);
        }
        self.streams.push_back(Pending {
            seq: u64::from(stream),
            info: InFlight {
                method: method.unwrap_or(Method::Other),
                path: path.unwrap_or_default(),
                tid: start.tid,
                request_start_ns: start.ts_ns,
                queued_since_ns: start.queued_since_ns,
                request_bytes: bytes,
                response_started: false,
                request_complete: complete,
            },
            request_end_ns: end_ns,
            status: None,
            grpc_status: None,
            response_start_ns: None,
            response_bytes: 0,
        });
    }

    fn end(&mut self, stream: u32, ts_ns: u64, out: &mut Vec<Exchange>) {
        if let Some(i) = self.streams.iter().position(|p| p.seq == u64::from(stream))
            && let Some(p) = self.streams.remove(i)
        {
            out.push(finish(p, ts_ns, 0, ExchangeOutcome::Complete));
        }
    }

    fn find(&mut self, stream: u32) -> Option<&mut Pending> {
        self.streams.iter_mut().find(|p| p.seq == u64::from(stream))
    }
}

impl Block {
    fn append(&mut self, frame: &Frame, fragment: &[u8], wire: u64) {
        let room = MAX_BLOCK.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(fragment.get(..room.min(fragment.len())).unwrap_or_default());
        self.whole &= frame.whole && room >= fragment.len();
        self.wire_bytes = self.wire_bytes.saturating_add(wire);
    }
}

/// The header block fragment of a HEADERS frame: its kept payload without padding and priority.
fn header_fragment<'a>(frame: &Frame<'a>) -> &'a [u8] {
    let h = frame.header;
    let mut from = 0usize;
    let mut pad = 0usize;
    if h.flags & FLAG_PADDED != 0 {
        pad = usize::from(frame.payload.first().copied().unwrap_or(0));
        from += 1;
    }
    if h.flags & FLAG_PRIORITY != 0 {
        from += 5;
    }
    let fragment_len = usize::try_from(h.len).unwrap_or(usize::MAX).saturating_sub(from).saturating_sub(pad);
    let to = from.saturating_add(fragment_len).min(frame.payload.len());
    frame.payload.get(from..to).unwrap_or_default()
}

/// An emptied vector of pieces with another lifetime, keeping its allocation (the collect is
/// done in place).
fn reuse<'b>(mut pieces: Vec<Piece<'_>>) -> Vec<Piece<'b>> {
    pieces.clear();
    pieces.into_iter().map(|_| Piece::Unseen(0)).collect()
}

/// Drops the first `n` bytes of a syscall's pieces; returns how many were dropped.
fn skip(pieces: &mut [Piece], mut n: u64) -> u64 {
    let mut skipped = 0;
    for piece in pieces.iter_mut() {
        let (new, took) = match *piece {
            Piece::Seen(b) => {
                let take = usize::try_from(n).unwrap_or(usize::MAX).min(b.len());
                (Piece::Seen(b.get(take..).unwrap_or_default()), take as u64)
            }
            Piece::Unseen(u) => (Piece::Unseen(u - u.min(n)), u.min(n)),
        };
        *piece = new;
        n -= took;
        skipped += took;
    }
    skipped
}

#[cfg(test)]
pub(crate) mod tests;
