use super::*;
use crate::exchange::Segment;

fn seg(len: u64, head: &[u8], tail: &[u8]) -> Segment<'static> {
    // Tests leak their small buffers for 'static segments.
    Segment {
        ts_ns: 7,
        tid: 3,
        len,
        head: Box::leak(head.to_vec().into_boxed_slice()),
        tail: Box::leak(tail.to_vec().into_boxed_slice()),
        queued_since_ns: None,
        walked: Default::default(),
    }
}

fn full(data: &[u8]) -> Segment<'static> {
    seg(data.len() as u64, data, &data[data.len().saturating_sub(16)..])
}

/// All events of feeding `segs`, with the default body framing.
fn events(kind: Kind, segs: &[Segment]) -> Vec<Event> {
    let mut parser = Parser::new(kind);
    let mut all = Vec::new();
    for s in segs {
        let mut cur = Cursor::new(s);
        while let Some(e) = parser.step(&mut cur) {
            all.push(e);
        }
    }
    all
}

fn framing(events: &[Event]) -> Framing {
    events
        .iter()
        .find_map(|e| match e {
            Event::Head(f) => Some(*f),
            _ => None,
        })
        .expect("a Head event")
}

fn ends(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::End { bytes, .. } => Some(*bytes),
            _ => None,
        })
        .collect()
}

#[test]
fn framing_headers_are_case_insensitive_and_only_facts_are_kept() {
    let req = b"POST /p HTTP/1.1\r\ncontent-LENGTH:  12 \r\nCONNECTION: keep-alive, Close\r\nX-Secret: hunter2\r\n\r\n";
    let ev = events(Kind::Request, &[full(req)]);
    let f = framing(&ev);
    assert_eq!((f.content_length, f.close, f.chunked, f.complete), (Some(12), true, false, true));
    assert!(!format!("{ev:?}").contains("hunter2"), "a header value leaked into an event");
}

#[test]
fn transfer_coding_chunked_only_when_last() {
    let te = |v: &str| {
        let resp = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {v}\r\n\r\n");
        framing(&events(Kind::Response, &[full(resp.as_bytes())]))
    };
    assert!(te("gzip, chunked").chunked);
    assert!(!te("chunked, gzip").chunked);
    assert!(!te("xchunked").chunked);
    assert_eq!(response_body(Some(200), Some(Method::Get), &te("chunked, gzip")), Body::UntilClose);
}

#[test]
fn malformed_or_conflicting_length_is_unknown_framing() {
    for headers in [
        "Content-Length: 1x\r\n",
        "Content-Length: 3\r\nContent-Length: 4\r\n",
        "Content-Length: 99999999999999999999999\r\n",
    ] {
        let req = format!("POST / HTTP/1.1\r\n{headers}\r\n");
        let f = framing(&events(Kind::Request, &[full(req.as_bytes())]));
        assert_eq!(request_body(Method::Post, &f), Body::Unknown, "{headers:?}");
    }
    // Repeating the same value is fine.
    let req = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc";
    let ev = events(Kind::Request, &[full(req)]);
    assert_eq!(ends(&ev), vec![req.len() as u64], "{ev:?}");
}

#[test]
fn chunk_size_overflow_loses_sync() {
    let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111111\r\n";
    let mut parser = Parser::new(Kind::Response);
    let s = full(resp);
    let mut cur = Cursor::new(&s);
    while parser.step(&mut cur).is_some() {}
    assert_eq!((parser.is_unknown(), parser.lost_sync()), (true, 1));
}

#[test]
fn overlapping_head_and_tail_are_counted_once() {
    let data = b"HTTP/1.1 204 No Content\r\n\r\n";
    // The kernel sends a tail even when the head holds everything.
    let s = seg(data.len() as u64, data, &data[data.len() - 16..]);
    assert_eq!(ends(&events(Kind::Response, &[s])), vec![data.len() as u64]);
    // Head shorter than the data, tail overlapping it: the bytes past the head come from the tail.
    let s = seg(data.len() as u64, &data[..20], &data[data.len() - 16..]);
    assert_eq!(ends(&events(Kind::Response, &[s])), vec![data.len() as u64]);
}

#[test]
fn inconsistent_segments_do_not_panic() {
    let data = b"GET / HTTP/1.1\r\n\r\n";
    for s in [seg(3, data, data), seg(0, data, b""), seg(u64::MAX, data, b"xyz"), seg(5, b"", data)] {
        let _ = events(Kind::Request, &[s]);
        let _ = events(Kind::Response, &[s]);
    }
}

#[test]
fn message_starting_in_unseen_bytes_is_reported_unknown() {
    // A 10-byte body, then 1000 unseen bytes: the next message starts there.
    let head = b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789";
    let s = seg(head.len() as u64 + 1000, head, b"");
    let ev = events(Kind::Request, &[s]);
    assert_eq!(ends(&ev), vec![head.len() as u64]);
    let starts: Vec<_> = ev.iter().filter(|e| matches!(e, Event::Start(_))).collect();
    assert_eq!(starts.len(), 2);
    assert!(!framing(&ev[ev.len() - 1..]).complete);
}

#[test]
fn not_http_counts_from_the_message_start() {
    let ev = events(Kind::Request, &[full(b"GE"), full(b"T\x00 / HTTP/1.1\r\n")]);
    assert_eq!(ev, vec![Event::NotHttp { bytes: 17 }]);
    let ev = events(Kind::Response, &[full(b"HTTP/1.1 099 Weird\r\n\r\n")]);
    assert!(matches!(ev.as_slice(), [Event::NotHttp { .. }]));
}

#[test]
fn start_line_detection() {
    assert!(looks_like_start(Kind::Request, b"GET /x?y HTTP/1.1\r\nHost"));
    assert!(looks_like_start(Kind::Request, b"M-SEARCH * HTTP/1.1\n"));
    assert!(!looks_like_start(Kind::Request, b"GET /x HTTP/2.0\r\n"));
    assert!(!looks_like_start(Kind::Request, b"get /x HTTP/1.1\r\n"));
    assert!(!looks_like_start(Kind::Request, b"GET /x HTTP/1.1"));
    assert!(looks_like_start(Kind::Response, b"HTTP/1.1 200 OK\r\n"));
    assert!(!looks_like_start(Kind::Response, b"HTTP/1.1 2"));
}

#[test]
fn response_framing_rules() {
    let complete = Framing { complete: true, content_length: Some(5), ..Framing::default() };
    assert_eq!(response_body(Some(200), Some(Method::Get), &complete), Body::Length(5));
    assert_eq!(response_body(Some(200), Some(Method::Head), &complete), Body::None);
    assert_eq!(response_body(Some(304), Some(Method::Get), &complete), Body::None);
    assert_eq!(response_body(Some(101), None, &Framing::default()), Body::Upgrade);
    assert_eq!(response_body(Some(200), Some(Method::Connect), &complete), Body::Upgrade);
    assert_eq!(response_body(Some(407), Some(Method::Connect), &complete), Body::Length(5));
    assert_eq!(response_body(Some(200), None, &Framing { complete: true, ..Framing::default() }), Body::UntilClose);
    assert_eq!(response_body(Some(200), None, &Framing::default()), Body::Unknown);
    assert_eq!(request_body(Method::Get, &Framing { complete: true, ..Framing::default() }), Body::None);
}
