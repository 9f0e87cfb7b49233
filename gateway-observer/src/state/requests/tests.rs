//! The tracker on socket records as the kernel sends them: a gateway serving a request while it
//! calls an upstream, a hanging upstream, and connections whose handshake was not seen.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::queueing::UnreadCandidate;
use super::*;
use crate::events::socket::{ConnInfo, DataRecord, Opened, SocketRecord};

mod h2;

pub(crate) const GW: u32 = u32::MAX - 7; // a pid that does not exist: its name is the number
const NETNS: u32 = 4_026_531_840;

pub(crate) fn open(
    sk: u64,
    opened: Opened,
    tgid: Option<u32>,
    local: &str,
    remote: &str,
    ts: u64,
) -> SocketRecord<'static> {
    SocketRecord::Open(ConnInfo {
        sk,
        tgid,
        opened,
        local: local.parse().unwrap(),
        remote: remote.parse().unwrap(),
        timestamp_ns: ts,
        netns: NETNS,
    })
}

pub(crate) fn close(sk: u64, ts: u64) -> SocketRecord<'static> {
    SocketRecord::Close(ConnInfo {
        sk,
        tgid: Some(GW),
        opened: Opened::Unknown,
        local: "0.0.0.0:0".parse().unwrap(),
        remote: "0.0.0.0:0".parse().unwrap(),
        timestamp_ns: ts,
        netns: NETNS,
    })
}

pub(crate) fn data(sk: u64, read: bool, bytes: &[u8], ts: u64, queued: Option<u64>) -> SocketRecord<'_> {
    SocketRecord::Data(DataRecord {
        sk,
        tid: GW + 1,
        tgid: GW,
        fd: 5,
        read,
        len: bytes.len() as u64,
        timestamp_ns: ts,
        queued_since_ns: queued,
        head: bytes,
        tail: &bytes[bytes.len().saturating_sub(16)..],
        sock_lost: 0,
        walked: Default::default(),
        walk_continued: false,
        walk_in_continuations: false,
    })
}

/// `data` from a socket that has lost `lost` records so far.
fn data_after_losses(sk: u64, read: bool, bytes: &[u8], ts: u64, lost: u16) -> SocketRecord<'_> {
    let SocketRecord::Data(record) = data(sk, read, bytes, ts, None) else { unreachable!() };
    SocketRecord::Data(DataRecord { sock_lost: lost, ..record })
}

/// Plaintext keyed by its TLS session (`ssl`, its `SSL *`): the kernel knew no socket for it.
fn session_data(ssl: u64, read: bool, bytes: &[u8], ts: u64) -> SocketRecord<'_> {
    let SocketRecord::Data(record) = data(ssl, read, bytes, ts, None) else { unreachable!() };
    SocketRecord::Data(DataRecord { fd: gateway_observer_common::DATA_FD_TLS_SESSION, ..record })
}

/// Two gateway connections, each with a request read and not yet answered.
fn two_requests_in_flight(tracker: &mut RequestTracker) {
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(open(4, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50001", 0));
    tracker.handle(data(1, true, REQUEST, 10 * MS, None));
    tracker.handle(data(4, true, REQUEST, 10 * MS, None));
}

fn in_flight(tracker: &RequestTracker, sk: u64) -> usize {
    tracker.conns[&sk].http.as_ref().map_or(0, |http| http.in_flight().count())
}

pub(crate) const MS: u64 = 1_000_000;
pub(crate) const REQUEST: &[u8] =
    b"GET /api/users?token=secret HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer abc\r\n\r\n";
pub(crate) const UPSTREAM_REQUEST: &[u8] = b"GET /api/users HTTP/1.1\r\nHost: upstream\r\n\r\n";
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

/// Inbound request read at 100 ms (queued since 99 ms), upstream called at 101 ms and answering
/// at 121 ms, response written at 122 ms.
pub(crate) fn proxied_request(tracker: &mut RequestTracker) {
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 90 * MS));
    tracker.handle(open(2, Opened::Connected, Some(GW), "127.0.0.1:40000", "10.0.0.1:80", 95 * MS));
    tracker.handle(data(1, true, REQUEST, 100 * MS, Some(99 * MS)));
    tracker.handle(data(2, false, UPSTREAM_REQUEST, 101 * MS, None));
    tracker.handle(data(2, true, RESPONSE, 121 * MS, Some(120 * MS)));
    tracker.handle(data(1, false, RESPONSE, 122 * MS, None));
}

