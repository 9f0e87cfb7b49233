//! HTTP/2 flow control (RFC 9113 §6.9) followed from both directions' frames: each sender's
//! connection window and stream windows, and the times a sender was stalled: a window of its
//! closed (at or below 0) while the stream, or some stream of the connection, was still open for
//! it to send on, until the WINDOW_UPDATE (or SETTINGS) that reopened it.
//!
//! A window is known only from the connection's start: first seen mid-way, the connection
//! windows stay unknown and stream windows are known once the receiver's SETTINGS gives
//! SETTINGS_INITIAL_WINDOW_SIZE; frames lost to unseen bytes make the windows open then unknown.
//! An unknown window never stalls. Windows come from frame headers and the 4-byte WINDOW_UPDATE
//! and 6-byte SETTINGS entries only: no body byte is looked at.

use std::collections::VecDeque;

use super::frames::{DATA, FLAG_ACK, Frame, HEADERS, RST_STREAM, SETTINGS, WINDOW_UPDATE};

/// Every window's size before SETTINGS or WINDOW_UPDATE changes it (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: i64 = 65_535;
/// Stream windows followed per sender; past it the oldest is forgotten (counted). Peers allow
/// 100 to 250 concurrent streams.
pub const MAX_STREAMS: usize = 256;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// How one sender's windows held it back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stalls {
    /// Times its connection window or a stream's closed while it had a stream open.
    pub count: u64,
    /// Time with at least one of its windows closed so (timestamps of the frames).
    pub stalled_ns: u64,
    /// Stream windows forgotten past [`MAX_STREAMS`]: their stalls are not seen.
    pub dropped_streams: u64,
}

#[derive(Clone, Copy, Debug)]
struct StreamWindow {
    id: u32,
    window: i64,
    stalled: bool,
}

/// Stalls as they open and close: counted at the start, timed while any is open.
#[derive(Clone, Copy, Debug, Default)]
struct Episodes {
    open: u32,
    since_ns: u64,
    stalls: Stalls,
}

impl Episodes {
    /// Moves one window's stalled `flag` to `now`.
    fn set(&mut self, flag: &mut bool, now: bool, ts_ns: u64) {
        match (*flag, now) {
            (false, true) => {
                if self.open == 0 {
                    self.since_ns = ts_ns;
                }
                self.open += 1;
                self.stalls.count = self.stalls.count.saturating_add(1);
            }
            (true, false) => {
                self.open = self.open.saturating_sub(1);
                if self.open == 0 {
                    let took = ts_ns.saturating_sub(self.since_ns);
                    self.stalls.stalled_ns = self.stalls.stalled_ns.saturating_add(took);
                }
            }
            _ => {}
        }
        *flag = now;
    }
}

impl Episodes {
    /// The stalls so far, one still open counted up to `now_ns` when given (a figure its end,
    /// stamped by a frame that may come later, can fall short of by the frame's delay).
    fn until(&self, now_ns: Option<u64>) -> Stalls {
        let open = now_ns.filter(|_| self.open > 0).map_or(0, |now| now.saturating_sub(self.since_ns));
        Stalls { stalled_ns: self.stalls.stalled_ns.saturating_add(open), ..self.stalls }
    }
}

/// One sender's windows, as its receiver granted them; `None` is unknown.
#[derive(Clone, Debug, Default)]
struct Sender {
    connection: Option<i64>,
    connection_stalled: bool,
    /// SETTINGS_INITIAL_WINDOW_SIZE of its receiver: every new stream's window.
    initial: Option<i64>,
    streams: VecDeque<StreamWindow>,
    episodes: Episodes,
}

impl Sender {
    fn fresh() -> Self {
        Self { connection: Some(DEFAULT_WINDOW), initial: Some(DEFAULT_WINDOW), ..Self::default() }
    }

