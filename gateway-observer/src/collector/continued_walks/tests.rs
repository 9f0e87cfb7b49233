use gateway_observer_common::{
    DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, H2_WALK_FRAMES, H2ContinuedEvent, H2DataEvent, H2Walk, data_shape,
    event_kind, walk_mode,
};
use gateway_observer_http::h2::{frames::Piece, walked::pieces};

use super::*;

fn bytes_of<T>(value: &T) -> Vec<u8> {
    // SAFETY: the records are repr(C) integers with explicit padding.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// A walk of `frames` HEADERS frames of 40 bytes each (every payload kept whole), from `origin`.
fn walk(origin: u32, frames: usize, continued: bool) -> H2Walk {
    let mut walk = H2Walk {
        origin,
        start: origin,
        frames: frames as u8,
        continued: u8::from(continued),
        _pad: [0; 6],
        headers: [[0; 9]; H2_WALK_FRAMES],
        payload_lens: [0; H2_WALK_FRAMES],
        payloads: [[0; H2_WALK_PAYLOAD_BYTES]; H2_WALK_FRAMES],
    };
    for i in 0..frames {
        walk.headers[i] = [0, 0, 40, 1, 4, 0, 0, 0, (2 * i + 1) as u8];
        walk.payload_lens[i] = 40;
        walk.payloads[i] = [0x88; H2_WALK_PAYLOAD_BYTES];
    }
    walk
}

const SK: u64 = 0xffff_1000;
const TID: u32 = 7;
const FRAME: u64 = 9 + 40;

/// A write of `len` bytes on SK by TID whose first 32 frames past a 512-byte head were walked.
fn walked_record(len: u64, continued: bool) -> Vec<u8> {
    bytes_of(&H2DataEvent { data: data_event(len, walk_mode::INLINE), walk: walk(0, H2_WALK_FRAMES, continued) })
}

/// A write of `len` bytes on SK by TID, with a 512-byte head and `h2_walk` set to `mode`.
fn data_event(len: u64, mode: u8) -> DataEvent {
    DataEvent {
        kind: event_kind::SOCKET_DATA,
        tid: TID,
        tgid: 1,
        fd: 3,
        sk: SK,
        timestamp_ns: 1,
        len,
        queued_since_ns: 0,
        shape: data_shape::WRITE_IOV,
        h2_walk: mode,
        head_len: DATA_HEAD_BYTES as u16,
        tail_len: 0,
        sock_lost: 0,
        head: [0; DATA_HEAD_BYTES],
        tail: [0; DATA_TAIL_BYTES],
    }
}

/// A continuation of a walk that began at `origin` with its first header at `start`.
fn first_continuation(origin: u32, start: u32, frames: usize, continued: bool) -> Vec<u8> {
    let walk = H2Walk { start, ..walk(origin, frames, continued) };
    bytes_of(&H2ContinuedEvent { kind: event_kind::SOCKET_H2_CONTINUED, tid: TID, sk: SK, walk })
}

fn continuation(origin: u64, frames: usize, continued: bool) -> Vec<u8> {
    let walk = walk(origin as u32, frames, continued);
    bytes_of(&H2ContinuedEvent { kind: event_kind::SOCKET_H2_CONTINUED, tid: TID, sk: SK, walk })
}

fn data(bytes: &[u8]) -> DataRecord<'_> {
    let Ok(SocketRecord::Data(data)) = decode(bytes) else { panic!("a data record") };
    data
}

fn more(bytes: &[u8]) -> ContinuedWalk<'_> {
    let Ok(SocketRecord::H2Continued(more)) = decode(bytes) else { panic!("a continuation") };
    more
}

/// The bytes a laid-out walk leaves unseen.
fn unseen(data: &DataRecord) -> u64 {
    let mut out = Vec::new();
    pieces(data.head, data.len, data.tail, &data.walked, &mut out);
    out.iter().map(|p| if let Piece::Unseen(n) = p { *n } else { 0 }).sum()
}

#[test]
fn continuations_add_their_headers_to_the_walk_before_them() {
    let frames = 32 + 32 + 5;
    let len = frames * FRAME;
    let record = walked_record(len, true);
    let mut walks = ContinuedWalks::default();
    assert!(walks.hold(&record, &data(&record)).is_none());
    // Continuations go on where the walk before stopped: 32 frames on, then 64.
    assert!(walks.extend(&more(&continuation(32 * FRAME, 32, true))).is_none());
    let whole = walks.extend(&more(&continuation(64 * FRAME, 5, false))).expect("the last continuation");
    let merged = whole.record().expect("the record");
    assert_eq!(merged.walked.headers.len(), frames as usize * 9);
    assert!(!merged.walk_continued);
    // Every frame header and payload is seen: nothing of the write is unknown.
    assert_eq!(unseen(&merged), 0);
    assert_eq!(walks.incomplete, 0);
    // Before the merge the walk ended 37 frames short.
    assert_eq!(unseen(&data(&record)), 37 * FRAME);
}