#[test]
fn a_proxied_request_is_counted_timed_and_explained() {
    let mut tracker = RequestTracker::default();
    proxied_request(&mut tracker);
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    assert_eq!(tracker.stats.count(&process.clone(), Side::Inbound, "GET", "2xx"), 1);
    assert_eq!(tracker.stats.count(&process.clone(), Side::Outbound, "GET", "2xx"), 1);
    assert_eq!(tracker.stats.series[&process].socket_queue.as_ref().map_or(0, |h| h.sum_ns), MS);
    let summary = &tracker.per_process(130 * MS)[&GW];
    assert_eq!(summary.inbound.requests, 1);
    assert!((summary.inbound.p50_seconds - 0.022).abs() < 1e-9, "{summary:?}");
    assert!((summary.outbound.p50_seconds - 0.020).abs() < 1e-9, "{summary:?}");
    assert_eq!(summary.in_flight, 0);
    assert_eq!(summary.upstreams[0].peer, "10.0.0.1:80");
    assert_eq!(summary.upstreams[0].outstanding, 0);

    let slow = &tracker.slowest.list()[0];
    assert_eq!(slow.path, "/api/users", "the query string is never kept");
    let b = &slow.breakdown;
    assert!((b.socket_queue_seconds.unwrap() - 0.001).abs() < 1e-9);
    assert!((b.before_upstream_seconds.unwrap() - 0.001).abs() < 1e-9);
    assert!((b.upstream_seconds.unwrap() - 0.020).abs() < 1e-9);
    let json = serde_json::to_string(&tracker.slowest.list()).unwrap();
    assert!(!json.contains("secret") && !json.contains("Bearer"), "no header values or query: {json}");
}

/// A request read at 100 ms and passed upstream at 101 ms, to 10.0.0.1:80, which never answers.
pub(crate) fn hanging_upstream(tracker: &mut RequestTracker) {
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(open(2, Opened::Connected, Some(GW), "127.0.0.1:40000", "10.0.0.1:80", 0));
    tracker.handle(data(1, true, REQUEST, 100 * MS, None));
    tracker.handle(data(2, false, UPSTREAM_REQUEST, 101 * MS, None));
}

#[test]
fn a_hanging_upstream_is_outstanding_with_a_growing_age() {
    let mut tracker = RequestTracker::default();
    hanging_upstream(&mut tracker);
    let early = &tracker.per_process(1_101 * MS)[&GW];
    assert_eq!((early.in_flight, early.upstreams[0].outstanding), (1, 1));
    assert!((early.upstreams[0].oldest_age_seconds - 1.0).abs() < 1e-9);
    assert!((early.in_flight_oldest[0].age_seconds - 1.001).abs() < 1e-9);
    assert_eq!(early.in_flight_oldest[0].thread, GW + 1);
    let later = &tracker.per_process(5_101 * MS)[&GW];
    assert!((later.upstreams[0].oldest_age_seconds - 5.0).abs() < 1e-9);

    // The upstream connection closes: the request ends with no response.
    tracker.handle(close(2, 6_000 * MS));
    assert_eq!(tracker.stats.count(&std::sync::Arc::from(GW.to_string()), Side::Outbound, "GET", "none"), 1);
    assert!(tracker.per_process(6_001 * MS)[&GW].upstreams.is_empty());
}

