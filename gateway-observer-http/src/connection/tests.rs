use super::*;

/// One syscall of a test stream (or the close).
#[derive(Clone, Debug)]
enum Step {
    Data { dir: Direction, ts: u64, tid: u32, queued: Option<u64>, bytes: Vec<u8> },
    Close(u64),
}

fn read(ts: u64, bytes: impl AsRef<[u8]>) -> Step {
    Step::Data { dir: Direction::Read, ts, tid: 1, queued: None, bytes: bytes.as_ref().to_vec() }
}

fn write(ts: u64, bytes: impl AsRef<[u8]>) -> Step {
    Step::Data { dir: Direction::Write, ts, tid: 1, queued: None, bytes: bytes.as_ref().to_vec() }
}

fn by(step: Step, thread: u32, queued_since: Option<u64>) -> Step {
    match step {
        Step::Data { dir, ts, bytes, .. } => Step::Data { dir, ts, tid: thread, queued: queued_since, bytes },
        close => close,
    }
}

/// `HTTP/1.1 <status>` with a Content-Length body.
fn response(status: u16, body: &str) -> String {
    format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: upstream\r\n\r\n")
}

#[derive(Debug, PartialEq)]
struct Outcome {
    exchanges: Vec<Exchange>,
    in_flight: Vec<InFlight>,
    non_http_bytes: u64,
    lost_sync: u64,
    is_http: bool,
}

/// Feeds `steps`, step `i` cut into segments at the offsets `cuts(i, len)` returns; each segment
/// is seen as the kernel reports it (first 512 and last 16 bytes).
fn run_cut(role: Role, steps: &[Step], cuts: &dyn Fn(usize, usize) -> Vec<usize>) -> Outcome {
    let mut conn = Connection::new(role);
    let mut exchanges = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Close(ts) => conn.on_close(*ts, &mut exchanges),
            Step::Data { dir, ts, tid, queued, bytes } => {
                let mut bounds = cuts(i, bytes.len());
                bounds.insert(0, 0);
                bounds.push(bytes.len());
                for w in bounds.windows(2) {
                    let data = &bytes[w[0]..w[1]];
                    if data.is_empty() {
                        continue;
                    }
                    let seg = Segment {
                        ts_ns: *ts,
                        tid: *tid,
                        len: data.len() as u64,
                        head: &data[..data.len().min(512)],
                        tail: &data[data.len().saturating_sub(16)..],
                        queued_since_ns: *queued,
                        walked: Default::default(),
                    };
                    conn.on_segment(*dir, &seg, &mut exchanges);
                }
            }
        }
    }
    Outcome {
        exchanges,
        in_flight: conn.in_flight().cloned().collect(),
        non_http_bytes: conn.non_http_bytes(),
        lost_sync: conn.lost_sync(),
        is_http: conn.is_http(),
    }
}

fn run(role: Role, steps: &[Step]) -> Outcome {
    run_cut(role, steps, &|_, _| Vec::new())
}

/// Runs `steps` whole, then byte by byte, then each step cut in two at every offset: all must
/// give the same exchanges. Steps must be at most 512 bytes (fully visible however cut).
fn run_checked(role: Role, steps: &[Step]) -> Outcome {
    for step in steps {
        if let Step::Data { bytes, .. } = step {
            assert!(bytes.len() <= 512, "run_checked needs fully visible steps");
        }
    }
    let whole = run(role, steps);
    let bytewise = run_cut(role, steps, &|_, len| (1..len).collect());
    assert_eq!(bytewise, whole, "byte-by-byte feeding differs from whole segments");
    for (i, step) in steps.iter().enumerate() {
        let Step::Data { bytes, .. } = step else { continue };
        for at in 1..bytes.len() {
            let cut = run_cut(role, steps, &|j, _| if j == i { vec![at] } else { Vec::new() });
            assert_eq!(cut, whole, "step {i} cut at byte {at} differs from whole segments");
        }
    }
    whole
}

