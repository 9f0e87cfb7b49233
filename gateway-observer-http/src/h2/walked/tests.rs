//! Walked frame headers laid out in a syscall's bytes, and HTTP/2 connections whose gateway
//! writes many streams per syscall, as the kernel reports them with its walk.

use super::*;
use crate::h2::PREFACE;
use crate::h2::frames::{DATA, FLAG_END_HEADERS, FLAG_END_STREAM, HEADERS, SETTINGS, WINDOW_UPDATE};
use crate::h2::session::tests::{cat, frame, get};
use crate::{Connection, Direction, Role, Segment};

const HEAD: usize = 512;
const TAIL: usize = 16;
const FRAMES: usize = 32;
const PAYLOAD: usize = 48;

/// The kernel's walk (`h2_walk.rs`) over `bytes` from `origin`, as owned arrays.
#[derive(Default)]
struct KernelWalk {
    origin: u64,
    start: u64,
    headers: Vec<u8>,
    lens: Vec<u8>,
    payloads: Vec<u8>,
}

impl KernelWalk {
    fn of(bytes: &[u8], origin: usize) -> Self {
        let mut w = Self { origin: origin as u64, ..Self::default() };
        let copied = bytes.len().min(HEAD);
        let len_of = |h: &[u8]| {
            (h[3] <= 9 && h[5] & 0x80 == 0)
                .then(|| usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]))
        };
        let mut at = origin;
        while at + 9 <= copied {
            let Some(len) = len_of(&bytes[at..at + 9]) else { return w };
            if at + 9 + len > copied {
                break;
            }
            at += 9 + len;
        }
        w.start = at as u64;
        while w.lens.len() < FRAMES {
            let Some(h) = bytes.get(at..at + 9) else { break };
            let Some(len) = len_of(h) else { break };
            w.headers.extend(h);
            let mut slot = [0u8; PAYLOAD];
            let mut kept = 0;
            if h[3] != DATA && at + 9 < bytes.len() {
                kept = len.min(bytes.len() - at - 9).min(PAYLOAD);
                slot[..kept].copy_from_slice(&bytes[at + 9..at + 9 + kept]);
            }
            w.payloads.extend(slot);
            w.lens.push(kept as u8);
            at += 9 + len;
        }
        w
    }

    fn walked(&self) -> Walked<'_> {
        Walked {
            origin: self.origin,
            start: self.start,
            headers: &self.headers,
            payload_lens: &self.lens,
            payloads: &self.payloads,
            payload_slot: PAYLOAD,
        }
    }
}

fn seen_len(pieces: &[Piece]) -> u64 {
    pieces.iter().map(|p| if let Piece::Seen(b) = p { b.len() as u64 } else { 0 }).sum()
}

fn total_len(pieces: &[Piece]) -> u64 {
    pieces.iter().map(|p| if let Piece::Seen(b) = p { b.len() as u64 } else { *p_unseen(p) }).sum()
}

fn p_unseen<'p>(p: &'p Piece) -> &'p u64 {
    match p {
        Piece::Unseen(n) => n,
        Piece::Seen(_) => &0,
    }
}

/// The bytes the pieces say were seen, at their offsets, with unseen ones as `None`.
fn rebuilt(pieces: &[Piece]) -> Vec<Option<u8>> {
    let mut out = Vec::new();
    for p in pieces {
        match p {
            Piece::Seen(b) => out.extend(b.iter().map(|&x| Some(x))),
            Piece::Unseen(n) => out.extend(std::iter::repeat_n(None, *n as usize)),
        }
    }
    out
}

/// :status 200 then a body of `body` bytes ending the stream.
fn ok(stream: u32, body: usize) -> Vec<u8> {
    cat(&[&frame(HEADERS, FLAG_END_HEADERS, stream, &[0x88]), &frame(DATA, FLAG_END_STREAM, stream, &vec![b'x'; body])])
}

#[test]
fn walked_headers_sit_at_their_offsets_and_agree_with_the_bytes() {
    let write = cat(&[&ok(1, 600), &ok(3, 10), &frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]), &ok(5, 2000)]);
    let walk = KernelWalk::of(&write, 0);
    assert_eq!(walk.lens.len(), 6, "frames ending past the head: DATA 1, HEADERS+DATA 3, WINDOW_UPDATE, 5's two");
    let (head, tail) = (&write[..HEAD], &write[write.len() - TAIL..]);
    let mut laid = Vec::new();
    pieces(head, write.len() as u64, tail, &walk.walked(), &mut laid);
    assert_eq!(total_len(&laid), write.len() as u64);
    let bytes = rebuilt(&laid);
    assert!(bytes.iter().zip(&write).all(|(seen, real)| seen.is_none_or(|b| b == *real)), "every seen byte is right");
    // The head, 5 headers past it (DATA 1's is inside), the HEADERS' and WINDOW_UPDATE's
    // payloads, the tail.
    assert_eq!(seen_len(&laid), (HEAD + 5 * 9 + 1 + 1 + 4 + TAIL) as u64);
}

