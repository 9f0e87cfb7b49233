//! A hand-made h2c client (prior knowledge) that fetches one path and never grants more window:
//! the server fills the stream's window and waits, its connection held open for as long as the
//! test keeps the client; it can ask for more streams on it, for a server to refuse. h2load
//! cannot hold a stall open: its connections close when it ends.
//!
//! The request waits for the server's SETTINGS acknowledgement (nginx writes its SETTINGS,
//! WINDOW_UPDATE and ACK in one writev of several buffers), so that the stream opens on windows
//! the observer already knows.
//!
//! `H2cConnection` is the same client asking for one path after another on one connection, with
//! windows that never run out: a connection a test opens before the observer starts.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const WINDOW_UPDATE: u8 = 8;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// A stream whose window the server has filled; the connection closes on drop.
pub struct StalledStream {
    stream: TcpStream,
    request: Vec<u8>,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a small frame").to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// A literal header field without indexing, its name the static table's `index` (RFC 7541 §6.2.2).
fn literal(index: u8, value: &str) -> Vec<u8> {
    let len = u8::try_from(value.len()).ok().filter(|l| *l < 127).expect("a short header value");
    let mut out = vec![index, len];
    out.extend(value.as_bytes());
    out
}

/// A connection to `127.0.0.1:port` (reads time out after 10 s) that has sent the client
/// preface, SETTINGS with an initial stream `window`, and `extra` frames.
fn connect(port: u16, window: u32, extra: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect for h2c");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let mut settings = SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes().to_vec();
    settings.extend(window.to_be_bytes());
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &settings));
    out.extend(extra);
    stream.write_all(&out).expect("send the preface");
    stream
}

/// A GET's header block: `:method GET` and `:scheme http` (static 2 and 6), then `:path` and
/// `:authority` (4 and 1).
fn get_block(path: &str, authority: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86];
    block.extend(literal(4, path));
    block.extend(literal(1, authority));
    block
}

impl StalledStream {
    /// GET `path` from `127.0.0.1:port` with `window` bytes of stream window, reading the
    /// response until its DATA filled that window (at most 10 s).
    pub fn open(port: u16, path: &str, window: u32) -> StalledStream {
        let mut stream = connect(port, window, &[]);
        let block = get_block(path, &format!("127.0.0.1:{port}"));
        while !matches!(next_frame(&mut stream), (SETTINGS, ACK, 0, _)) {}
        stream.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)).expect("send the request");
        let mut data = 0u64;
        while data < u64::from(window) {
            if let (DATA, _, stream_id, payload) = next_frame(&mut stream) {
                assert_eq!(stream_id, 1, "DATA on a stream not asked for");
                data += payload.len() as u64;
            }
        }
        assert_eq!(data, u64::from(window), "the server sent past the window");
        StalledStream { stream, request: block }
    }

    /// Asks for the same path again on stream `id` (odd, above the last) and returns the error
    /// code of the RST_STREAM the server answers it with (REFUSED_STREAM is 7), if any within 10 s.
    pub fn reset_code(&mut self, id: u32) -> u32 {
        let headers = frame(HEADERS, END_STREAM | END_HEADERS, id, &self.request);
        self.stream.write_all(&headers).expect("send another request");
        loop {
            let (kind, _, on, payload) = next_frame(&mut self.stream);
            if (kind, on) == (RST_STREAM, id) {
                return u32::from_be_bytes(payload.first_chunk::<4>().copied().expect("an error code"));
            }
        }
    }
}

/// Windows an `H2cConnection` grants up front, so that no response waits for a WINDOW_UPDATE.
const LARGE_WINDOW: u32 = 1 << 30;

/// An h2c connection that asks for one path after another on it and reads each response to its
/// end: a connection a test can open before the observer starts and go on using after.
pub struct H2cConnection {
    stream: TcpStream,
    authority: String,
    next_id: u32,
}

impl H2cConnection {
    /// Connects to `127.0.0.1:port` and exchanges SETTINGS (within 10 s).
    pub fn open(port: u16) -> H2cConnection {
        let stream = connect(port, LARGE_WINDOW, &frame(WINDOW_UPDATE, 0, 0, &LARGE_WINDOW.to_be_bytes()));
        let mut connection = H2cConnection { stream, authority: format!("127.0.0.1:{port}"), next_id: 1 };
        while !matches!(connection.next_frame(), (SETTINGS, ACK, 0, _)) {}
        connection
    }

    /// GETs `path` on a new stream and returns the response's `:status` (0 when the server
    /// encodes it other than as one of the static table's statuses, RFC 7541 Appendix A).
    pub fn get(&mut self, path: &str) -> u16 {
        let id = self.next_id;
        self.next_id += 2;
        let block = get_block(path, &self.authority);
        self.stream.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, id, &block)).expect("send a request");
        let mut status = 0;
        loop {
            let (kind, flags, on, payload) = self.next_frame();
            if on != id {
                continue;
            }
            if kind == HEADERS && status == 0 {
                status = match payload.first() {
                    Some(indexed @ 0x88..=0x8e) => [200, 204, 206, 304, 400, 404, 500][usize::from(indexed - 0x88)],
                    _ => 0,
                };
            }
            if flags & END_STREAM != 0 && matches!(kind, HEADERS | DATA) {
                return status;
            }
        }
    }

    /// The next frame; the server's own SETTINGS are acknowledged on the way.
    fn next_frame(&mut self) -> (u8, u8, u32, Vec<u8>) {
        let frame_read = next_frame(&mut self.stream);
        if frame_read.0 == SETTINGS && frame_read.1 & ACK == 0 {
            self.stream.write_all(&frame(SETTINGS, ACK, 0, &[])).expect("acknowledge SETTINGS");
        }
        frame_read
    }
}

/// The next frame's type, flags, stream and payload.
fn next_frame(stream: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header).expect("a frame from the server within 10 s");
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]);
    let id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len as usize];
    stream.read_exact(&mut payload).expect("a frame's payload");
    (header[3], header[4], id, payload)
}