fn exchange(method: Method, path: &str, status: u16, times: [u64; 4], bytes: [usize; 2]) -> Exchange {
    Exchange {
        method,
        path: path.into(),
        status: Some(status),
        grpc_status: None,
        tid: 1,
        request_start_ns: times[0],
        queued_since_ns: None,
        request_end_ns: times[1],
        response_start_ns: Some(times[2]),
        response_end_ns: times[3],
        request_bytes: bytes[0] as u64,
        response_bytes: bytes[1] as u64,
        outcome: ExchangeOutcome::Complete,
    }
}

#[test]
fn single_exchange_carries_times_thread_and_queueing() {
    let req = "GET /users/42?token=secret#frag HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\n\r\n";
    let resp = response(200, "hello");
    let steps = [by(read(100, req), 7, Some(90)), by(write(300, &resp), 8, None)];
    let out = run_checked(Role::Server, &steps);
    // The path is kept without its query and fragment, and read with its id redacted.
    let mut want = exchange(Method::Get, "/users/42", 200, [100, 100, 300, 300], [req.len(), resp.len()]);
    want.tid = 7;
    want.queued_since_ns = Some(90);
    assert_eq!(out.exchanges, vec![want]);
    assert_eq!(out.exchanges[0].path.redacted(), "/users/{id}");
    assert_eq!(format!("{:?}", out.exchanges[0].path), "RequestPath(\"/users/{id}\")", "Debug shows no raw id");
    assert!(out.in_flight.is_empty());
    assert_eq!((out.non_http_bytes, out.lost_sync, out.is_http), (0, 0, true));
}

#[test]
fn keep_alive_three_exchanges() {
    let mut steps = Vec::new();
    for i in 0..3u64 {
        let base = 1000 * (i + 1);
        steps.push(read(base, get(&format!("/item/{}", ["red", "green", "blue"][i as usize]))));
        steps.push(write(base + 500, response(200 + i as u16, "x".repeat(i as usize).as_str())));
    }
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> =
        out.exchanges.iter().map(|e| (e.path.as_str(), e.status, e.request_start_ns, e.response_end_ns)).collect();
    assert_eq!(
        got,
        vec![
            ("/item/red", Some(200), 1000, 1500),
            ("/item/green", Some(201), 2000, 2500),
            ("/item/blue", Some(202), 3000, 3500)
        ]
    );
}

#[test]
fn pipelined_requests_match_responses_in_order() {
    let reqs = format!("{}{}{}", get("/a"), "POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", get("/c"));
    let chunked = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n";
    let resps = format!("{}{}{}", response(200, "aa"), chunked, response(404, ""));
    let out = run_checked(Role::Server, &[read(10, &reqs), write(20, &resps)]);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.method, e.path.as_str(), e.status, e.request_bytes)).collect();
    assert_eq!(
        got,
        vec![
            (Method::Get, "/a", Some(200), get("/a").len() as u64),
            (Method::Post, "/b", Some(201), 42),
            (Method::Get, "/c", Some(404), get("/c").len() as u64)
        ]
    );
    let response_bytes: u64 = out.exchanges.iter().map(|e| e.response_bytes).sum();
    assert_eq!(response_bytes, resps.len() as u64);
}

#[test]
fn head_response_has_no_body() {
    let head_resp = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    let steps = [
        read(1, "HEAD /file HTTP/1.1\r\n\r\n"),
        write(2, head_resp),
        read(3, get("/next")),
        write(4, response(200, "ok")),
    ];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.method, e.status, e.response_bytes, e.response_end_ns)).collect();
    assert_eq!(
        got,
        vec![
            (Method::Head, Some(200), head_resp.len() as u64, 2),
            (Method::Get, Some(200), response(200, "ok").len() as u64, 4)
        ]
    );
}