#[test]
fn a_header_across_the_head_end_is_not_given_twice() {
    // The second frame's header starts 4 bytes before the head's end.
    let first = frame(DATA, 0, 1, &vec![0; HEAD - 4 - 9]);
    let write = cat(&[&first, &ok(1, 100)]);
    let walk = KernelWalk::of(&write, 0);
    assert_eq!(walk.start, (HEAD - 4) as u64);
    let mut laid = Vec::new();
    pieces(&write[..HEAD], write.len() as u64, &write[write.len() - TAIL..], &walk.walked(), &mut laid);
    assert_eq!(total_len(&laid), write.len() as u64);
    let bytes = rebuilt(&laid);
    assert!(bytes[..HEAD + 5].iter().all(Option::is_some), "the header's 5 bytes past the head follow it");
    assert!(bytes.iter().zip(&write).all(|(seen, real)| seen.is_none_or(|b| b == *real)));
}

#[test]
fn no_walk_leaves_head_gap_tail() {
    let mut laid = Vec::new();
    let bytes = vec![7u8; 2000];
    pieces(&bytes[..HEAD], 2000, &bytes[2000 - TAIL..], &Walked::default(), &mut laid);
    assert!(
        matches!(laid[..], [Piece::Seen(h), Piece::Unseen(1472), Piece::Seen(t)] if h.len() == HEAD && t.len() == TAIL)
    );
}

#[test]
fn a_walk_past_the_syscall_is_cut_at_its_end() {
    // Offsets no kernel walk gives (past the bytes moved): nothing beyond `len`, no panic.
    let headers = [0u8, 0, 4, 8, 0, 0, 0, 0, 0].repeat(3);
    let lens = [4u8; 3];
    let payloads = [1u8; 3 * PAYLOAD];
    let bytes = vec![0u8; 600];
    for start in [590, 600, 700, u64::from(u32::MAX)] {
        let walked = Walked {
            origin: 0,
            start,
            headers: &headers,
            payload_lens: &lens,
            payloads: &payloads,
            payload_slot: PAYLOAD,
        };
        let mut laid = Vec::new();
        pieces(&bytes[..HEAD], 600, &bytes[600 - TAIL..], &walked, &mut laid);
        assert_eq!(total_len(&laid), 600, "start {start}");
    }
}

/// A server connection whose syscalls the kernel reports with the walk past the head.
struct Walking {
    conn: Connection,
    out: Vec<crate::Exchange>,
}

impl Walking {
    fn syscall(&mut self, dir: Direction, ts: u64, bytes: &[u8], origin: Option<usize>) {
        let walk = origin.filter(|_| bytes.len() > HEAD).map(|o| KernelWalk::of(bytes, o)).unwrap_or_default();
        let seg = Segment {
            ts_ns: ts,
            tid: 1,
            len: bytes.len() as u64,
            head: &bytes[..bytes.len().min(HEAD)],
            tail: &bytes[bytes.len().saturating_sub(TAIL)..],
            queued_since_ns: None,
            walked: walk.walked(),
        };
        self.conn.on_segment(dir, &seg, &mut self.out);
    }
}

/// Eight streams per write, each response with a literal header the dynamic table keeps (as
/// `date` is), as h2load with `-m 8` gets them; `walk`: the kernel walks past the head.
fn eight_streams_per_write(walk: bool) -> Walking {
    let mut c = Walking { conn: Connection::new(Role::Server), out: Vec::new() };
    let preface = cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[])]);
    c.syscall(Direction::Read, 1, &preface, walk.then_some(PREFACE.len()));
    c.syscall(Direction::Write, 2, &frame(SETTINGS, 0, 0, &[]), walk.then_some(0));
    for round in 0..10u32 {
        let streams: Vec<u32> = (0..8).map(|i| 16 * round + 2 * i + 1).collect();
        let requests: Vec<u8> = streams.iter().flat_map(|&s| get(s, b"/")).collect();
        let ts = 100 * u64::from(round) + 10;
        c.syscall(Direction::Read, ts, &requests, walk.then_some(0));
        let mut responses = Vec::new();
        for &s in &streams {
            // :status 200, then `x-r: <round>` as a literal with incremental indexing.
            let block = [0x88, 0x40, 0x03, b'x', b'-', b'r', 0x01, b'0' + round as u8];
            responses.extend(frame(HEADERS, FLAG_END_HEADERS, s, &block));
            responses.extend(frame(DATA, FLAG_END_STREAM, s, &[b'y'; 120]));
        }
        c.syscall(Direction::Write, ts + 5, &responses, walk.then_some(0));
    }
    c
}