#[test]
fn a_walk_wholly_in_continuations_begins_where_the_first_says() {
    // Frames of 49 bytes from 0: the first ten end inside the 512-byte head, the eleventh (at
    // 490) runs past it: the walk keeps headers from there.
    let (start, frames) = (10 * FRAME, 10 + 32 + 4);
    let len = frames * FRAME;
    let record = bytes_of(&data_event(len, walk_mode::IN_CONTINUATIONS));
    let held = data(&record);
    assert!(held.walk_continued && held.walk_in_continuations && held.walked.is_empty());
    let mut walks = ContinuedWalks::default();
    assert!(walks.hold(&record, &held).is_none());
    assert!(walks.extend(&more(&first_continuation(0, start as u32, 32, true))).is_none());
    let whole = walks.extend(&more(&continuation(start + 32 * FRAME, 4, false))).expect("the last continuation");
    let merged = whole.record().expect("the record");
    assert_eq!((merged.walked.origin, merged.walked.start), (0, start));
    assert_eq!(merged.walked.headers.len(), 36 * 9);
    assert!(!merged.walk_continued && !merged.walk_in_continuations);
    // Every frame header and payload is seen: nothing of the write is unknown.
    assert_eq!(unseen(&merged), 0);
    assert_eq!(walks.incomplete, 0);
}

#[test]
fn a_walk_whose_first_continuation_never_comes_is_handed_on_unwalked() {
    let record = bytes_of(&data_event(40 * FRAME, walk_mode::IN_CONTINUATIONS));
    let mut walks = ContinuedWalks::default();
    walks.hold(&record, &data(&record));
    walks.after_drain();
    let late = walks.after_drain();
    let out = late[0].record().expect("the record");
    assert!(out.walked.is_empty() && !out.walk_continued && !out.walk_in_continuations);
    // Past its head the write is unknown, as for a record the kernel did not walk.
    assert_eq!(unseen(&out), 40 * FRAME - DATA_HEAD_BYTES as u64);
    assert_eq!(walks.incomplete, 1);
}

#[test]
fn a_continuation_from_elsewhere_ends_the_walk_where_it_got() {
    let record = walked_record(40 * FRAME, true);
    let mut walks = ContinuedWalks::default();
    walks.hold(&record, &data(&record));
    let out = walks.extend(&more(&continuation(33 * FRAME, 8, false))).expect("handed on");
    assert_eq!(out.record().expect("the record").walked.headers.len(), 32 * 9);
    assert_eq!(walks.incomplete, 1);
}

#[test]
fn a_record_whose_continuation_never_comes_is_handed_on_after_the_next_drain() {
    let record = walked_record(40 * FRAME, true);
    let mut walks = ContinuedWalks::default();
    walks.hold(&record, &data(&record));
    // The drain it came in may end before the kernel sent the continuation.
    assert!(walks.after_drain().is_empty());
    let late = walks.after_drain();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].record().expect("the record").walked.headers.len(), 32 * 9);
    assert_eq!(walks.incomplete, 1);
    // A continuation after that finds nothing to add to.
    assert!(walks.extend(&more(&continuation(32 * FRAME, 8, false))).is_none());
}

#[test]
fn a_second_walked_record_of_the_same_thread_and_socket_hands_on_the_first() {
    let record = walked_record(40 * FRAME, true);
    let mut walks = ContinuedWalks::default();
    walks.hold(&record, &data(&record));
    let first = walks.hold(&record, &data(&record)).expect("the first one");
    assert_eq!(first.record().expect("the record").walked.headers.len(), 32 * 9);
    assert_eq!(walks.incomplete, 1);
}

#[test]
fn held_records_are_bounded() {
    let mut walks = ContinuedWalks::default();
    let mut pushed_out = 0;
    for sk in 0..(MAX_WAITING as u64 + 3) {
        let mut record = walked_record(40 * FRAME, true);
        record[std::mem::offset_of!(DataEvent, sk)..][..8].copy_from_slice(&sk.to_ne_bytes());
        pushed_out += usize::from(walks.hold(&record, &data(&record)).is_some());
    }
    assert_eq!((pushed_out, walks.waiting.len()), (3, MAX_WAITING));
}