#[test]
fn continue_100_is_not_the_final_response() {
    let head = "POST /upload HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    let interim = "HTTP/1.1 100 Continue\r\n\r\n";
    let fin = response(201, "");
    let steps = [read(100, head), write(200, interim), read(300, "hello"), write(400, &fin)];
    let out = run_checked(Role::Server, &steps);
    let e = &out.exchanges[..];
    assert_eq!(e.len(), 1);
    assert_eq!(
        (e[0].status, e[0].request_end_ns, e[0].response_start_ns, e[0].response_end_ns),
        (Some(201), 300, Some(400), 400)
    );
    assert_eq!(
        (e[0].request_bytes, e[0].response_bytes),
        ((head.len() + 5) as u64, (interim.len() + fin.len()) as u64)
    );
}

#[test]
fn status_204_and_304_have_no_body() {
    let steps = [
        read(1, format!("{}{}{}", get("/a"), get("/b"), get("/c"))),
        // 204 and 304 carry no body whatever their headers say.
        write(2, "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n"),
        write(3, response(200, "body")),
    ];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.path.as_str(), e.status, e.response_end_ns)).collect();
    assert_eq!(got, vec![("/a", Some(204), 2), ("/b", Some(304), 2), ("/c", Some(200), 3)]);
}

#[test]
fn chunked_sizes_and_trailers_across_segments() {
    let body = format!("5;ext=1\r\nhello\r\n1A\r\n{}\r\n0\r\nX-Checksum: 1\r\n\r\n", "z".repeat(26));
    let steps = [
        read(1, get("/stream")),
        write(2, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"),
        write(3, &body[..7]),
        write(4, &body[7..40]),
        write(5, &body[40..]),
        read(6, get("/after")),
        write(7, response(200, "ok")),
    ];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.path.as_str(), e.response_start_ns, e.response_end_ns)).collect();
    assert_eq!(got, vec![("/stream", Some(2), 5), ("/after", Some(7), 7)]);
    assert_eq!(out.exchanges[0].response_bytes, (53 + body.len()) as u64);
    assert_eq!(out.lost_sync, 0);
}

#[test]
fn chunked_body_beyond_the_head_ends_by_count_or_tail() {
    let headers = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    // One chunk: skipped by count, its end found in the tail.
    let one = format!("{headers}c350\r\n{}\r\n0\r\n\r\n", "d".repeat(50_000));
    // Many chunks: the second size line is unseen; the tail shows the last chunk.
    let chunk = format!("4000\r\n{}\r\n", "d".repeat(0x4000));
    let many = format!("{headers}{}0\r\n\r\n", chunk.repeat(3));
    for (body, lost) in [(&one, 0), (&many, 1)] {
        let steps = [read(1, get("/big")), write(2, body), read(3, get("/next")), write(4, response(200, ""))];
        let out = run(Role::Server, &steps);
        let got: Vec<_> =
            out.exchanges.iter().map(|e| (e.path.as_str(), e.response_end_ns, e.response_bytes)).collect();
        assert_eq!(got, vec![("/big", 2, body.len() as u64), ("/next", 4, 37)], "lost {lost}");
        assert_eq!(out.lost_sync, lost);
    }
}

#[test]
fn content_length_body_beyond_the_head_is_skipped_by_count() {
    let upload = "POST /upload HTTP/1.1\r\nContent-Length: 100000\r\n\r\n";
    let body = "u".repeat(100_000);
    let download = format!("HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n{}", "v".repeat(70_000));
    let steps = [
        read(1, format!("{upload}{}", &body[..60_000])),
        read(2, &body[60_000..]),
        write(3, &download[..1000]),
        write(4, &download[1000..]),
        read(5, get("/next")),
        write(6, response(200, "")),
    ];
    let out = run(Role::Server, &steps);
    let got: Vec<_> = out
        .exchanges
        .iter()
        .map(|e| (e.path.as_str(), e.request_end_ns, e.request_bytes, e.response_end_ns, e.response_bytes))
        .collect();
    assert_eq!(
        got,
        vec![("/upload", 2, (upload.len() + 100_000) as u64, 4, download.len() as u64), ("/next", 5, 38, 6, 37)]
    );
    assert_eq!(out.lost_sync, 0);
}

