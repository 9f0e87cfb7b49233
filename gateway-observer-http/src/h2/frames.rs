//! One direction of an HTTP/2 connection cut into frames (RFC 9113 §4.1) from what the kernel saw
//! of each syscall: the visible head, an unseen middle known only by its length, the visible tail.
//!
//! Every frame header is walked, so a frame whose payload was not copied still ends where it
//! should and the next header is found. A header that falls in unseen bytes loses sync; the walk
//! resumes at a later syscall whose first bytes look like a frame header ([`plausible_start`]).
//! (Headers past the head the kernel walked come as seen pieces: [`super::walked`].)
//! Payload bytes are kept only for the frames that carry framing or flow-control facts (HEADERS,
//! CONTINUATION, RST_STREAM, GOAWAY, SETTINGS, WINDOW_UPDATE), and at most [`MAX_KEPT_PAYLOAD`]
//! of each.

pub const HEADER_LEN: usize = 9;
/// A frame header's first bytes: its payload length.
const LENGTH_BYTES: usize = 3;
/// Payload bytes kept of one frame; a longer header block is decoded as far as it goes.
pub const MAX_KEPT_PAYLOAD: usize = 16 * 1024;
/// The largest frame length a resynchronisation accepts (SETTINGS_MAX_FRAME_SIZE may be raised
/// to 16 MiB, but real peers stay far below; a smaller bound rejects more garbage).
const PLAUSIBLE_MAX_LEN: u32 = 1 << 20;

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const PRIORITY: u8 = 2;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PUSH_PROMISE: u8 = 5;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

pub const FLAG_END_STREAM: u8 = 0x1;
/// SETTINGS and PING acknowledgements share END_STREAM's bit.
pub const FLAG_ACK: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl FrameHeader {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Self {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *b;
        Self {
            len: u32::from_be_bytes([0, l0, l1, l2]),
            kind,
            flags,
            stream: u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff,
        }
    }

    pub fn end_stream(&self) -> bool {
        self.flags & FLAG_END_STREAM != 0 && matches!(self.kind, DATA | HEADERS)
    }

    /// Could a peer have sent this header: a known type, a length its type allows, a stream id
    /// where its type needs one.
    pub fn plausible(&self) -> bool {
        let on_stream = self.stream != 0;
        self.len <= PLAUSIBLE_MAX_LEN
            && match self.kind {
                DATA | HEADERS | CONTINUATION | PUSH_PROMISE => on_stream,
                PRIORITY => on_stream && self.len == 5,
                RST_STREAM => on_stream && self.len == 4,
                SETTINGS => !on_stream && self.len.is_multiple_of(6),
                PING => !on_stream && self.len == 8,
                GOAWAY => !on_stream && self.len >= 8,
                WINDOW_UPDATE => self.len == 4,
                _ => false,
            }
    }
}

/// Do the first bytes of a syscall (`head`, of `len` bytes in all) start with frames: every frame
/// header visible in them plausible, and either they end exactly at `len` or two were seen (one
/// header alone, 9 bytes that might be anything, is not enough).
pub fn plausible_start(head: &[u8], len: u64) -> bool {
    let mut at = 0u64;
    let mut seen = 0;
    while let Some(bytes) = usize::try_from(at).ok().and_then(|a| head.get(a..a.checked_add(HEADER_LEN)?)) {
        let Ok(bytes) = <&[u8; HEADER_LEN]>::try_from(bytes) else { return false };
        let header = FrameHeader::parse(bytes);
        if !header.plausible() {
            return false;
        }
        seen += 1;
        at += HEADER_LEN as u64 + u64::from(header.len);
        if at >= len {
            return at == len || seen >= 2;
        }
    }
    seen >= 2
}

/// One frame, reported when its last byte went by.
#[derive(Debug)]
pub struct Frame<'a> {
    pub header: FrameHeader,
    /// The kept payload: the whole of it when `whole`, else what was visible of its start.
    pub payload: &'a [u8],
    pub whole: bool,
    /// When its header was seen, and by which thread (with the socket wait of that syscall).
    pub start_ns: u64,
    pub tid: u32,
    pub queued_since_ns: Option<u64>,
    pub end_ns: u64,
}

/// A part of one syscall's bytes, in order.
#[derive(Clone, Copy, Debug)]
pub enum Piece<'a> {
    Seen(&'a [u8]),
    Unseen(u64),
}

/// What a syscall looked like to the walker.
#[derive(Clone, Copy, Debug)]
pub struct SyscallInfo {
    pub ts_ns: u64,
    pub tid: u32,
    pub queued_since_ns: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Collecting a frame header (`have` bytes of it so far).
    Header,
    /// Inside a payload.
    Payload,
    /// A frame header fell in unseen bytes: waiting for a syscall that starts with frames.
    Lost,
}

/// One direction's frame walker.
#[derive(Clone, Debug)]
pub struct Walker {
    state: State,
    header_bytes: [u8; HEADER_LEN],
    have: usize,
    frame: FrameHeader,
    remaining: u64,
    payload: Vec<u8>,
    whole: bool,
    start: SyscallInfo,
    lost_sync: u64,
    resyncs: u64,
}

impl Walker {
    /// A walker at a frame boundary (after the client preface, or the server's first byte).
    pub fn new() -> Self {
        Self {
            state: State::Header,
            header_bytes: [0; HEADER_LEN],
            have: 0,
            frame: FrameHeader { len: 0, kind: 0, flags: 0, stream: 0 },
            remaining: 0,
            payload: Vec::new(),
            whole: true,
            start: SyscallInfo { ts_ns: 0, tid: 0, queued_since_ns: None },
            lost_sync: 0,
            resyncs: 0,
        }
    }

