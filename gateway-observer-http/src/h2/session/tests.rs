//! Streams through [`crate::Connection`] from constructed frames, each syscall seen as the kernel
//! reports it (its first 512 and last 16 bytes).

use crate::h2::PREFACE;
use crate::h2::frames::{
    CONTINUATION, DATA, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED, GOAWAY, HEADERS, RST_STREAM, SETTINGS,
};
use crate::{Connection, Direction, Exchange, ExchangeOutcome, Method, Role, Segment};

const HEAD: usize = 512;
const TAIL: usize = 16;

pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// GET with :scheme http, :authority from a literal (never indexed) and `path` indexed or literal.
fn request_block(path: &[u8]) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x11, 0x01, b'h'];
    if path == b"/" {
        b.push(0x84);
    } else {
        // Literal with incremental indexing, name :path (static 4).
        b.extend([0x44, u8::try_from(path.len()).unwrap()]);
        b.extend(path);
    }
    b
}

pub(crate) fn get(stream: u32, path: &[u8]) -> Vec<u8> {
    frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream, &request_block(path))
}

/// :status 200 (static 8) and a body of `body` bytes ending the stream.
fn ok(stream: u32, body: usize) -> Vec<u8> {
    let mut f = frame(HEADERS, FLAG_END_HEADERS, stream, &[0x88]);
    f.extend(frame(DATA, FLAG_END_STREAM, stream, &vec![b'x'; body]));
    f
}

pub(crate) struct Conn {
    pub(crate) conn: Connection,
    pub(crate) out: Vec<Exchange>,
}

impl Conn {
    pub(crate) fn new(role: Role) -> Self {
        Self { conn: Connection::new(role), out: Vec::new() }
    }

    fn syscall(&mut self, dir: Direction, ts: u64, bytes: &[u8]) {
        let head = &bytes[..bytes.len().min(HEAD)];
        let tail = &bytes[bytes.len().saturating_sub(TAIL)..];
        let seg = Segment {
            ts_ns: ts,
            tid: 7,
            len: bytes.len() as u64,
            head,
            tail,
            queued_since_ns: None,
            walked: Default::default(),
        };
        self.conn.on_segment(dir, &seg, &mut self.out);
    }

    pub(crate) fn read(&mut self, ts: u64, bytes: &[u8]) {
        self.syscall(Direction::Read, ts, bytes);
    }

    pub(crate) fn write(&mut self, ts: u64, bytes: &[u8]) {
        self.syscall(Direction::Write, ts, bytes);
    }

    fn statuses(&self) -> Vec<Option<u16>> {
        self.out.iter().map(|e| e.status).collect()
    }
}

pub(crate) fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A server connection after the client's preface and SETTINGS and the server's SETTINGS.
fn server() -> Conn {
    let mut c = Conn::new(Role::Server);
    c.read(1, &cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100])]));
    c.write(2, &frame(SETTINGS, 0, 0, &[]));
    assert!(c.conn.is_h2() && c.conn.is_http());
    c
}

#[test]
fn one_stream_is_one_request_with_its_timing() {
    let mut c = server();
    c.read(10, &get(1, b"/"));
    assert_eq!(c.conn.in_flight().count(), 1);
    c.write(25, &ok(1, 100));
    assert_eq!(c.out.len(), 1);
    let e = &c.out[0];
    assert_eq!((e.method, e.path.as_str(), e.status), (Method::Get, "/", Some(200)));
    assert_eq!((e.request_start_ns, e.request_end_ns, e.response_start_ns, e.response_end_ns), (10, 10, Some(25), 25));
    assert_eq!((e.outcome, e.response_bytes), (ExchangeOutcome::Complete, 9 + 1 + 9 + 100));
    assert_eq!((c.conn.in_flight().count(), c.conn.lost_sync()), (0, 0));
}