#[test]
fn header_block_beyond_the_head_uses_fallbacks() {
    let cookie = "c".repeat(1000);
    let big_request = format!("GET /big?q=1 HTTP/1.1\r\nCookie: {cookie}\r\n\r\n");
    let big_response = format!("HTTP/1.1 200 OK\r\nSet-Cookie: {cookie}\r\nContent-Length: 10\r\n\r\n0123456789");
    let steps = [
        by(read(10, &big_request), 3, Some(5)),
        write(20, &big_response),
        write(21, "more of the body"),
        read(30, get("/next")),
        write(40, response(200, "")),
    ];
    let out = run(Role::Server, &steps);
    let got: Vec<_> = out
        .exchanges
        .iter()
        .map(|e| (e.path.as_str(), e.tid, e.request_end_ns, e.response_start_ns, e.response_end_ns, e.response_bytes))
        .collect();
    // The request ends when the response starts; the response of unknown framing when the next
    // request is read (at its last bytes, t=21).
    assert_eq!(
        got,
        vec![("/big", 3, 10, Some(20), 21, (big_response.len() + 16) as u64), ("/next", 1, 30, Some(40), 40, 37)]
    );
    assert_eq!(out.exchanges[0].request_bytes, big_request.len() as u64);
    assert_eq!(out.lost_sync, 2);

    // Unknown framing that ends by a tail showing the last chunk.
    let chunked =
        format!("HTTP/1.1 200 OK\r\nSet-Cookie: {cookie}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    let out = run(Role::Client, &[write(1, get("/c")), read(2, &chunked), write(3, get("/d"))]);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.path.as_str(), e.response_end_ns)).collect();
    assert_eq!(got, vec![("/c", 2)]);
    assert_eq!(out.in_flight.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(), vec!["/d"]);
}

#[test]
fn response_until_close() {
    let steps = [
        by(write(100, "GET /legacy HTTP/1.0\r\nConnection: close\r\n\r\n"), 4, None),
        by(read(200, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nfirst part "), 4, Some(150)),
        read(300, "second part"),
        Step::Close(900),
    ];
    let out = run_checked(Role::Client, &steps);
    let e = &out.exchanges;
    assert_eq!(e.len(), 1);
    assert_eq!(
        (e[0].outcome, e[0].status, e[0].response_end_ns, e[0].tid),
        (ExchangeOutcome::Complete, Some(200), 900, 4)
    );
    // Client role: the request's first segment was a write, nothing queued.
    assert_eq!(e[0].queued_since_ns, None);
    assert_eq!(e[0].response_bytes, 60);
}

#[test]
fn websocket_upgrade_stops_parsing() {
    let steps = [
        read(1, "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        write(2, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        read(3, [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f]),
        write(4, [0x81, 0x05, b'h', b'e', b'l', b'l', b'o']),
        Step::Close(5),
    ];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.path.as_str(), e.status, e.outcome, e.response_end_ns)).collect();
    assert_eq!(got, vec![("/ws", Some(101), ExchangeOutcome::Upgraded, 2)]);
    assert_eq!((out.is_http, out.non_http_bytes), (true, 0));
}

#[test]
fn connect_tunnel_and_refused_connect() {
    let tls = [0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01];
    let mut connect = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".to_vec();
    connect.extend(tls); // optimistic data before the answer
    let steps =
        [read(1, &connect), write(2, "HTTP/1.1 200 Connection Established\r\n\r\n"), read(3, tls), write(4, tls)];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.method, e.path.as_str(), e.status, e.outcome)).collect();
    assert_eq!(got, vec![(Method::Connect, "example.com:443", Some(200), ExchangeOutcome::Upgraded)]);
    assert_eq!((out.is_http, out.non_http_bytes), (true, 0));

    let steps = [
        read(1, "CONNECT db:5432 HTTP/1.1\r\n\r\n"),
        write(2, response(403, "")),
        read(3, get("/ok")),
        write(4, response(200, "")),
    ];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out.exchanges.iter().map(|e| (e.method, e.status, e.outcome)).collect();
    assert_eq!(
        got,
        vec![
            (Method::Connect, Some(403), ExchangeOutcome::Complete),
            (Method::Get, Some(200), ExchangeOutcome::Complete)
        ]
    );
}

