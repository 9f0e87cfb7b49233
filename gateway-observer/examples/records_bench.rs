//! The daemon's work per proxied request on the socket ring, in process and unprivileged: the
//! four data records of a request through a keep-alive proxy (client request read, upstream
//! request written, upstream response read, client response written), as the kernel writes them,
//! decoded by `socket::decode` and fed to the `RequestTracker`, with a tick's views every
//! 10,000 requests as the daemon takes them once a second. Run by `cargo xtask bench records`;
//! `perf record` on it shows where the time goes. It also counts the heap allocations made per
//! request once the connections are warm (the goal is none: an allocation per record costs as
//! much as parsing it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use gateway_observer::{detect::stalled::StalledConfig, events::socket, state::requests::RequestTracker};
use gateway_observer_common::{
    CONN_EVENT_SIZE, ConnEvent, DATA_EVENT_SIZE, DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, conn_role, data_shape,
    event_kind,
};

/// A pid past PID_MAX_LIMIT: the tracker's /proc lookups find nothing, as for a gone process.
const GW: u32 = 0x8000_0007;
const NETNS: u32 = 4_026_531_840;
const CONNECTIONS: u64 = 32;
const REQUESTS: u64 = 400_000;
const TICK_EVERY: u64 = 10_000;

/// The system allocator, counting allocations (frees and reallocations are not counted).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const REQUEST: &[u8] = b"GET /api/users/42 HTTP/1.1\r\nHost: gateway\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n";
const UPSTREAM_REQUEST: &[u8] =
    b"GET /api/users/42 HTTP/1.1\r\nHost: upstream\r\nConnection: keep-alive\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n";
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sat, 05 Dec 2026 12:00:00 GMT\r\n\
Content-Type: text/plain\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\nhello world\n";

fn conn(sk: u64, role: u32, local_port: u16, remote_port: u16) -> Vec<u8> {
    let mut event = ConnEvent {
        kind: event_kind::SOCKET_OPEN,
        tgid: if role == conn_role::CLIENT { GW } else { 0 },
        sk,
        timestamp_ns: 1,
        role,
        family: 2,
        local_port,
        remote_port,
        netns: NETNS,
        ..ConnEvent::default()
    };
    event.local_addr[..4].copy_from_slice(&[127, 0, 0, 1]);
    event.remote_addr[..4].copy_from_slice(&[127, 0, 0, 1]);
    // SAFETY: ConnEvent is plain data of CONN_EVENT_SIZE bytes.
    unsafe { std::slice::from_raw_parts((&raw const event).cast::<u8>(), CONN_EVENT_SIZE) }.to_vec()
}

fn data(sk: u64, read: bool, bytes: &[u8], ts: u64) -> Vec<u8> {
    let head_len = bytes.len().min(DATA_HEAD_BYTES);
    let tail_len = bytes.len().min(DATA_TAIL_BYTES);
    let mut event = DataEvent {
        kind: event_kind::SOCKET_DATA,
        tid: GW + 1,
        tgid: GW,
        fd: 5,
        sk,
        timestamp_ns: ts,
        len: bytes.len() as u64,
        queued_since_ns: if read { ts - 1_000 } else { 0 },
        shape: if read { data_shape::READ_BUF } else { data_shape::WRITE_BUF },
        h2_walk: 0,
        head_len: head_len as u16,
        tail_len: tail_len as u16,
        sock_lost: 0,
        head: [0; DATA_HEAD_BYTES],
        tail: [0; DATA_TAIL_BYTES],
    };
    event.head[..head_len].copy_from_slice(&bytes[..head_len]);
    event.tail[..tail_len].copy_from_slice(&bytes[bytes.len() - tail_len..]);
    // SAFETY: DataEvent is plain data of DATA_EVENT_SIZE bytes.
    unsafe { std::slice::from_raw_parts((&raw const event).cast::<u8>(), DATA_EVENT_SIZE) }.to_vec()
}

fn main() {
    let mut tracker = RequestTracker::default();
    let stalled = StalledConfig::default();
    let mut decode_errors = 0u64;
    let mut feed = |tracker: &mut RequestTracker, bytes: &[u8]| match socket::decode(bytes) {
        Ok(record) => tracker.handle(record),
        Err(_) => decode_errors += 1,
    };
    // Client connections accepted on 8080 (sk 1..), upstream connections from the gateway (sk 1001..).
    for i in 0..CONNECTIONS {
        feed(&mut tracker, &conn(1 + i, conn_role::SERVER, 8080, 50_000 + i as u16));
        feed(&mut tracker, &conn(1001 + i, conn_role::CLIENT, 40_000 + i as u16, 9000));
    }
    // The records as the ring holds them, built once: only the timestamps differ in a real ring,
    // and the tracker's work does not depend on their values.
    let records: Vec<[Vec<u8>; 4]> = (0..CONNECTIONS)
        .map(|i| {
            [
                data(1 + i, true, REQUEST, 10_000),
                data(1001 + i, false, UPSTREAM_REQUEST, 20_000),
                data(1001 + i, true, RESPONSE, 30_000),
                data(1 + i, false, RESPONSE, 40_000),
            ]
        })
        .collect();
    let mut now_ns = 1_000_000u64;
    let started = Instant::now();
    let mut warm_allocations = 0;
    for n in 0..REQUESTS {
        if n == TICK_EVERY {
            warm_allocations = ALLOCATIONS.load(Ordering::Relaxed);
        }
        let conn = &records[(n % CONNECTIONS) as usize];
        for record in conn {
            feed(&mut tracker, record);
        }
        if n % TICK_EVERY == TICK_EVERY - 1 {
            now_ns += 1_000_000_000;
            tracker.expire(now_ns);
            std::hint::black_box(tracker.per_process(now_ns));
            std::hint::black_box(tracker.stall_facts(now_ns, stalled.age_ns(), stalled.prompt_ns()));
        }
    }
    let elapsed = started.elapsed();
    let per_request = elapsed.as_nanos() as f64 / REQUESTS as f64;
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - warm_allocations;
    println!(
        "{REQUESTS} proxied requests (4 data records each) over {CONNECTIONS} connections: {per_request:.0} ns per request, \
         {:.0} ns per record; {:.3} heap allocations per request once warm (ticks included); decode errors {decode_errors}",
        per_request / 4.0,
        allocations as f64 / (REQUESTS - TICK_EVERY) as f64,
    );
}