#[test]
fn many_streams_per_write_keep_their_statuses_with_the_walk() {
    let without = eight_streams_per_write(false);
    assert!(without.conn.lost_sync() > 0, "the test needs writes whose frames run past the head");
    assert!(without.out.iter().filter(|e| e.status.is_none()).count() > 0);
    let with = eight_streams_per_write(true);
    assert_eq!(with.out.len(), 80);
    assert!(
        with.out.iter().all(|e| e.status == Some(200)),
        "{:?}",
        with.out.iter().map(|e| e.status).collect::<Vec<_>>()
    );
    assert_eq!((with.conn.lost_sync(), with.conn.h2_signals().resyncs), (0, 0));
    assert_eq!(with.out.iter().map(|e| e.response_end_ns).max(), Some(915));
}

#[test]
fn a_walk_from_the_wrong_place_is_not_used() {
    // The write starts mid-frame (the rest of a DATA frame from the last write); a kernel walk
    // from its first byte would be garbage and must not be fed to the walker.
    let mut c = Walking { conn: Connection::new(Role::Server), out: Vec::new() };
    c.syscall(Direction::Read, 1, &cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[])]), Some(PREFACE.len()));
    c.syscall(Direction::Read, 2, &get(1, b"/"), Some(0));
    let response = cat(&[&frame(HEADERS, FLAG_END_HEADERS, 1, &[0x88]), &frame(DATA, FLAG_END_STREAM, 1, &[0; 1000])]);
    let (a, b) = response.split_at(100);
    c.syscall(Direction::Write, 3, a, Some(0));
    // Zeros read as empty DATA headers: the kernel's walk from the start of `b` finds some.
    assert!(!KernelWalk::of(b, 0).lens.is_empty(), "the kernel would have walked garbage here");
    c.syscall(Direction::Write, 4, b, Some(0));
    assert_eq!(c.out.len(), 1);
    assert_eq!((c.out[0].status, c.out[0].response_end_ns), (Some(200), 4));
    assert_eq!(c.conn.lost_sync(), 0);
}

/// The length field of the frame header at `at` of `bytes`: its first 3 bytes.
fn length_at(bytes: &[u8], at: usize) -> usize {
    usize::from(bytes[at]) << 16 | usize::from(bytes[at + 1]) << 8 | usize::from(bytes[at + 2])
}

/// Where the next read's first header is after `chunk`, walking from `from`, as the kernel kept
/// it before a header's first bytes were kept too: past a header the chunk's end cuts, once its
/// length is in the chunk. Also whether the chunk ended inside a header.
fn next_place_past_cut(chunk: &[u8], from: usize) -> (Option<usize>, bool) {
    let mut at = from;
    while at + 9 <= chunk.len() {
        at += 9 + length_at(chunk, at);
    }
    let cut = at < chunk.len();
    if cut && at + 3 <= chunk.len() {
        at += 9 + length_at(chunk, at);
    }
    (at.checked_sub(chunk.len()), cut)
}

/// A server reading `count` GETs in the pieces `reads` makes of their bytes (each read's end,
/// and where the kernel's walk of it starts), then answering each: every stream must come out
/// once with its status, and the walk never lose sync.
fn assert_requests_read_in_pieces(count: u32, reads: impl FnOnce(&[u8]) -> Vec<(usize, Option<usize>)>) {
    let mut c = Walking { conn: Connection::new(Role::Server), out: Vec::new() };
    c.syscall(Direction::Read, 1, &cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[])]), Some(PREFACE.len()));
    let streams: Vec<u32> = (0..count).map(|i| 2 * i + 1).collect();
    let requests: Vec<u8> = streams.iter().flat_map(|&s| get(s, b"/items/of/some/length")).collect();
    let mut from = 0;
    for (i, (to, origin)) in reads(&requests).into_iter().enumerate() {
        c.syscall(Direction::Read, 10 + i as u64, &requests[from..to], origin);
        from = to;
    }
    for (i, &s) in streams.iter().enumerate() {
        c.syscall(Direction::Write, 1000 + i as u64, &ok(s, 10), Some(0));
    }
    assert_eq!(c.conn.lost_sync(), 0);
    assert_eq!(c.out.len(), streams.len());
    assert!(c.out.iter().all(|e| e.status == Some(200)));
}