#[test]
fn connections_older_than_the_daemon_take_their_side_from_the_listening_ports() {
    let mut tracker = RequestTracker::default();
    tracker.set_listen_ports(HashMap::from([(GW, BTreeSet::from([8080]))]), HashMap::from([(GW, NETNS)]));
    tracker.handle(open(1, Opened::Unknown, Some(GW), "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(open(2, Opened::Unknown, Some(GW), "127.0.0.1:40000", "10.0.0.1:80", 0));
    tracker.handle(data(1, true, REQUEST, 10 * MS, None));
    tracker.handle(data(1, false, RESPONSE, 12 * MS, None));
    tracker.handle(data(2, false, UPSTREAM_REQUEST, 13 * MS, None));
    tracker.handle(data(2, true, RESPONSE, 14 * MS, None));
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    assert_eq!(tracker.stats.count(&process.clone(), Side::Inbound, "GET", "2xx"), 1);
    assert_eq!(tracker.stats.count(&process, Side::Outbound, "GET", "2xx"), 1);
}

#[test]
fn lost_handshakes_are_followed_from_their_bytes_or_counted() {
    let mut tracker = RequestTracker::default();
    tracker.handle(data(7, true, REQUEST, 10 * MS, None));
    tracker.handle(data(7, false, RESPONSE, 11 * MS, None));
    tracker.handle(data(8, true, b"\x16\x03\x01\x02\x00", 12 * MS, None));
    assert_eq!(tracker.stats.count(&std::sync::Arc::from(GW.to_string()), Side::Inbound, "GET", "2xx"), 1);
    assert_eq!(tracker.counts.unattributed_records, 1);
}

#[test]
fn closed_connections_are_forgotten() {
    let mut tracker = RequestTracker::default();
    proxied_request(&mut tracker);
    tracker.handle(close(1, 200 * MS));
    tracker.handle(close(2, 200 * MS));
    tracker.handle(close(3, 200 * MS)); // never seen: ignored
    assert!(tracker.conns.is_empty());
    tracker.retain_processes(&HashSet::new());
    assert!(tracker.names.is_empty());
}

#[test]
fn room_for_a_burst_of_connections_is_given_back_once_they_close() {
    let mut tracker = RequestTracker::default();
    for sk in 1..=10_000 {
        tracker.handle(open(sk, Opened::Accepted, Some(GW), "127.0.0.1:8080", "127.0.0.1:40000", MS));
    }
    let burst = tracker.conns.capacity();
    for sk in 1..=10_000 {
        tracker.handle(close(sk, 2 * MS));
    }
    tracker.expire(3 * MS);
    assert!(tracker.conns.capacity() < burst / 4, "room for {} connections kept", tracker.conns.capacity());
}

#[test]
fn side_from_first_bytes() {
    assert_eq!(side_from_bytes(true, b"GET / HTTP/1.1"), Some(Side::Inbound));
    assert_eq!(side_from_bytes(false, b"POST /x HTTP/1.1"), Some(Side::Outbound));
    assert_eq!(side_from_bytes(true, b"HTTP/1.1 200 OK"), Some(Side::Outbound));
    assert_eq!(side_from_bytes(false, b"HTTP/1.1 200 OK"), None);
    assert_eq!(side_from_bytes(true, b"*1\r\n$4\r\nPING"), None);
    assert_eq!(side_from_bytes(true, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Some(Side::Inbound));
    assert_eq!(side_from_bytes(false, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Some(Side::Outbound));
}

#[test]
fn after_lost_records_requests_in_flight_are_forgotten_and_parsing_resumes() {
    let mut tracker = RequestTracker::default();
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(open(2, Opened::Connected, Some(GW), "127.0.0.1:40000", "10.0.0.1:80", 0));
    tracker.handle(data(1, true, REQUEST, 10 * MS, None));
    tracker.handle(data(2, false, UPSTREAM_REQUEST, 11 * MS, None));
    // The upstream's response and the gateway's were among the lost records.
    assert_eq!(tracker.resync_after_loss(), 2);
    assert!(tracker.per_process(20 * MS)[&GW].upstreams[0].outstanding == 0);
    // The next exchange on each connection is parsed as usual.
    proxied_request(&mut tracker);
    assert_eq!(tracker.stats.count(&std::sync::Arc::from(GW.to_string()), Side::Inbound, "GET", "2xx"), 1);
    assert_eq!(tracker.counts.abandoned_after_loss, 2);
}

#[test]
fn a_record_that_says_its_socket_lost_records_resets_that_connection_only() {
    let mut tracker = RequestTracker::default();
    two_requests_in_flight(&mut tracker);
    // Socket 1's response was lost; its next request comes with the count moved.
    tracker.handle(data_after_losses(1, true, REQUEST, 30 * MS, 1));
    assert_eq!(tracker.counts.abandoned_after_loss, 1, "socket 1's unanswered request is forgotten");
    assert_eq!((in_flight(&tracker, 1), in_flight(&tracker, 4)), (1, 1), "the new request is parsed; 4 keeps its own");
    // The same count again is no new loss.
    tracker.handle(data_after_losses(1, false, RESPONSE, 31 * MS, 1));
    assert_eq!(tracker.counts.abandoned_after_loss, 1);
    assert_eq!(in_flight(&tracker, 1), 0, "answered");
}

#[test]
fn after_a_loss_only_connections_whose_count_moved_or_that_are_gone_forget() {
    let mut tracker = RequestTracker::default();
    two_requests_in_flight(&mut tracker);
    tracker.handle(open(5, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50002", 0));
    tracker.handle(data(5, true, REQUEST, 10 * MS, None));
    let mut asked = tracker.sockets_in_flight(10);
    asked.sort_unstable();
    assert_eq!(asked, [1, 4, 5], "every connection with a request in flight is asked");
    assert_eq!(tracker.sockets_in_flight(2).len(), 2, "bounded");
    // 1 lost a record, 4 lost none, 5 is no longer followed (its close was lost).
    assert_eq!(tracker.after_loss(&[(1, Some(1)), (4, Some(0)), (5, None)]), 2);
    assert_eq!((in_flight(&tracker, 1), in_flight(&tracker, 4), in_flight(&tracker, 5)), (0, 1, 0));
    // Asked again with the same counts: nothing more is forgotten.
    assert_eq!(tracker.after_loss(&[(1, Some(1)), (4, Some(0))]), 0);
}

#[test]
fn idle_inbound_connections_are_the_unread_candidates() {
    let mut tracker = RequestTracker::default();
    // GW and GW - 1 share 8080 (a master and its worker); GW - 2 listens on 8080 in another
    // network namespace (another pod).
    let ports = HashMap::from([
        (GW, BTreeSet::from([8080])),
        (GW - 1, BTreeSet::from([8080, 9090])),
        (GW - 2, BTreeSet::from([8080])),
    ]);
    tracker.set_listen_ports(ports, HashMap::from([(GW, NETNS), (GW - 1, NETNS), (GW - 2, NETNS + 1)]));
    proxied_request(&mut tracker); // 1: inbound, last read at 100 ms, answered; 2: outbound
    // 3: accepted at 100 ms, never read (waits in the accept queue); 4: a request read at
    // 300 ms and not answered yet; 5: read at 450 ms; 6: a port nobody here listens on.
    tracker.handle(open(3, Opened::Accepted, None, "127.0.0.1:9090", "127.0.0.1:50001", 100 * MS));
    tracker.handle(open(4, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50002", 290 * MS));
    tracker.handle(data(4, true, REQUEST, 300 * MS, None));
    tracker.handle(open(5, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50003", 440 * MS));
    tracker.handle(data(5, true, REQUEST, 450 * MS, None));
    tracker.handle(data(5, false, RESPONSE, 451 * MS, None));
    tracker.handle(open(6, Opened::Accepted, None, "127.0.0.1:7000", "127.0.0.1:50004", 100 * MS));
    // 7: upgraded to a websocket at 100 ms: its reader may pause for its own reasons.
    tracker.handle(open(7, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50005", 90 * MS));
    tracker.handle(data(
        7,
        true,
        b"GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        95 * MS,
        None,
    ));
    tracker.handle(data(
        7,
        false,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        100 * MS,
        None,
    ));

    // 8: the other pod's connection on its 8080, never read.
    tracker.handle(SocketRecord::Open(ConnInfo {
        sk: 8,
        tgid: None,
        opened: Opened::Accepted,
        local: "10.1.0.5:8080".parse().unwrap(),
        remote: "10.1.0.9:50006".parse().unwrap(),
        timestamp_ns: 100 * MS,
        netns: NETNS + 1,
    }));
    let mut found = tracker.unread_candidates(500 * MS, 200 * MS, 10);
    found.sort_unstable_by_key(|c| c.sk);
    let expected = vec![
        UnreadCandidate { sk: 1, listener: (NETNS, 8080) },
        UnreadCandidate { sk: 3, listener: (NETNS, 9090) },
        UnreadCandidate { sk: 8, listener: (NETNS + 1, 8080) },
    ];
    assert_eq!(found, expected, "idle for 200 ms, inbound, on a listened port, nothing in flight, not upgraded");
    // Past the limit, successive calls take turns.
    let first = tracker.unread_candidates(500 * MS, 200 * MS, 1);
    let second = tracker.unread_candidates(500 * MS, 200 * MS, 1);
    assert_eq!(first.len(), 1);
    assert_ne!(first, second);
    let listeners = tracker.listeners();
    assert_eq!(listeners[&(NETNS, 8080)].iter().copied().collect::<Vec<_>>(), vec![GW - 1, GW]);
    assert_eq!(
        listeners[&(NETNS + 1, 8080)].iter().copied().collect::<Vec<_>>(),
        vec![GW - 2],
        "another pod is another listener"
    );
    assert_eq!(listeners[&(NETNS, 9090)].len(), 1);
}

#[test]
fn stall_facts_count_requests_waiting_inside_the_process() {
    let mut tracker = RequestTracker::default();
    // The RequestsStalled detector's defaults: waiting from 500 ms, answers within 100 ms prompt.
    let (age, prompt) = (500 * MS, 100 * MS);
    // Three requests read in full at 100 ms, unanswered.
    for sk in 10..13 {
        tracker.handle(open(sk, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 90 * MS));
        tracker.handle(data(sk, true, REQUEST, 100 * MS, None));
    }
    // An upload still arriving: half its body read at 100 ms.
    tracker.handle(open(20, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50001", 90 * MS));
    tracker.handle(data(20, true, b"POST /up HTTP/1.1\r\nContent-Length: 10\r\n\r\nabcde", 100 * MS, None));
    // One answered at once, arriving after the waiting ones.
    tracker.handle(open(21, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50002", 90 * MS));
    tracker.handle(data(21, true, REQUEST, 300 * MS, None));
    tracker.handle(data(21, false, RESPONSE, 310 * MS, None));
    assert!(tracker.stall_facts(400 * MS, age, prompt).is_empty(), "300 ms is not waiting yet");
    let facts = tracker.stall_facts(700 * MS, age, prompt);
    assert_eq!(facts.len(), 1);
    let f = &facts[0];
    assert_eq!((f.pid, f.in_flight, f.waiting.len(), f.upstream_waiting), (GW, 4, 3, 0), "{f:?}");
    assert!(f.waiting.iter().all(|w| w.age_ns == 600 * MS && w.tid == GW + 1), "{f:?}");
    assert_eq!((f.answered_since, f.prompt_answers), (1, 1), "the prompt answer since the oldest arrived");
    // A request to an upstream unanswered for 500 ms.
    tracker.handle(open(30, Opened::Connected, Some(GW), "127.0.0.1:40000", "10.0.0.1:80", 95 * MS));
    tracker.handle(data(30, false, UPSTREAM_REQUEST, 150 * MS, None));
    assert_eq!(tracker.stall_facts(700 * MS, age, prompt)[0].upstream_waiting, 1);
}

#[test]
fn non_http_bytes_saturate() {
    // Found by fuzzing (socket_records): two closed connections whose records claimed more than
    // u64::MAX bytes between them overflowed the per-process total, a panic in debug builds.
    const GARBAGE: &[u8] = b"\x00\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    let mut tracker = RequestTracker::default();
    for sk in [1, 2] {
        tracker.handle(open(sk, Opened::Accepted, Some(GW), "127.0.0.1:8443", "127.0.0.1:50000", 0));
        let SocketRecord::Data(record) = data(sk, true, GARBAGE, MS, None) else { unreachable!() };
        tracker.handle(SocketRecord::Data(DataRecord { len: u64::MAX / 2 + 1, ..record }));
        tracker.handle(close(sk, 2 * MS));
    }
    assert_eq!(tracker.non_http_bytes.values().copied().collect::<Vec<_>>(), vec![u64::MAX]);
}

#[test]
fn tls_nobody_decrypts_is_counted_as_tls_not_as_garbage() {
    const TLS_HELLO: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    let mut tracker = RequestTracker::default();
    tracker.handle(open(1, Opened::Accepted, Some(GW), "127.0.0.1:8443", "127.0.0.1:50000", 0));
    tracker.handle(data(1, true, TLS_HELLO, MS, None));
    tracker.handle(data(1, false, b"\x16\x03\x03\x00\x7a\x02\x00", 2 * MS, None));
    tracker.handle(close(1, 3 * MS));
    assert_eq!(tracker.tls_unparsed.values().copied().collect::<Vec<_>>(), vec![1]);
    assert!(tracker.non_http_bytes.is_empty(), "{:?}", tracker.non_http_bytes);
    assert_eq!(tracker.counts.tls_ciphertext_records, 2, "both records set aside, and counted");
}

/// Node.js's way: ciphertext read and written on the socket outside the TLS library, plaintext
/// keyed by the session (`SSL *` in `sk`). Each plaintext read is tied to the connection whose
/// ciphertext the thread read just before, each write to its session's connection: the request
/// is counted and timed from the plaintext, its socket queue wait taken from the ciphertext read,
/// and the connection is not counted as TLS nobody decrypts.
#[test]
fn plaintext_keyed_by_its_session_is_parsed_on_the_connection_read_last() {
    const SSL: u64 = 0x5555_0000;
    let session = |ssl: u64, read: bool, bytes: &'static [u8], ts: u64| session_data(ssl, read, bytes, ts);
    let mut tracker = RequestTracker::default();
    tracker.handle(open(1, Opened::Accepted, Some(GW), "127.0.0.1:8443", "127.0.0.1:50000", 0));
    tracker.handle(data(1, true, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", MS, None));
    tracker.handle(data(1, false, b"\x16\x03\x03\x00\x7a\x02\x00", 2 * MS, None));
    tracker.handle(data(1, true, b"\x17\x03\x03\x00\x40\x99", 10 * MS, Some(9 * MS)));
    tracker.handle(session(SSL, true, REQUEST, 10 * MS + 1000));
    tracker.handle(session(SSL, false, RESPONSE, 13 * MS));
    tracker.handle(data(1, false, b"\x17\x03\x03\x00\x40\x98", 13 * MS + 1000, None));
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    assert_eq!(tracker.stats.count(&process.clone(), Side::Inbound, "GET", "2xx"), 1);
    assert_eq!(tracker.stats.series[&process].socket_queue.as_ref().map_or(0, |h| h.sum_ns), MS + 1000);
    // A session never read from: its write waits for the thread's next ciphertext write, and is
    // given up (counted) when the thread writes another session's plaintext first.
    tracker.handle(session(SSL + 1, false, RESPONSE, 14 * MS));
    assert_eq!(tracker.counts.tls_unresolved, 0);
    tracker.handle(session(SSL + 2, false, RESPONSE, 14 * MS + 1));
    assert_eq!(tracker.counts.tls_unresolved, 1);
    tracker.handle(close(1, 20 * MS));
    assert!(tracker.tls_unparsed.is_empty(), "{:?}", tracker.tls_unparsed);
    assert!(tracker.non_http_bytes.is_empty(), "{:?}", tracker.non_http_bytes);
}

/// Node.js as an HTTPS client: its request's plaintext (keyed by the session) comes before any
/// plaintext read, so no read has tied the session yet; the thread's next ciphertext write on a
/// TLS connection is that request encrypted, and ties it. The response then comes as on a server.
#[test]
fn a_clients_first_request_is_tied_by_the_ciphertext_written_after_it() {
    const SSL: u64 = 0x6666_0000;
    let session = |read: bool, bytes: &'static [u8], ts: u64| session_data(SSL, read, bytes, ts);
    let mut tracker = RequestTracker::default();
    tracker.handle(open(2, Opened::Connected, Some(GW), "127.0.0.1:50000", "127.0.0.1:8443", 0));
    tracker.handle(data(2, false, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", MS, None));
    tracker.handle(data(2, true, b"\x16\x03\x03\x00\x7a\x02\x00", 2 * MS, None));
    tracker.handle(session(false, UPSTREAM_REQUEST, 3 * MS));
    tracker.handle(data(2, false, b"\x17\x03\x03\x00\x40\x99", 3 * MS + 1000, None));
    tracker.handle(data(2, true, b"\x17\x03\x03\x00\x40\x98", 6 * MS, None));
    tracker.handle(session(true, RESPONSE, 6 * MS + 1000));
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    assert_eq!(tracker.stats.count(&process, Side::Outbound, "GET", "2xx"), 1);
    assert_eq!(tracker.counts.tls_unresolved, 0);
    // Its next request: the session knows its connection now.
    tracker.handle(session(false, UPSTREAM_REQUEST, 7 * MS));
    assert_eq!(in_flight(&tracker, 2), 1);
    tracker.handle(close(2, 20 * MS));
    assert!(tracker.tls_unparsed.is_empty(), "{:?}", tracker.tls_unparsed);
}

/// Kernel TLS: the handshake's records, then the socket moves plaintext. The request is counted
/// and timed from it, and the connection is not counted as TLS nobody decrypts.
#[test]
fn a_kernel_tls_connection_is_parsed_from_its_first_plaintext_request() {
    let mut tracker = RequestTracker::default();
    tracker.handle(open(1, Opened::Accepted, Some(GW), "127.0.0.1:8443", "127.0.0.1:50000", 0));
    tracker.handle(data(1, true, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", MS, None));
    tracker.handle(data(1, false, b"\x16\x03\x03\x00\x7a\x02\x00", 2 * MS, None));
    // TLS 1.2's Finished, which kTLS moves in the clear.
    tracker.handle(data(1, true, b"\x14\x00\x00\x0c\x8e\x21", 3 * MS, None));
    tracker.handle(data(1, true, REQUEST, 10 * MS, Some(9 * MS)));
    assert_eq!(in_flight(&tracker, 1), 1);
    tracker.handle(data(1, false, RESPONSE, 13 * MS, None));
    tracker.handle(close(1, 20 * MS));
    let process: Arc<str> = Arc::from(GW.to_string());
    assert_eq!(tracker.stats.count(&process.clone(), Side::Inbound, "GET", "2xx"), 1);
    assert_eq!(tracker.stats.series[&process].durations[&Side::Inbound].sum_ns, 3 * MS);
    assert!(tracker.tls_unparsed.is_empty(), "{:?}", tracker.tls_unparsed);
    assert_eq!((tracker.counts.kernel_tls_both, tracker.counts.kernel_tls_send_only), (1, 0));
    assert_eq!(tracker.counts.tls_ciphertext_records, 3);
}

/// A client whose kernel offloads sending only: its plaintext request is forgotten once
/// ciphertext comes back, and it never stays in flight.
#[test]
fn a_kernel_tls_client_receiving_ciphertext_is_set_aside() {
    let mut tracker = RequestTracker::default();
    tracker.handle(open(2, Opened::Connected, Some(GW), "127.0.0.1:50002", "127.0.0.1:443", 0));
    tracker.handle(data(2, false, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", MS, None));
    tracker.handle(data(2, false, UPSTREAM_REQUEST, 5 * MS, None));
    assert_eq!(in_flight(&tracker, 2), 1);
    tracker.handle(data(2, true, b"\x17\x03\x03\x00\x40", 8 * MS, None));
    assert_eq!(in_flight(&tracker, 2), 0);
    tracker.handle(close(2, 20 * MS));
    assert!(tracker.stats.series.is_empty(), "{:?}", tracker.stats.series);
    assert_eq!(tracker.tls_unparsed.values().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!((tracker.counts.kernel_tls_both, tracker.counts.kernel_tls_send_only), (0, 1));
}

/// HTTP/2 over kernel TLS: its preface comes after the handshake, past the first transfers the
/// kernel looks at for one, so the tracker tells the kernel to walk its frames.
#[test]
fn a_kernel_tls_connection_opening_with_the_h2_preface_is_marked_for_walks() {
    let mut tracker = RequestTracker::default();
    tracker.handle(open(3, Opened::Accepted, Some(GW), "127.0.0.1:8443", "127.0.0.1:50003", 0));
    tracker.handle(data(3, true, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", MS, None));
    assert!(tracker.take_h2_mid_way().is_empty());
    tracker.handle(data(3, true, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 2 * MS, None));
    assert_eq!(tracker.take_h2_mid_way(), [3]);
}
