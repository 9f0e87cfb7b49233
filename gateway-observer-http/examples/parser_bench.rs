//! The HTTP/1.x parser's cost per segment (`cargo xtask bench parser`): realistic gateway traffic
//! fed through [`Connection::on_segment`] as the kernel reports it (first 512 and last 16 bytes
//! of each syscall, plus its length) for about a second per mix, single-threaded, in 10 ms batches.
//!
//! Each simulated request is four segments, as on a reverse proxy: the client's request read by
//! the gateway (wrk-style GET), the request written upstream (proxy headers added), the upstream
//! response read, and the response written to the client. Responses alternate between an
//! nginx-style 200 with a 615-byte body and a small chunked JSON response. Connections are
//! keep-alive, one [`Connection`] per simulated socket, visited round-robin so that their state
//! does not all stay in L1.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use gateway_observer_http::{Connection, Direction, Exchange, Role, Segment};

/// Client connections kept open at once (each with its upstream connection).
const CONNECTIONS: usize = 64;
const HEAD_MAX: usize = 512;
const TAIL_MAX: usize = 16;

const CLIENT_REQUEST: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

const UPSTREAM_REQUEST: &[u8] = b"GET /index.html HTTP/1.1\r\n\
Host: backend\r\n\
X-Real-IP: 127.0.0.1\r\n\
X-Forwarded-For: 127.0.0.1\r\n\
X-Forwarded-Proto: http\r\n\
Connection: keep-alive\r\n\
\r\n";

const NGINX_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\n\
Server: nginx/1.24.0\r\n\
Date: Tue, 14 Oct 2025 09:12:44 GMT\r\n\
Content-Type: text/html\r\n\
Content-Length: 615\r\n\
Last-Modified: Mon, 13 Oct 2025 17:02:11 GMT\r\n\
Connection: keep-alive\r\n\
ETag: \"68ed2ee3-267\"\r\n\
Accept-Ranges: bytes\r\n\
\r\n";

const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\n\
Content-Type: application/json\r\n\
Transfer-Encoding: chunked\r\n\
Connection: keep-alive\r\n\
Vary: Accept-Encoding\r\n\
Cache-Control: no-store\r\n\
\r\n\
2c\r\n{\"id\":42,\"name\":\"widget\",\"tags\":[\"a\",\"b\"]}\r\n\
0\r\n\r\n";

/// One syscall's data, as the kernel copies it: length, first bytes, last bytes.
struct Syscall {
    dir: Direction,
    len: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Syscall {
    fn new(dir: Direction, data: &[u8]) -> Self {
        Self {
            dir,
            len: data.len() as u64,
            head: data[..data.len().min(HEAD_MAX)].to_vec(),
            tail: data[data.len().saturating_sub(TAIL_MAX)..].to_vec(),
        }
    }
}

/// The four syscalls of one proxied request, each marked true on the client side.
type ProxiedExchange = [(bool, Syscall); 4];

fn exchange(response: &[u8]) -> ProxiedExchange {
    [
        (true, Syscall::new(Direction::Read, CLIENT_REQUEST)),
        (false, Syscall::new(Direction::Write, UPSTREAM_REQUEST)),
        (false, Syscall::new(Direction::Read, response)),
        (true, Syscall::new(Direction::Write, response)),
    ]
}

fn main() {
    let mut nginx = NGINX_HEAD.to_vec();
    nginx.extend(std::iter::repeat_n(b'x', 615));
    let mixes: [(&str, Vec<ProxiedExchange>); 3] = [
        ("nginx 200, 615-byte body", vec![exchange(&nginx)]),
        ("chunked 200", vec![exchange(CHUNKED)]),
        ("alternating", vec![exchange(&nginx), exchange(CHUNKED)]),
    ];
    let head_bytes = (CLIENT_REQUEST.len() + UPSTREAM_REQUEST.len() + 2 * NGINX_HEAD.len()) as f64 / 4.0;
    println!("parser bench: {CONNECTIONS} keep-alive client connections, each with an upstream one");
    println!("(nginx mix: {head_bytes:.0} bytes of head per segment on average)");
    println!("{:<26} {:>14} {:>14} {:>16}", "mix", "best ns/seg", "median ns/seg", "best M seg/s");
    for (name, mix) in &mixes {
        let batches = run(mix, Duration::from_secs(1));
        let best = batches.first().copied().unwrap_or(f64::NAN);
        let median = batches.get(batches.len() / 2).copied().unwrap_or(f64::NAN);
        println!("{name:<26} {best:>14.1} {median:>14.1} {:>16.2}", 1e3 / best);
    }
}

/// Feeds whole exchanges round-robin over the connections for about `budget`, in batches of
/// 10 ms; returns each batch's ns per segment, sorted. The best batch is the cost on an
/// uncontended CPU; the median shows how noisy the machine was. Panics if an exchange goes
/// missing (the parser broke).
fn run(mix: &[[(bool, Syscall); 4]], budget: Duration) -> Vec<f64> {
    let mut conns: Vec<(Connection, Connection)> =
        (0..CONNECTIONS).map(|_| (Connection::new(Role::Server), Connection::new(Role::Client))).collect();
    let mut out: Vec<Exchange> = Vec::with_capacity(64);
    let mut ts = 1_000u64;
    // Warm up (allocator, caches), then time batches until the budget is spent.
    let warmup = Instant::now();
    while warmup.elapsed() < budget / 5 {
        round(&mut conns, mix, &mut ts, &mut out);
        out.clear();
    }
    let mut batches = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget {
        let (mut segments, mut exchanges) = (0u64, 0u64);
        let batch = Instant::now();
        while batch.elapsed() < Duration::from_millis(10) {
            segments += round(&mut conns, mix, &mut ts, &mut out);
            exchanges += out.len() as u64;
            out.clear();
        }
        let elapsed = batch.elapsed();
        // Two exchanges (client side, upstream side) per four segments.
        assert_eq!(exchanges * 2, segments, "exchanges went missing: the parser lost track");
        batches.push(elapsed.as_nanos() as f64 / segments as f64);
    }
    batches.sort_by(f64::total_cmp);
    batches
}

fn round(
    conns: &mut [(Connection, Connection)],
    mix: &[[(bool, Syscall); 4]],
    ts: &mut u64,
    out: &mut Vec<Exchange>,
) -> u64 {
    let mut fed = 0;
    for (i, (client, upstream)) in conns.iter_mut().enumerate() {
        let Some(syscalls) = mix.get(i % mix.len()) else { continue };
        for (client_side, s) in syscalls {
            *ts += 1_000;
            let seg = Segment {
                ts_ns: *ts,
                tid: 1,
                len: s.len,
                head: &s.head,
                tail: &s.tail,
                queued_since_ns: None,
                walked: Default::default(),
            };
            let conn = if *client_side { &mut *client } else { &mut *upstream };
            conn.on_segment(s.dir, black_box(&seg), out);
            fed += 1;
        }
    }
    fed
}