#[test]
fn interleaved_streams_answered_out_of_order_with_dynamic_paths() {
    let mut c = server();
    // Stream 1 inserts :path /api/a; stream 3 refers to it by index (62).
    c.read(
        10,
        &cat(&[&get(1, b"/api/a?x=1"), &frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 3, &[0x82, 0x86, 0xbe])]),
    );
    c.read(11, &get(5, b"/"));
    assert_eq!(c.conn.in_flight().count(), 3);
    c.write(20, &ok(3, 10));
    c.write(30, &cat(&[&ok(5, 10), &frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 1, &[0x8d])]));
    let got: Vec<_> = c.out.iter().map(|e| (e.path.as_str(), e.status, e.response_end_ns)).collect();
    assert_eq!(got, vec![("/api/a", Some(200), 20), ("/", Some(200), 30), ("/api/a", Some(404), 30)]);
}

/// Bodies far larger than what the kernel copies: every frame header is still found.
#[test]
fn truncated_captures_keep_the_walk_in_sync() {
    let mut c = server();
    for i in 0..20u32 {
        let stream = 2 * i + 1;
        let t = 100 * u64::from(i);
        c.read(t, &get(stream, b"/big"));
        let body = ok(stream, 70_000 + 13 * i as usize);
        // One frame cut over three syscalls: the middle one's bytes mostly unseen.
        let (a, rest) = body.split_at(300);
        let (b, z) = rest.split_at(40_000);
        c.write(t + 1, a);
        c.write(t + 2, b);
        c.write(t + 3, z);
    }
    assert_eq!(c.out.len(), 20);
    assert!(c.out.iter().all(|e| e.status == Some(200) && e.path == "/big"));
    assert_eq!(c.out[19].response_end_ns, 1903);
    assert_eq!(c.conn.lost_sync(), 0);
}

/// The capture ends mid-frame and the frame goes on in the next syscall.
#[test]
fn frame_header_split_between_syscalls() {
    let mut c = server();
    let req = get(1, b"/");
    c.read(10, &req[..4]);
    c.read(11, &req[4..]);
    assert_eq!(c.conn.in_flight().next().map(|f| f.request_start_ns), Some(10));
    let resp = ok(1, 5);
    for (i, byte) in resp.iter().enumerate() {
        c.write(20 + i as u64, &[*byte]);
    }
    assert_eq!(c.statuses(), vec![Some(200)]);
    assert_eq!(c.out[0].response_end_ns, 20 + resp.len() as u64 - 1);
}

/// A HEADERS frame of 40 KB: its block is cut by the capture. The pseudo-headers before the cut
/// are read, the stream is counted, and later streams still are.
#[test]
fn huge_headers_frame() {
    let mut c = server();
    let mut block = request_block(b"/huge");
    // A literal never indexed: name "x-big", a 40000-byte value (length as an HPACK integer).
    block.extend([0x10, 5]);
    block.extend(b"x-big");
    block.extend([0x7f, 0xa1, 0xb8, 0x02]); // 127 + 0x21 + (0x38 << 7) + (2 << 14) = 40000
    block.extend(vec![b'v'; 40_000]);
    c.read(10, &frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 1, &block));
    c.read(11, &get(3, b"/after"));
    c.write(20, &cat(&[&ok(1, 0), &ok(3, 0)]));
    let got: Vec<_> = c.out.iter().map(|e| (e.path.as_str(), e.status)).collect();
    assert_eq!(got, vec![("/huge", Some(200)), ("/after", Some(200))]);
}

#[test]
fn continuation_frames_complete_the_block() {
    let mut c = server();
    let block = request_block(b"/cont");
    let (first, second) = block.split_at(4);
    let padded = cat(&[&[3], first, &[0, 0, 0]]);
    c.read(10, &frame(HEADERS, FLAG_END_STREAM | FLAG_PADDED, 1, &padded));
    assert_eq!(c.conn.in_flight().count(), 0);
    c.read(12, &frame(CONTINUATION, FLAG_END_HEADERS, 1, second));
    let f = c.conn.in_flight().next().cloned().unwrap();
    assert_eq!((f.path.as_str(), f.request_start_ns, f.request_complete), ("/cont", 10, true));
    c.write(20, &ok(1, 1));
    assert_eq!(c.out[0].request_end_ns, 12);
}

