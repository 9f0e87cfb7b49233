//! Conversations between two real HTTP/2 stacks (python-hyper's `h2`, written by
//! `fixtures/generate.py`), replayed as the kernel shows them: per syscall its length, first 512
//! and last 16 bytes. The expected streams are what the Python side sent, not what this crate
//! decoded.

use crate::replay::{Writer, tests::check_corpus};
use crate::{Connection, Direction, Exchange, Method, Role, Segment};

struct Syscall<'a> {
    from_client: bool,
    len: u64,
    head: &'a [u8],
    tail: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Stream {
    method: Method,
    path: String,
    status: Option<u16>,
    grpc_status: Option<u16>,
    request_ns: u64,
    end_ns: u64,
}

fn syscalls(mut bin: &[u8]) -> Vec<Syscall<'_>> {
    let mut out = Vec::new();
    while let Some((&dir, rest)) = bin.split_first() {
        let (len, rest) = rest.split_at(4);
        let (head_len, rest) = rest.split_at(2);
        let (head, rest) = rest.split_at(usize::from(u16::from_le_bytes([head_len[0], head_len[1]])));
        let (&tail_len, rest) = rest.split_first().unwrap();
        let (tail, rest) = rest.split_at(usize::from(tail_len));
        let len = u64::from(u32::from_le_bytes(len.try_into().unwrap()));
        out.push(Syscall { from_client: dir == 0, len, head, tail });
        bin = rest;
    }
    out
}

/// Syscall `i` happens at this time.
fn ts(i: usize) -> u64 {
    (i as u64 + 1) * 1000
}

fn expected(text: &str) -> Vec<Stream> {
    let opt = |s: &str| (s != "-").then(|| s.parse().unwrap());
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            Stream {
                method: Method::from_token(f[0].as_bytes()),
                // Paths are kept redacted, as for HTTP/1.x (`crate::redact`'s own tests).
                path: crate::redact::redact_path(f[1], crate::parser::MAX_PATH),
                status: opt(f[2]),
                grpc_status: opt(f[3]),
                request_ns: ts(f[4].parse().unwrap()),
                end_ns: ts(f[5].parse().unwrap()),
            }
        })
        .collect()
}

fn stream(e: &Exchange) -> Stream {
    Stream {
        method: e.method,
        path: e.path.redacted(),
        status: e.status,
        grpc_status: e.grpc_status,
        request_ns: e.request_start_ns,
        end_ns: e.response_end_ns,
    }
}

/// The server's view of syscalls `from..`, then the close.
fn replay(bin: &[u8], from: usize) -> (Connection, Vec<Stream>) {
    let mut conn = Connection::new(Role::Server);
    let mut out = Vec::new();
    let all = syscalls(bin);
    for (i, s) in all.iter().enumerate().skip(from) {
        let dir = if s.from_client { Direction::Read } else { Direction::Write };
        let seg = Segment {
            ts_ns: ts(i),
            tid: 1,
            len: s.len,
            head: s.head,
            tail: s.tail,
            queued_since_ns: None,
            walked: Default::default(),
        };
        conn.on_segment(dir, &seg, &mut out);
    }
    conn.on_close(ts(all.len()), &mut out);
    let streams = out.iter().map(stream).collect();
    (conn, streams)
}

const BROWSER: (&[u8], &str) = (include_bytes!("fixtures/browser.bin"), include_str!("fixtures/browser.expect"));
const GRPC: (&[u8], &str) = (include_bytes!("fixtures/grpc.bin"), include_str!("fixtures/grpc.expect"));
const REFUSED: (&[u8], &str) = (include_bytes!("fixtures/refused.bin"), include_str!("fixtures/refused.expect"));
const BATCHED: (&[u8], &str) = (include_bytes!("fixtures/batched.bin"), include_str!("fixtures/batched.expect"));
const STALLED: (&[u8], &str) = (include_bytes!("fixtures/stalled.bin"), include_str!("fixtures/stalled.expect"));
/// The Python server's own count of its windows closing, and the syscall steps with any closed.
const STALLED_TRUTH: &str = include_str!("fixtures/stalled.stalls");

#[test]
fn browser_streams_exact_through_truncated_copies() {
    let (conn, got) = replay(BROWSER.0, 0);
    assert_eq!(got, expected(BROWSER.1));
    assert_eq!((conn.lost_sync(), conn.h2_signals().resyncs), (0, 0));
}

#[test]
fn grpc_status_from_trailers() {
    let (conn, got) = replay(GRPC.0, 0);
    assert_eq!(got, expected(GRPC.1));
    assert_eq!(conn.lost_sync(), 0);
}

#[test]
fn refused_streams_and_goaway() {
    let (conn, got) = replay(REFUSED.0, 0);
    assert_eq!(got, expected(REFUSED.1));
    let s = conn.h2_signals();
    assert_eq!((s.refused_streams, s.reset_streams, s.goaways), (2, 0, 1));
}