    fn open(&mut self, id: u32, ts_ns: u64) {
        let Some(window) = self.initial else { return };
        if self.streams.len() >= MAX_STREAMS
            && let Some(mut old) = self.streams.pop_front()
        {
            self.episodes.set(&mut old.stalled, false, ts_ns);
            self.episodes.stalls.dropped_streams = self.episodes.stalls.dropped_streams.saturating_add(1);
        }
        let mut stream = StreamWindow { id, window, stalled: false };
        self.episodes.set(&mut stream.stalled, window <= 0, ts_ns);
        self.streams.push_back(stream);
        self.check_connection(ts_ns);
    }

    /// A DATA frame of `len` bytes (padding included) sent on `id`.
    fn data(&mut self, id: u32, len: u32, end_stream: bool, ts_ns: u64) {
        if let Some(c) = self.connection.as_mut() {
            *c = c.saturating_sub(i64::from(len));
        }
        if let Some(i) = self.find(id) {
            if end_stream {
                self.close_stream(i, ts_ns);
            } else if let Some(s) = self.streams.get_mut(i) {
                s.window = s.window.saturating_sub(i64::from(len));
                self.episodes.set(&mut s.stalled, s.window <= 0, ts_ns);
            }
        }
        self.check_connection(ts_ns);
    }

    /// A WINDOW_UPDATE from the receiver: `increment` more bytes on `id` (0: the connection),
    /// or `None` when its payload was not seen.
    fn grant(&mut self, id: u32, increment: Option<u32>, ts_ns: u64) {
        if id == 0 {
            self.connection = self.connection.zip(increment).map(|(c, inc)| c.saturating_add(i64::from(inc)));
        } else if let Some(i) = self.find(id) {
            match (increment, self.streams.get_mut(i)) {
                (Some(inc), Some(s)) => {
                    s.window = s.window.saturating_add(i64::from(inc));
                    self.episodes.set(&mut s.stalled, s.window <= 0, ts_ns);
                }
                _ => self.close_stream(i, ts_ns),
            }
        }
        self.check_connection(ts_ns);
    }

    /// The receiver's SETTINGS_INITIAL_WINDOW_SIZE: open streams move by the difference (§6.9.2).
    fn initial_window(&mut self, value: Option<u32>, ts_ns: u64) {
        let value = value.map(i64::from);
        let delta = self.initial.zip(value).map(|(old, new)| new - old);
        for s in &mut self.streams {
            match delta {
                Some(d) => s.window = s.window.saturating_add(d),
                // Open streams' windows are not known any more: none can stall.
                None => s.window = i64::MAX,
            }
            self.episodes.set(&mut s.stalled, s.window <= 0, ts_ns);
        }
        if delta.is_none() {
            self.streams.clear();
        }
        self.initial = value;
        self.check_connection(ts_ns);
    }

    fn close_stream(&mut self, i: usize, ts_ns: u64) {
        if let Some(mut s) = self.streams.remove(i) {
            self.episodes.set(&mut s.stalled, false, ts_ns);
        }
    }

    /// The connection window stalls the sender while it has a stream open.
    fn check_connection(&mut self, ts_ns: u64) {
        let stalled = self.connection.is_some_and(|c| c <= 0) && !self.streams.is_empty();
        self.episodes.set(&mut self.connection_stalled, stalled, ts_ns);
    }

    /// Frames were lost: the windows open now are unknown. The initial window is kept: peers
    /// send SETTINGS_INITIAL_WINDOW_SIZE in their first SETTINGS, seen with the preface.
    fn forget(&mut self, ts_ns: u64) {
        self.connection = None;
        self.check_connection(ts_ns);
        while !self.streams.is_empty() {
            self.close_stream(0, ts_ns);
        }
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }
}

/// Both senders of one connection: the requester (client) and the responder (server).
#[derive(Clone, Debug, Default)]
pub struct Flow {
    requester: Sender,
    responder: Sender,
    /// The highest stream the requester opened: a HEADERS above it opens one.
    highest: u32,
}

impl Flow {
    /// A connection seen from its start.
    pub fn fresh() -> Self {
        Self { requester: Sender::fresh(), responder: Sender::fresh(), highest: 0 }
    }

    /// A connection first seen mid-way: nothing known.
    pub fn unknown() -> Self {
        Self::default()
    }