/// First seen mid-way: the first syscall is the middle of a DATA frame. Streams opened before are
/// not requests; new ones are, with the status the static table gives.
#[test]
fn midway_start() {
    let mut c = Conn::new(Role::Server);
    c.write(1, &[b'x'; 3000]);
    assert!(!c.conn.is_http());
    c.write(2, &ok(7, 10)); // a stream that started unseen
    assert!(c.conn.is_h2());
    c.read(3, &frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 9, &[0x82, 0xbf, 0x84]));
    c.write(4, &ok(9, 10));
    let got: Vec<_> = c.out.iter().map(|e| (e.method, e.path.as_str(), e.status)).collect();
    assert_eq!(got, vec![(Method::Get, "/", Some(200))]);
}

/// A frame header inside unseen bytes: sync is lost (counted), the streams open end there, and the
/// walk resumes at a syscall that starts with a frame.
#[test]
fn lost_sync_resynchronises() {
    let mut c = server();
    c.read(10, &cat(&[&get(1, b"/"), &get(3, b"/")]));
    let mut resp = ok(1, 2000);
    resp.extend(ok(3, 10));
    resp.extend(vec![0; 2000]);
    c.write(20, &resp);
    assert_eq!(c.conn.lost_sync(), 1);
    assert_eq!(c.out.len(), 2);
    assert_eq!(c.conn.in_flight().count(), 0);
    c.write(21, &[0xff; 64]); // not at a frame boundary: still lost
    c.read(30, &get(5, b"/"));
    c.write(40, &ok(5, 1));
    assert_eq!(c.statuses(), vec![Some(200), None, Some(200)]);
    assert_eq!(c.conn.h2_signals().resyncs, 1);
    assert_eq!(c.out[2].response_end_ns, 40);
}

#[test]
fn refused_streams_and_goaway_are_signals() {
    let mut c = server();
    c.read(10, &cat(&[&get(1, b"/"), &get(3, b"/")]));
    c.write(20, &cat(&[&frame(RST_STREAM, 0, 3, &[0, 0, 0, 7]), &frame(GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0])]));
    c.write(21, &ok(1, 1));
    let s = c.conn.h2_signals();
    assert_eq!((s.refused_streams, s.reset_streams, s.goaways), (1, 0, 1));
    assert_eq!(c.statuses(), vec![None, Some(200)]);
}

#[test]
fn close_ends_open_streams() {
    let mut c = server();
    c.read(10, &get(1, b"/"));
    c.write(15, &frame(HEADERS, FLAG_END_HEADERS, 1, &[0x88]));
    c.conn.on_close(50, &mut c.out);
    let e = &c.out[0];
    assert_eq!((e.status, e.outcome, e.response_end_ns), (Some(200), ExchangeOutcome::Closed, 50));
}

/// The gateway as a client of an h2c upstream: it writes the preface and requests.
#[test]
fn client_role() {
    let mut c = Conn::new(Role::Client);
    c.write(1, &cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[]), &get(1, b"/up")]));
    c.read(5, &frame(SETTINGS, 0, 0, &[]));
    c.read(9, &ok(1, 3));
    assert_eq!(c.out.iter().map(|e| (e.path.as_str(), e.status)).collect::<Vec<_>>(), vec![("/up", Some(200))]);
}

/// HTTP/1.x on a fresh connection is not taken for HTTP/2.
#[test]
fn http1_stays_http1() {
    let mut c = Conn::new(Role::Server);
    c.read(1, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    c.write(2, b"HTTP/1.1 204 No Content\r\n\r\n");
    assert!(!c.conn.is_h2());
    assert_eq!(c.statuses(), vec![Some(204)]);
}