#[test]
fn reads_that_end_inside_a_header_are_walked_from_past_it() {
    // Sixty GETs read 600 bytes at a time (what room a gateway's buffer has left): reads end
    // inside headers, and the next read's first header lies past that frame's payload.
    assert_requests_read_in_pieces(60, |requests| {
        let (mut place, mut cuts, mut reads) = (Some(0), 0, Vec::new());
        for (i, chunk) in requests.chunks(600).enumerate() {
            reads.push((i * 600 + chunk.len(), place));
            let (next, cut) = next_place_past_cut(chunk, place.unwrap_or(0));
            (place, cuts) = (next, cuts + usize::from(cut && next.is_some()));
        }
        assert!(cuts > 0, "the test needs reads that end inside a header, past its length");
        reads
    });
}

#[test]
fn reads_that_end_before_a_headers_length_is_whole_are_walked_from_past_it() {
    // Reads of about 600 bytes that end 1 or 2 bytes into a frame header (a TLS record
    // boundary): the kernel keeps those bytes, and the next read's first bytes complete the
    // length, so its walk starts at the next header all the same (`h2_next_partial`); userspace
    // completes the length alike.
    assert_requests_read_in_pieces(150, |requests| {
        let mut starts = Vec::new();
        let mut at = 0;
        while at + 9 <= requests.len() {
            starts.push(at);
            at += 9 + length_at(requests, at);
        }
        let mut ends: Vec<usize> = Vec::new();
        for &start in &starts {
            if start >= ends.last().copied().unwrap_or(0) + 600 {
                ends.push(start + 1 + ends.len() % 2);
            }
        }
        assert!(ends.len() >= 4, "the test needs reads that end 1 and 2 bytes into a header: {ends:?}");
        ends.push(requests.len());
        let mut from = 0;
        let mut reads = Vec::new();
        for to in ends {
            // The first whole header at or after the read's start: where the kernel's walk begins.
            let origin = starts.iter().find(|&&start| start >= from).map_or(0, |&start| start - from);
            reads.push((to, Some(origin)));
            from = to;
        }
        reads
    });
}

/// The client's first write: preface, SETTINGS and twelve requests whose paths are
/// `path_len` bytes, past the head.
fn first_write(path_len: usize) -> Vec<u8> {
    let requests = (0..12u8)
        .flat_map(|i| get(2 * u32::from(i) + 1, &[b"/api/".as_slice(), &vec![b'a' + i; path_len - 5]].concat()));
    cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[])]).into_iter().chain(requests).collect()
}

fn paths_in_flight(c: &Walking) -> Vec<usize> {
    c.conn.in_flight().map(|r| r.path.as_str().len()).collect()
}

#[test]
fn a_first_read_walked_from_the_end_of_the_preface() {
    // Header blocks of 42 bytes: whole in the kernel's 48-byte payload starts.
    let first = first_write(35);
    assert!(first.len() > HEAD + 100);
    let mut c = Walking { conn: Connection::new(Role::Server), out: Vec::new() };
    c.syscall(Direction::Read, 1, &first, Some(PREFACE.len()));
    assert_eq!(paths_in_flight(&c), vec![35; 12], "every request and its path, those past the head included");
    assert_eq!(c.conn.lost_sync(), 0);
    // A walk that claims to start at the syscall's first byte while the preface is still to
    // skip is not used: sync is lost as without it.
    let mut wrong = Walking { conn: Connection::new(Role::Server), out: Vec::new() };
    wrong.syscall(Direction::Read, 1, &first, Some(0));
    assert_eq!(wrong.conn.lost_sync(), 1);
}

#[test]
fn header_blocks_longer_than_the_kept_start_still_count() {
    // 67-byte blocks: past the head only their first 48 bytes, not the whole path; each request
    // is still counted, and the walk keeps sync.
    let first = first_write(60);
    let mut c = Walking { conn: Connection::new(Role::Server), out: Vec::new() };
    c.syscall(Direction::Read, 1, &first, Some(PREFACE.len()));
    let paths = paths_in_flight(&c);
    assert_eq!(paths.len(), 12);
    assert!(paths[..5].iter().all(|&n| n == 60) && paths[7..].iter().all(|&n| n == 0), "{paths:?}");
    assert_eq!(c.conn.lost_sync(), 0);
}
