//! How a connection's HTTP/2 session starts: from the preface, from frames first seen mid-way,
//! and when the server writes before the client's preface comes.

use super::*;

/// HTTP/2 told from the frames of a connection first seen mid-way is reported once, for the
/// kernel to walk the connection from then on; from the preface it is not (the kernel saw it).
#[test]
fn http2_told_mid_way_is_reported_once() {
    let segment = |bytes: &'static [u8]| Segment {
        ts_ns: 1,
        tid: 1,
        len: bytes.len() as u64,
        head: bytes,
        tail: &[],
        queued_since_ns: None,
        walked: Default::default(),
    };
    // A HEADERS frame of stream 1 (END_STREAM | END_HEADERS): `:method GET`, `:path /`.
    let headers: &[u8] = &[0, 0, 2, 1, 5, 0, 0, 0, 1, 0x82, 0x84];
    let mut out = Vec::new();
    let mut mid_way = Connection::new(Role::Server);
    mid_way.on_segment(Direction::Read, &segment(headers), &mut out);
    assert!(mid_way.is_h2());
    assert!(mid_way.take_h2_mid_way(), "told mid-way");
    mid_way.on_segment(Direction::Read, &segment(headers), &mut out);
    assert!(!mid_way.take_h2_mid_way(), "reported once");

    let mut from_start = Connection::new(Role::Server);
    from_start.on_segment(Direction::Read, &segment(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), &mut out);
    assert!(from_start.is_h2());
    assert!(!from_start.take_h2_mid_way(), "the kernel saw the preface itself");

    // Over TLS the server writes its SETTINGS first. Followed since its handshake, the
    // connection is not one first seen mid-way: the preface comes next, and the request after it
    // counts.
    let settings: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
    let mut server_first = Connection::from_its_start(Role::Server);
    server_first.on_segment(Direction::Write, &segment(settings), &mut out);
    assert!(server_first.is_h2());
    assert!(!server_first.take_h2_mid_way(), "followed since its handshake");
    let preface_and_request: &'static [u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x02\x01\x05\0\0\0\x01\x82\x84";
    server_first.on_segment(Direction::Read, &segment(preface_and_request), &mut out);
    assert_eq!(server_first.in_flight().count(), 1, "the request after the preface");
    let mut seen_late = Connection::new(Role::Server);
    seen_late.on_segment(Direction::Write, &segment(settings), &mut out);
    assert!(seen_late.take_h2_mid_way(), "a server's frames first, its start unseen: mid-way");
    // Its client's preface still comes, and the session starts there: the request after it
    // counts (gRPC's C core writes first, on a connection whose accept was not seen).
    seen_late.on_segment(Direction::Read, &segment(preface_and_request), &mut out);
    assert_eq!(seen_late.in_flight().count(), 1, "the request after a preface that came late");
}

#[test]
fn grpc_core_server_writing_first_counts_its_first_call() {
    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
    let seg = |head: &[u8], len: usize, tail: &[u8]| -> Segment<'static> {
        Segment {
            ts_ns: 1,
            tid: 1,
            len: len as u64,
            head: Box::leak(head.to_vec().into_boxed_slice()),
            tail: Box::leak(tail.to_vec().into_boxed_slice()),
            queued_since_ns: None,
            walked: Default::default(),
        }
    };
    let settings = hex("0000180400000000000004003fffff0005003fffff000600002000fe0300000001");
    let window = hex("0000040800000000003f0000");
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let lit = |n: &str, v: &str| [&[0u8, n.len() as u8][..], n.as_bytes(), &[v.len() as u8], v.as_bytes()].concat();
    let block = [
        &[0x83u8, 0x86][..],
        &lit(":path", "/kt.Lookup/Get"),
        &lit(":authority", "x"),
        &lit("content-type", "application/grpc"),
        &lit("te", "trailers"),
    ]
    .concat();
    let frame = |t: u8, f: u8, s: u8, p: &[u8]| {
        [&[(p.len() >> 16) as u8, (p.len() >> 8) as u8, p.len() as u8, t, f, 0, 0, 0, s][..], p].concat()
    };
    let request =
        [preface, frame(4, 0, 0, &[]), frame(1, 4, 1, &block), frame(0, 1, 1, b"\0\0\0\0\x07present")].concat();
    let response = [
        hex("0000000401000000000000040800000000000000000c00"),
        hex("00080600000000000000000000000000"),
        hex("00004e010400000001"),
        hex(
            "88400c636f6e74656e742d74797065106170706c69636174696f6e2f677270634014677270632d6163636570742d656e636f64696e67176964656e746974792c206465666c6174652c20677a6970",
        ),
        hex("000005000000000001"),
        hex("0000000000"),
        hex("00000f010500000001"),
        hex("400b677270632d7374617475730130"),
    ];
    let (first, rest) = response.split_at(2);
    let mut out = Vec::new();
    let mut conn = Connection::new(Role::Server);
    let write1 = [settings.clone(), window.clone()].concat();
    conn.on_segment(Direction::Write, &seg(&settings, write1.len(), &window), &mut out);
    conn.on_segment(Direction::Read, &seg(&request, request.len(), &[]), &mut out);
    let acks = first.concat();
    conn.on_segment(Direction::Write, &seg(&acks, acks.len(), &[]), &mut out);
    let answer = rest.concat();
    conn.on_segment(Direction::Write, &seg(&answer, answer.len(), &[]), &mut out);
    assert_eq!(out.len(), 1, "the first call, answered: {out:?}");
    assert_eq!(out[0].grpc_status, Some(0));
}
