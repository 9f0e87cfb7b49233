//! The fuzz target's seed corpus is written from here: `UPDATE_FUZZ_CORPUS=1 cargo test -p
//! gateway-observer-http --lib replay` rewrites `gateway-observer-http/fuzz/corpus/http_connection/`;
//! without it, the test fails when the committed files differ from what the seeds encode.

use super::*;
use crate::{Connection, Exchange, ExchangeOutcome};

const R: Direction = Direction::Read;
const W: Direction = Direction::Write;

fn resp(status: u16, body: &str) -> String {
    format!("HTTP/1.1 {status} OK\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: upstream\r\n\r\n")
}

/// (file name, encoded operations, exchanges it produces).
fn seeds() -> Vec<(&'static str, Vec<u8>, usize)> {
    let server = || Writer::new().connect(Role::Server);
    let client = || Writer::new().connect(Role::Client);
    let cookie = "c".repeat(900);
    let chunk = format!("4000\r\n{}\r\n", "d".repeat(0x4000));
    vec![
        (
            "server_get",
            server()
                .data(R, 10, 1, Some(3), get("/a?b=c").as_bytes())
                .data(W, 20, 1, None, resp(200, "hi").as_bytes())
                .finish(),
            1,
        ),
        (
            "server_keep_alive",
            (0..3)
                .fold(server(), |w, i| {
                    w.data(R, 5, 1, Some(1), get(&format!("/k{i}")).as_bytes()).data(
                        W,
                        9,
                        2,
                        None,
                        resp(200, "x").as_bytes(),
                    )
                })
                .close(1)
                .finish(),
            3,
        ),
        (
            "server_pipelined",
            server()
                .data(R, 1, 1, None, format!("{}{}{}", get("/1"), get("/2"), get("/3")).as_bytes())
                .data(W, 4, 1, None, format!("{}{}{}", resp(200, "a"), resp(404, ""), resp(500, "err")).as_bytes())
                .finish(),
            3,
        ),
        (
            "server_head",
            server()
                .data(R, 1, 1, None, b"HEAD /h HTTP/1.1\r\n\r\n")
                .data(W, 2, 1, None, b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n")
                .finish(),
            1,
        ),
        (
            "server_100_continue",
            server()
                .data(R, 1, 1, None, b"PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
                .data(W, 2, 1, None, b"HTTP/1.1 100 Continue\r\n\r\n")
                .data(R, 3, 1, Some(1), b"body")
                .data(W, 4, 1, None, resp(201, "").as_bytes())
                .finish(),
            1,
        ),
        (
            "server_204_304",
            server()
                .data(R, 1, 1, None, format!("{}{}", get("/n"), get("/m")).as_bytes())
                .data(
                    W,
                    2,
                    1,
                    None,
                    b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                )
                .finish(),
            2,
        ),
        (
            "server_chunked_trailers",
            server()
                .data(R, 1, 1, None, get("/c").as_bytes())
                .data(W, 2, 1, None, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhel")
                .data(W, 2, 1, None, b"lo\r\n1")
                .data(W, 2, 1, None, b"0\r\n0123456789abcdef\r\n0\r\nTrailer: t\r")
                .data(W, 2, 1, None, b"\n\r\n")
                .finish(),
            1,
        ),
        (
            "server_chunked_unseen",
            server()
                .data(R, 1, 1, None, get("/big").as_bytes())
                .data(
                    W,
                    2,
                    1,
                    None,
                    format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{}0\r\n\r\n", chunk.repeat(3))
                        .as_bytes(),
                )
                .finish(),
            1,
        ),
        (
            "server_length_unseen",
            server()
                .data(
                    R,
                    1,
                    1,
                    None,
                    format!("POST /up HTTP/1.1\r\nContent-Length: 70000\r\n\r\n{}", "u".repeat(40_000)).as_bytes(),
                )
                .data(R, 1, 1, None, "u".repeat(30_000).as_bytes())
                .data(W, 2, 1, None, resp(200, &"v".repeat(5000)).as_bytes())
                .finish(),
            1,
        ),
        (
            "server_big_headers",
            server()
                .data(R, 1, 1, None, format!("GET /big HTTP/1.1\r\nCookie: {cookie}\r\n\r\n").as_bytes())
                .data(
                    W,
                    2,
                    1,
                    None,
                    format!("HTTP/1.1 200 OK\r\nSet-Cookie: {cookie}\r\nContent-Length: 2\r\n\r\nok").as_bytes(),
                )
                .data(R, 3, 1, None, get("/next").as_bytes())
                .data(W, 4, 1, None, resp(200, "").as_bytes())
                .finish(),
            2,
        ),
        (
            "client_until_close",
            client()
                .data(W, 1, 5, None, b"GET /old HTTP/1.0\r\nConnection: close\r\n\r\n")
                .data(R, 9, 5, Some(4), b"HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nbody")
                .data(R, 9, 5, Some(0), b"more")
                .close(3)
                .finish(),
            1,
        ),
        (
            "server_websocket",
            server()
                .data(R, 1, 1, None, b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                .data(
                    W,
                    2,
                    1,
                    None,
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                )
                .data(R, 3, 1, None, &[0x81, 0x82, 1, 2, 3, 4, 5, 6])
                .finish(),
            1,
        ),
        (
            "server_connect",
            server()
                .data(R, 1, 1, None, b"CONNECT db:5432 HTTP/1.1\r\n\r\n")
                .data(W, 2, 1, None, b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .data(R, 3, 1, None, &[0x16, 3, 1, 0, 5])
                .finish(),
            1,
        ),
        (
            "server_tls",
            server()
                .data(R, 1, 1, None, &[0x16, 3, 1, 0, 0xa5, 1, 0, 0, 0xa1, 3, 3])
                .data(W, 1, 1, None, &[0x16, 3, 3])
                .close(1)
                .finish(),
            0,
        ),
        (
            "client_redis",
            client().data(W, 1, 2, None, b"*1\r\n$4\r\nPING\r\n").data(R, 1, 2, Some(0), b"+PONG\r\n").finish(),
            0,
        ),
        (
            "server_garbage_after",
            server()
                .data(R, 1, 1, None, get("/g").as_bytes())
                .data(W, 1, 1, None, resp(200, "").as_bytes())
                .data(R, 1, 1, None, b"\x00\x01junk")
                .finish(),
            1,
        ),
        (
            "server_close_in_flight",
            server()
                .data(R, 1, 1, None, format!("{}{}", get("/slow"), get("/never")).as_bytes())
                .data(W, 5, 1, None, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                .close(9)
                .finish(),
            2,
        ),
        (
            "server_long_path",
            server()
                .data(R, 1, 1, None, get(&format!("/{}?q={}#f", "é".repeat(40), "s".repeat(50))).as_bytes())
                .data(W, 1, 1, None, resp(200, "").as_bytes())
                .finish(),
            1,
        ),
        (
            "client_keep_alive",
            (0..2)
                .fold(client(), |w, i| {
                    w.data(W, 3, 2, None, format!("POST /rpc{i} HTTP/1.1\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes())
                        .data(
                            R,
                            7,
                            2,
                            Some(6),
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                        )
                })
                .finish(),
            2,
        ),
        (
            "two_connections",
            server()
                .data(R, 1, 1, None, get("/first").as_bytes())
                .close(1)
                .connect(Role::Client)
                .data(W, 1, 1, None, get("/second").as_bytes())
                .data(R, 1, 1, None, resp(200, "").as_bytes())
                .finish(),
            2,
        ),
    ]
}

/// Drives connections as the fuzz target does; returns every exchange.
fn replay(input: &[u8]) -> Vec<Exchange> {
    let mut conn = Connection::new(Role::Server);
    let mut out = Vec::new();
    let mut last_ts = START_NS;
    for op in decode(input) {
        match op {
            Op::Connect(role) => {
                conn.on_close(last_ts, &mut out);
                conn = Connection::new(role);
            }
            Op::Segment(dir, seg) => {
                last_ts = seg.ts_ns;
                conn.on_segment(dir, &seg, &mut out);
            }
            Op::Close { ts_ns } => {
                last_ts = ts_ns;
                conn.on_close(ts_ns, &mut out);
            }
        }
    }
    out
}

#[test]
fn seeds_drive_real_exchanges() {
    for (name, input, want) in seeds() {
        let got = replay(&input);
        assert_eq!(got.len(), want, "seed {name}: {got:#?}");
        assert!(
            got.iter().all(|e| e.outcome == ExchangeOutcome::Closed || e.status.is_some()),
            "seed {name}: {got:#?}"
        );
    }
}

#[test]
fn decoding_round_trips_the_writer() {
    let input = Writer::new().connect(Role::Client).sparse(W, 5, 9, Some(2), b"GET", 1000, b"tail").close(3).finish();
    let ops: Vec<_> = decode(&input).collect();
    assert!(matches!(ops[0], Op::Connect(Role::Client)));
    let Op::Segment(W, seg) = ops[1] else { panic!("not a write segment: {:?}", ops[1]) };
    assert_eq!(
        (seg.ts_ns, seg.tid, seg.len, seg.head, seg.tail, seg.queued_since_ns),
        (START_NS + 5, 9, 1003, &b"GET"[..], &b"tail"[..], Some(START_NS + 3))
    );
    assert!(matches!(ops[2], Op::Close { ts_ns } if ts_ns == START_NS + 8));
    assert_eq!(ops.len(), 3);
    // A truncated operation ends the input.
    assert_eq!(decode(&input[..input.len() - 1]).count(), 2);
}

#[test]
fn committed_seed_corpus_matches_the_seeds() {
    let seeds: Vec<_> = seeds().into_iter().map(|(name, input, _)| (name, input)).collect();
    check_corpus("http_connection", &seeds);
}

/// Compares a fuzz target's committed seed corpus with `seeds` (name, input); with
/// UPDATE_FUZZ_CORPUS set, rewrites it instead.
pub(crate) fn check_corpus(target: &str, seeds: &[(&str, Vec<u8>)]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let update = std::env::var_os("UPDATE_FUZZ_CORPUS").is_some();
    if update {
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
    }
    for (name, input) in seeds {
        let path = dir.join(name);
        if update {
            std::fs::write(&path, input).expect("write a seed");
        } else {
            let committed = std::fs::read(&path).unwrap_or_default();
            assert!(
                committed == *input,
                "{} differs from its seed; run UPDATE_FUZZ_CORPUS=1 cargo test -p gateway-observer-http --lib",
                path.display()
            );
        }
    }
}