    /// A walker that first waits for a syscall that starts with frames (a connection first seen
    /// mid-way).
    pub fn lost() -> Self {
        Self { state: State::Lost, ..Self::new() }
    }

    /// Times a frame header fell in unseen bytes.
    pub fn lost_sync(&self) -> u64 {
        self.lost_sync
    }

    /// Times the walk resumed after losing sync.
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }

    pub fn is_lost(&self) -> bool {
        self.state == State::Lost
    }

    /// Where the next byte fed stands before the next frame header: 0 at a boundary (or lost:
    /// a lost walker resumes only at a syscall that starts with frames), the payload still to
    /// come inside a frame, the rest of a header and its payload inside a header (as the kernel
    /// reckons it): its length from the bytes held and, when they end before it is whole, from
    /// `next`, the first bytes to be fed. None when those do not complete it.
    pub fn to_next_header(&self, next: &[u8]) -> Option<u64> {
        match self.state {
            State::Lost => Some(0),
            State::Header if self.have == 0 => Some(0),
            State::Header => {
                let held = &self.header_bytes[..self.have.min(LENGTH_BYTES)];
                let missing = next.get(..LENGTH_BYTES - held.len())?;
                let len = held.iter().chain(missing).fold(0u64, |len, &b| (len << 8) | u64::from(b));
                Some((HEADER_LEN - self.have) as u64 + len)
            }
            State::Payload => Some(self.remaining),
        }
    }

    /// Walks one syscall's bytes (`pieces` in order, `len` in all); `on_frame` gets each frame
    /// that ends in it. Returns false when sync was lost in this syscall.
    pub fn feed(&mut self, info: SyscallInfo, len: u64, pieces: &[Piece], on_frame: &mut dyn FnMut(Frame)) -> bool {
        if self.state == State::Lost {
            let head = match pieces.first() {
                Some(Piece::Seen(head)) => head,
                _ => &[][..],
            };
            if !plausible_start(head, len) {
                return true;
            }
            // A connection first seen mid-way syncs once without having lost anything.
            if self.lost_sync > 0 {
                self.resyncs = self.resyncs.saturating_add(1);
            }
            self.state = State::Header;
            self.have = 0;
        }
        for piece in pieces {
            match *piece {
                Piece::Seen(mut bytes) => {
                    while !bytes.is_empty() {
                        bytes = self.seen(bytes, info, on_frame);
                    }
                }
                Piece::Unseen(n) => {
                    if !self.unseen(n, info, on_frame) {
                        return false;
                    }
                }
            }
        }
        true
    }

    fn seen<'a>(&mut self, bytes: &'a [u8], info: SyscallInfo, on_frame: &mut dyn FnMut(Frame)) -> &'a [u8] {
        match self.state {
            State::Lost => &[],
            State::Header => {
                if self.have == 0 {
                    // A frame's timing is that of the syscall that carried its first byte.
                    self.start = info;
                }
                let take = (HEADER_LEN - self.have).min(bytes.len());
                let (now, rest) = bytes.split_at(take);
                if let Some(slot) = self.header_bytes.get_mut(self.have..self.have + take) {
                    slot.copy_from_slice(now);
                }
                self.have += take;
                if self.have == HEADER_LEN {
                    self.begin(info, on_frame);
                }
                rest
            }
            State::Payload => {
                let take = usize::try_from(self.remaining).unwrap_or(usize::MAX).min(bytes.len());
                let (now, rest) = bytes.split_at(take);
                if keeps_payload(self.frame.kind) {
                    let room = MAX_KEPT_PAYLOAD.saturating_sub(self.payload.len());
                    self.payload.extend_from_slice(now.get(..room.min(now.len())).unwrap_or_default());
                    self.whole &= room >= now.len();
                }
                self.remaining -= take as u64;
                if self.remaining == 0 {
                    self.end(info, on_frame);
                }
                rest
            }
        }
    }

    /// Skips `n` unseen bytes; false when a frame header fell in them.
    fn unseen(&mut self, mut n: u64, info: SyscallInfo, on_frame: &mut dyn FnMut(Frame)) -> bool {
        while n > 0 {
            if self.state != State::Payload {
                self.state = State::Lost;
                self.lost_sync = self.lost_sync.saturating_add(1);
                return false;
            }
            let take = self.remaining.min(n);
            self.remaining -= take;
            n -= take;
            self.whole = false;
            if self.remaining == 0 {
                self.end(info, on_frame);
            }
        }
        true
    }

    fn begin(&mut self, info: SyscallInfo, on_frame: &mut dyn FnMut(Frame)) {
        self.frame = FrameHeader::parse(&self.header_bytes);
        self.have = 0;
        self.remaining = u64::from(self.frame.len);
        self.payload.clear();
        self.whole = true;
        self.state = State::Payload;
        if self.remaining == 0 {
            self.end(info, on_frame);
        }
    }

    fn end(&mut self, info: SyscallInfo, on_frame: &mut dyn FnMut(Frame)) {
        self.state = State::Header;
        on_frame(Frame {
            header: self.frame,
            payload: &self.payload,
            whole: self.whole,
            start_ns: self.start.ts_ns,
            tid: self.start.tid,
            queued_since_ns: self.start.queued_since_ns,
            end_ns: info.ts_ns,
        });
    }
}

impl Default for Walker {
    fn default() -> Self {
        Self::new()
    }
}

fn keeps_payload(kind: u8) -> bool {
    matches!(kind, HEADERS | CONTINUATION | RST_STREAM | GOAWAY | SETTINGS | WINDOW_UPDATE)
}