#[test]
fn tls_and_redis_are_not_http() {
    let hello = [0x16u8, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03];
    let out = run_checked(Role::Server, &[read(1, hello), write(2, [0x16, 0x03, 0x03, 0x00, 0x10]), Step::Close(3)]);
    assert_eq!((out.is_http, out.non_http_bytes, out.exchanges.len()), (false, 16, 0));

    let out = run_checked(Role::Client, &[write(1, "*1\r\n$4\r\nPING\r\n"), read(2, "+PONG\r\n"), Step::Close(3)]);
    assert_eq!((out.is_http, out.non_http_bytes, out.exchanges.len()), (false, 21, 0));

    // An inline Redis command looks like a method at first.
    let out = run_checked(Role::Client, &[write(1, "PING\r\n")]);
    assert_eq!((out.is_http, out.non_http_bytes), (false, 6));
    // HTTP/2's preface starts an HTTP/2 connection (h2::session::tests), not garbage.
    let out = run(Role::Server, &[read(1, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")]);
    assert_eq!((out.is_http, out.non_http_bytes), (true, 0));
}

#[test]
fn garbage_after_a_valid_exchange() {
    let steps = [read(1, get("/a")), write(2, response(200, "ok")), read(3, "\x00\x01\x02garbage"), read(4, get("/b"))];
    let out = run_checked(Role::Server, &steps);
    assert_eq!(out.exchanges.len(), 1);
    assert_eq!((out.is_http, out.non_http_bytes), (false, (10 + get("/b").len()) as u64));
    assert!(out.in_flight.is_empty());
}

#[test]
fn close_with_requests_in_flight() {
    let partial = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc";
    let steps = [read(10, format!("{}{}", get("/slow"), get("/never"))), write(20, partial), Step::Close(500)];
    let out = run_checked(Role::Server, &steps);
    let got: Vec<_> = out
        .exchanges
        .iter()
        .map(|e| (e.path.as_str(), e.status, e.outcome, e.response_start_ns, e.response_end_ns, e.response_bytes))
        .collect();
    assert_eq!(
        got,
        vec![
            ("/slow", Some(200), ExchangeOutcome::Closed, Some(20), 500, partial.len() as u64),
            ("/never", None, ExchangeOutcome::Closed, None, 500, 0)
        ]
    );
    // Nothing more after the close.
    let mut conn = Connection::new(Role::Server);
    let mut out = Vec::new();
    conn.on_close(1, &mut out);
    conn.on_segment(
        Direction::Read,
        &Segment {
            ts_ns: 2,
            tid: 1,
            len: 3,
            head: b"GET",
            tail: b"GET",
            queued_since_ns: None,
            walked: Default::default(),
        },
        &mut out,
    );
    assert!(out.is_empty() && conn.in_flight().next().is_none());
}

#[test]
fn path_without_query_truncated_on_a_char_boundary() {
    let long = format!("/{}?secret=1", "a".repeat(100));
    let accented = format!("/{}", "é".repeat(40));
    let steps = [
        read(1, get(&long)),
        read(2, get(&accented)),
        read(3, get("/frag#top")),
        read(4, "OPTIONS * HTTP/1.1\r\n\r\n"),
        read(5, get("http://user:secret@upstream:8080/api/v1?q=2")),
        read(6, get("HTTPS://user:secret@upstream")),
    ];
    let out = run_checked(Role::Server, &steps);
    let paths: Vec<_> = out.in_flight.iter().map(|r| r.path.redacted()).collect();
    let expected = [
        format!("/{}", "a".repeat(63)),
        format!("/{}", "é".repeat(31)),
        "/frag".into(),
        "*".into(),
        "/api/v1".into(),
        "/".into(),
    ];
    assert_eq!(paths, expected, "an absolute-form target's authority (credentials) is never kept");
    assert_eq!(out.in_flight[3].method, Method::Options);
}

#[test]
fn in_flight_lists_waiting_requests_oldest_first() {
    let steps = [
        by(read(1, get("/one")), 11, Some(0)),
        by(read(2, "PUT /two HTTP/1.1\r\nContent-Length: 4\r\n\r\nab"), 12, Some(1)),
        by(read(3, "cd"), 12, None),
        by(read(4, get("/three")), 13, None),
        write(5, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 202 OK\r\nContent"),
    ];
    let out = run_checked(Role::Server, &steps);
    assert_eq!(out.exchanges.len(), 1);
    let got: Vec<_> = out
        .in_flight
        .iter()
        .map(|r| (r.method, r.path.as_str(), r.tid, r.request_start_ns, r.response_started))
        .collect();
    assert_eq!(got, vec![(Method::Put, "/two", 12, 2, true), (Method::Get, "/three", 13, 4, false)]);
    assert_eq!(out.in_flight[0].request_bytes, 44);
    assert_eq!(out.in_flight[0].queued_since_ns, Some(1));
}

#[test]
fn in_flight_requests_say_whether_they_were_read_in_full() {
    let body_half = read(1, "POST /upload HTTP/1.1\r\nContent-Length: 10\r\n\r\nabcde");
    let out = run_checked(Role::Server, std::slice::from_ref(&body_half));
    assert!(!out.in_flight[0].request_complete, "half the body: the client is still sending");
    let out = run_checked(Role::Server, &[body_half, read(2, "fghij"), read(3, get("/next"))]);
    let complete: Vec<_> = out.in_flight.iter().map(|r| (r.path.as_str(), r.request_complete)).collect();
    assert_eq!(complete, vec![("/upload", true), ("/next", true)]);
}

#[test]
fn in_flight_is_capped() {
    let mut conn = Connection::new(Role::Server);
    let mut out = Vec::new();
    let req = get("/x");
    for i in 0..(MAX_IN_FLIGHT as u64 + 76) {
        let seg = Segment {
            ts_ns: i,
            tid: 1,
            len: req.len() as u64,
            head: req.as_bytes(),
            tail: &[],
            queued_since_ns: None,
            walked: Default::default(),
        };
        conn.on_segment(Direction::Read, &seg, &mut out);
    }
    assert_eq!((conn.in_flight().count(), conn.dropped_in_flight()), (MAX_IN_FLIGHT, 76));
    assert_eq!(conn.in_flight().next().map(|r| r.request_start_ns), Some(76));
    let resp = response(200, "");
    let seg = Segment {
        ts_ns: 5000,
        tid: 1,
        len: resp.len() as u64,
        head: resp.as_bytes(),
        tail: &[],
        queued_since_ns: None,
        walked: Default::default(),
    };
    conn.on_segment(Direction::Write, &seg, &mut out);
    assert_eq!(out.iter().map(|e| e.request_start_ns).collect::<Vec<_>>(), vec![76]);
}

#[test]
fn method_and_outcome_names() {
    assert_eq!(Method::from_token(b"PATCH").as_str(), "PATCH");
    assert_eq!(Method::from_token(b"get").as_str(), "OTHER");
    assert_eq!(ExchangeOutcome::Upgraded.as_str(), "upgraded");
}
