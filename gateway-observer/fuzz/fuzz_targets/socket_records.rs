//! The socket ring as the daemon drains it: any bytes, cut into records, decoded by
//! `events::socket::decode` and fed to the `RequestTracker`, with ticks (expiry and every view the
//! snapshot, the metrics and the detectors read), losses and listening ports in between. It must
//! never panic, keep at most `MAX_SOCKETS` connections and bounded lists, and keep its counters
//! monotonic.
//!
//! The input is a list of operations, each one byte then its operands (missing bytes read as 0):
//! - 0-2: a raw record: `len: u16` then `len` bytes, decoded as they are (short ones included);
//! - 3-4: a record of a known kind (`kind` byte) whose first `len: u16` bytes after the kind come
//!   from the input, the rest zero: the fuzzer reaches 584-byte data records from short inputs;
//! - 5: a tick `delta: u32` µs later: expire, then every view;
//! - 6: the kernel lost socket records: `limit` byte (0: which connections' is unknown), then per
//!   connection asked a byte (its new loss count, or 0xff: gone);
//! - 7: a target listens on a port: `tgid` byte, `port: u16`.

#![no_main]

use std::collections::{BTreeSet, HashMap};

use gateway_observer::{
    detect::stalled::StalledConfig,
    events::socket::{self, SocketRecord},
    sinks::prometheus::Exposition,
    state::requests::{RequestTracker, slowest::SLOWEST},
};
use gateway_observer_common::{CONN_EVENT_SIZE, DATA_EVENT_SIZE, FLOW_EVENT_SIZE, MAX_SOCKETS, event_kind};
use libfuzzer_sys::fuzz_target;

/// Pids past the kernel's PID_MAX_LIMIT (2^22): the tracker's /proc lookups of a record's owner
/// find nothing, as for a process that is gone, and never a process of this host.
const NO_PID: u32 = 0x8000_0000;
const NETNS: u32 = 4_026_531_840;
/// The snapshot lists this many in-flight requests per process (`requests::IN_FLIGHT_LISTED`).
const IN_FLIGHT_LISTED: usize = 20;

struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
}

#[derive(Clone, Copy)]
struct Counters {
    unattributed: u64,
    evicted: u64,
    resyncs: u64,
    abandoned: u64,
    requests: u64,
}

fn counters(tracker: &RequestTracker) -> Counters {
    Counters {
        unattributed: tracker.counts.unattributed_records,
        evicted: tracker.counts.evicted_connections,
        resyncs: tracker.counts.closed_resyncs,
        abandoned: tracker.counts.abandoned_after_loss,
        requests: tracker.stats.series.values().flat_map(|s| s.counts.values()).sum(),
    }
}

fn feed(tracker: &mut RequestTracker, bytes: &[u8], now: &mut u64) {
    let Ok(record) = socket::decode(bytes) else { return };
    let record = match record {
        SocketRecord::Data(mut data) => {
            data.tgid |= NO_PID;
            *now = (*now).max(data.timestamp_ns);
            SocketRecord::Data(data)
        }
        SocketRecord::Open(mut info) => {
            info.tgid = info.tgid.map(|t| t | NO_PID);
            SocketRecord::Open(info)
        }
        SocketRecord::Close(mut info) => {
            info.tgid = info.tgid.map(|t| t | NO_PID);
            SocketRecord::Close(info)
        }
        other => other,
    };
    tracker.handle(record);
}

fn tick(tracker: &mut RequestTracker, now: u64) {
    tracker.expire(now);
    let connections = tracker.connections();
    for (count, listed) in tracker.in_flight(now).values() {
        assert!(listed.len() <= IN_FLIGHT_LISTED && listed.len() <= *count);
        assert!(listed.iter().all(|r| r.age_seconds >= 0.0), "{listed:?}");
    }
    for (pid, requests) in tracker.per_process(now) {
        assert!(requests.in_flight_oldest.len() <= IN_FLIGHT_LISTED, "pid {pid}");
        for peer in &requests.upstreams {
            assert!(peer.connections <= connections && peer.one_way <= peer.connections, "{peer:?}");
        }
    }
    for facts in tracker.peer_facts(now) {
        assert!(facts.connections <= connections, "{facts:?}");
    }
    let _ = tracker.waiting_inbound(now, 0);
    let stalled = StalledConfig::default();
    let _ = tracker.stall_facts(now, stalled.age_ns(), stalled.prompt_ns());
    let candidates = tracker.unread_candidates(now, 0, 8);
    assert!(candidates.len() <= 8);
    assert!(tracker.slowest.list().len() <= SLOWEST);
    let mut exposition = Exposition::default();
    gateway_observer::sinks::request_metrics::render_requests(&tracker, &mut exposition, now);
    let _ = exposition.finish();
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let mut tracker = RequestTracker::default();
    let mut now = 0u64;
    let mut record = Vec::with_capacity(DATA_EVENT_SIZE);
    let mut last = counters(&tracker);
    while !input.0.is_empty() {
        match input.u8() % 8 {
            0..=2 => {
                let len = usize::from(input.u16());
                feed(&mut tracker, input.take(len), &mut now);
            }
            3 | 4 => {
                let (kind, size) = match input.u8() % 5 {
                    0 => (event_kind::SOCKET_DATA, DATA_EVENT_SIZE),
                    1 => (event_kind::SOCKET_OPEN, CONN_EVENT_SIZE),
                    2 => (event_kind::SOCKET_CLOSE, CONN_EVENT_SIZE),
                    3 => (event_kind::SOCKET_RETRANSMIT, FLOW_EVENT_SIZE),
                    _ => (event_kind::SOCKET_RESET, FLOW_EVENT_SIZE),
                };
                let len = usize::from(input.u16());
                record.clear();
                record.extend(kind.to_ne_bytes());
                record.extend(input.take(len.min(size - 4)));
                record.resize(size, 0);
                feed(&mut tracker, &record, &mut now);
            }
            5 => {
                now = now.saturating_add(u64::from(input.u32()) * 1000);
                tick(&mut tracker, now);
            }
            6 => match input.u8() {
                0 => {
                    tracker.resync_after_loss();
                }
                limit => {
                    let sks = tracker.sockets_in_flight(usize::from(limit));
                    assert!(sks.len() <= usize::from(limit));
                    let counts: Vec<(u64, Option<u32>)> = sks
                        .into_iter()
                        .map(|sk| (sk, Some(input.u8()).filter(|l| *l != 0xff).map(u32::from)))
                        .collect();
                    tracker.after_loss(&counts);
                }
            },
            _ => {
                let tgid = u32::from(input.u8()) | NO_PID;
                let port = input.u16();
                let ports = HashMap::from([(tgid, BTreeSet::from([port]))]);
                tracker.set_listen_ports(ports, HashMap::from([(tgid, NETNS)]));
            }
        }
        assert!(tracker.connections() <= MAX_SOCKETS as usize);
        let now_counts = counters(&tracker);
        assert!(
            now_counts.unattributed >= last.unattributed
                && now_counts.evicted >= last.evicted
                && now_counts.resyncs >= last.resyncs
                && now_counts.abandoned >= last.abandoned
                && now_counts.requests >= last.requests,
            "a counter went back"
        );
        last = now_counts;
    }
    tick(&mut tracker, now);
});