/// Frame headers past a write's first 512 bytes are not copied: sync is lost and found again at
/// the next write, the streams open then end early, and none is lost from the count.
#[test]
fn batched_writes_lose_and_regain_sync() {
    let (conn, got) = replay(BATCHED.0, 0);
    let want = expected(BATCHED.1);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.method, &g.path, g.status, g.request_ns), (w.method, &w.path, w.status, w.request_ns));
        assert!(g.end_ns > g.request_ns && g.end_ns <= w.end_ns, "{g:?} vs {w:?}");
    }
    // Each response is one write of five frames; the walk resumes at the next one's HEADERS.
    assert_eq!((conn.lost_sync(), conn.h2_signals().resyncs), (6, 5));
}

/// Seen from any syscall on: every stream whose request comes after is counted with its timing;
/// statuses the static table holds are exact, others may be unknown (their dynamic entry was
/// added unseen), and no status or path is ever wrong.
#[test]
fn connection_first_seen_midway() {
    const STATIC: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];
    let all = expected(BROWSER.1);
    let n = syscalls(BROWSER.0).len();
    for from in 1..n {
        let (_, got) = replay(BROWSER.0, from);
        let want: Vec<&Stream> = all.iter().filter(|s| s.request_ns >= ts(from)).collect();
        assert_eq!(got.len(), want.len(), "from syscall {from}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.method, g.request_ns, g.end_ns), (w.method, w.request_ns, w.end_ns), "from {from}");
            match w.status {
                Some(s) if STATIC.contains(&s) => assert_eq!(g.status, Some(s), "from {from}: {g:?}"),
                _ => assert!(g.status.is_none() || g.status == w.status, "from {from}: {g:?}"),
            }
            assert!(g.path.is_empty() || g.path == w.path, "from {from}: {g:?}");
        }
    }
}

/// A client with small windows: the server's stalls on stream windows and on the connection's,
/// counted and timed as the Python server's own windows say.
#[test]
fn flow_control_stalls_match_the_senders_windows() {
    let (conn, got) = replay(STALLED.0, 0);
    assert_eq!(got, expected(STALLED.1));
    let truth: Vec<u64> = STALLED_TRUTH.split_whitespace().map(|n| n.parse().unwrap()).collect();
    let s = conn.h2_signals();
    // A syscall step is 1000 ns (`ts`).
    assert_eq!((s.gateway_stalls.count, s.gateway_stalls.stalled_ns), (truth[0], truth[1] * 1000));
    assert_eq!(s.peer_stalls, crate::h2::Stalls::default());
    assert_eq!(conn.lost_sync(), 0);
    // The other fixtures' clients have 16 MB windows: nothing stalls.
    for bin in [BROWSER.0, GRPC.0, REFUSED.0, BATCHED.0] {
        let s = replay(bin, 0).0.h2_signals();
        assert_eq!((s.gateway_stalls.count, s.peer_stalls.count), (0, 0));
    }
}

/// First seen mid-way, the windows are unknown: the connection's stays so, streams' are known
/// only after a SETTINGS gives the initial window. No stall is invented from any start.
#[test]
fn flow_control_midway_never_invents_stalls() {
    let full = replay(STALLED.0, 0).0.h2_signals().gateway_stalls;
    for from in 1..syscalls(STALLED.0).len() {
        let s = replay(STALLED.0, from).0.h2_signals().gateway_stalls;
        assert!(s.count <= full.count && s.stalled_ns <= full.stalled_ns, "from {from}: {s:?} vs {full:?}");
    }
    // Past the first SETTINGS only the 1 MB stream windows are known again: none closes.
    assert_eq!(replay(STALLED.0, 1).0.h2_signals().gateway_stalls.count, 0);
}

/// The `h2_session` fuzz target's seeds: these conversations in the replay encoding.
#[test]
fn committed_h2_seed_corpus_matches_the_fixtures() {
    let fixtures = [
        ("browser", BROWSER.0),
        ("grpc", GRPC.0),
        ("refused", REFUSED.0),
        ("batched", BATCHED.0),
        ("stalled", STALLED.0),
    ];
    let seeds: Vec<_> = fixtures
        .into_iter()
        .map(|(name, bin)| {
            let mut w = Writer::new().connect(Role::Server);
            for s in syscalls(bin) {
                let dir = if s.from_client { Direction::Read } else { Direction::Write };
                let unseen = u32::try_from(s.len - s.head.len() as u64).unwrap();
                w = w.sparse(dir, 100, 1, None, s.head, unseen, s.tail);
            }
            (name, w.close(100).finish())
        })
        .collect();
    check_corpus("h2_session", &seeds);
}