    /// The preface came after all (the server spoke first): the connection windows start now;
    /// a SETTINGS already seen keeps its initial window.
    pub fn preface(&mut self) {
        for s in [&mut self.requester, &mut self.responder] {
            s.connection = Some(DEFAULT_WINDOW);
            s.initial = s.initial.or(Some(DEFAULT_WINDOW));
        }
    }

    /// The stalls of the requester's or the responder's sending; with `now_ns`, a stall still
    /// open counts its time up to then.
    pub fn stalls(&self, requester: bool, now_ns: Option<u64>) -> Stalls {
        let sender = if requester { &self.requester } else { &self.responder };
        sender.episodes.until(now_ns)
    }

    /// A window of either sender is closed now: a stall is open.
    pub fn stalled(&self) -> bool {
        self.requester.episodes.open > 0 || self.responder.episodes.open > 0
    }

    /// Stream windows followed now (both senders).
    pub fn streams(&self) -> usize {
        self.requester.streams.len() + self.responder.streams.len()
    }

    /// A frame from the requester (`from_requester`) or the responder.
    pub fn on_frame(&mut self, from_requester: bool, frame: &Frame) {
        let h = frame.header;
        let ts = frame.end_ns;
        let (sender, receiver) = if from_requester {
            (&mut self.requester, &mut self.responder)
        } else {
            (&mut self.responder, &mut self.requester)
        };
        match h.kind {
            DATA => sender.data(h.stream, h.len, h.end_stream(), ts),
            HEADERS if from_requester && h.stream > self.highest => {
                self.highest = h.stream;
                receiver.open(h.stream, ts);
                if !h.end_stream() {
                    sender.open(h.stream, ts);
                }
            }
            HEADERS if h.end_stream() => {
                if let Some(i) = sender.find(h.stream) {
                    sender.close_stream(i, ts);
                    sender.check_connection(ts);
                }
            }
            RST_STREAM => {
                for s in [sender, receiver] {
                    if let Some(i) = s.find(h.stream) {
                        s.close_stream(i, ts);
                        s.check_connection(ts);
                    }
                }
            }
            WINDOW_UPDATE => {
                let increment = frame.whole.then(|| window_increment(frame.payload)).flatten();
                receiver.grant(h.stream, increment, ts);
            }
            SETTINGS if h.flags & FLAG_ACK == 0 => match initial_window_setting(frame) {
                Setting::Absent => {}
                Setting::Value(v) => receiver.initial_window(Some(v), ts),
                Setting::Unseen => receiver.initial_window(None, ts),
            },
            _ => {}
        }
    }

    /// A direction's frames were lost from `ts_ns` on: both senders' open windows are unknown
    /// (its DATA, or its WINDOW_UPDATEs for the other sender, went unseen).
    pub fn lost(&mut self, ts_ns: u64) {
        self.requester.forget(ts_ns);
        self.responder.forget(ts_ns);
    }

    /// The connection closed: stalls still open end here.
    pub fn close(&mut self, ts_ns: u64) {
        self.lost(ts_ns);
    }
}

fn window_increment(payload: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(*payload.first_chunk::<4>()?) & 0x7fff_ffff)
}

enum Setting {
    Absent,
    Value(u32),
    /// Part of the frame was not seen: it may have been there.
    Unseen,
}

/// SETTINGS_INITIAL_WINDOW_SIZE in a SETTINGS frame (the last one wins, §6.5).
fn initial_window_setting(frame: &Frame) -> Setting {
    let mut found = Setting::Absent;
    for entry in frame.payload.chunks_exact(6) {
        if let Ok([i0, i1, v0, v1, v2, v3]) = <[u8; 6]>::try_from(entry)
            && u16::from_be_bytes([i0, i1]) == SETTINGS_INITIAL_WINDOW_SIZE
        {
            found = Setting::Value(u32::from_be_bytes([v0, v1, v2, v3]));
        }
    }
    if frame.whole { found } else { Setting::Unseen }
}

#[cfg(test)]
mod tests;
