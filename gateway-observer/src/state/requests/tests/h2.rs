//! The tracker's HTTP/2 connections: streams as requests, and their signals (refused and reset
//! streams, GOAWAYs, flow-control stalls) in the totals while the connection is open, counted
//! once whatever ends its session (close, resync after lost records, eviction, a reused socket).

use super::*;

/// Frames: HEADERS (END_STREAM | END_HEADERS) of GET / (static :method, :scheme, :path).
fn get(stream: u8) -> [u8; 12] {
    [0, 0, 3, 1, 5, 0, 0, 0, stream, 0x82, 0x86, 0x84]
}

/// RST_STREAM (REFUSED_STREAM) of `stream`, then a GOAWAY.
fn refuse(stream: u8) -> Vec<u8> {
    let mut frames = vec![0, 0, 4, 3, 0, 0, 0, 0, stream, 0, 0, 0, 7];
    frames.extend([0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, stream, 0, 0, 0, 0]);
    frames
}

/// (refused, other resets, GOAWAYs) of the gateway's process in the totals.
fn signals(tracker: &RequestTracker) -> (u64, u64, u64) {
    let s = tracker.h2_totals().signals()[&std::sync::Arc::from(GW.to_string())];
    (s.refused_streams, s.reset_streams, s.goaways)
}

/// (count, stalled ns) of the gateway's sending on its inbound connections.
fn gateway_stalls(tracker: &RequestTracker) -> (u64, u64) {
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    let s = tracker.h2_totals().stalls()[&(process, Side::Inbound, "gateway")];
    (s.count, s.stalled_ns)
}

/// An inbound h2c connection (socket 1) whose client refused stream 1 and said GOAWAY at 11 ms.
fn refused(tracker: &mut RequestTracker) {
    let mut first = PREFACE.to_vec();
    first.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    first.extend(get(1));
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(data(1, true, &first, 10 * MS, None));
    tracker.handle(data(1, false, &refuse(1), 11 * MS, None));
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The client's SETTINGS (INITIAL_WINDOW_SIZE = 100), then GET / on stream 1.
const SMALL_WINDOW_GET: [u8; 27] =
    [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 100, 0, 0, 3, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84];
/// The client's WINDOW_UPDATE of 100 bytes on stream 1.
const UPDATE: [u8; 13] = [0, 0, 4, 8, 0, 0, 0, 0, 1, 0, 0, 0, 100];

/// An inbound h2c connection (socket 1) whose client gives streams 100 bytes: the gateway's
/// :status 200 and 100 bytes of DATA at 11 ms close the window, stream 1 still open.
fn stalled(tracker: &mut RequestTracker) {
    let mut first = PREFACE.to_vec();
    first.extend(SMALL_WINDOW_GET);
    let mut response = vec![0, 0, 1, 1, 4, 0, 0, 0, 1, 0x88, 0, 0, 100, 0, 0, 0, 0, 0, 1];
    response.extend([b'x'; 100]);
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(data(1, true, &first, 10 * MS, None));
    tracker.handle(data(1, false, &response, 11 * MS, None));
}

/// h2c: two streams on one connection, answered out of order, are two requests with their own
/// latencies; while one is open it is in flight.
#[test]
fn http2_streams_are_requests() {
    // A response HEADERS of :status 200 (static 8) with END_STREAM.
    let ok = |stream: u8| [0, 0, 1, 1, 5, 0, 0, 0, stream, 0x88];
    let mut first = PREFACE.to_vec();
    first.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    first.extend(get(1));
    let mut tracker = RequestTracker::default();
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50000", 0));
    tracker.handle(data(1, true, &first, 10 * MS, None));
    tracker.handle(data(1, true, &get(3), 11 * MS, None));
    tracker.handle(data(1, false, &ok(3), 14 * MS, None));
    assert_eq!(in_flight(&tracker, 1), 1);
    tracker.handle(data(1, false, &ok(1), 30 * MS, None));
    assert_eq!(in_flight(&tracker, 1), 0);
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    assert_eq!(tracker.stats.count(&process, Side::Inbound, "GET", "2xx"), 2);
    let summary = &tracker.per_process(40 * MS)[&GW];
    assert_eq!(summary.inbound.requests, 2);
    // Stream 5 refused, then GOAWAY: counted per process at the next tick, and not again at
    // the close.
    tracker.handle(data(1, true, &get(5), 31 * MS, None));
    tracker.handle(data(1, false, &refuse(5), 32 * MS, None));
    assert!(tracker.h2_totals().signals().is_empty(), "nothing before the tick");
    tracker.settle_h2(33 * MS);
    assert_eq!(signals(&tracker), (1, 0, 1), "while the connection is open");
    tracker.settle_h2(34 * MS);
    assert_eq!(signals(&tracker), (1, 0, 1), "not again at the next tick");
    tracker.handle(close(1, 35 * MS));
    assert_eq!(signals(&tracker), (1, 0, 1), "not again at the close");
}

/// h2c with a client window of 100 bytes: the gateway's response stalls from its first DATA
/// to the client's WINDOW_UPDATE, counted for the gateway as sender.
#[test]
fn http2_flow_control_stalls_by_sender() {
    let last = [0, 0, 1, 0, 1, 0, 0, 0, 1, b'x'];
    let mut tracker = RequestTracker::default();
    stalled(&mut tracker);
    tracker.handle(data(1, true, &UPDATE, 14 * MS, None));
    tracker.handle(data(1, false, &last, 15 * MS, None));
    tracker.handle(close(1, 20 * MS));
    assert_eq!(gateway_stalls(&tracker), (1, 3 * MS));
    let process: std::sync::Arc<str> = std::sync::Arc::from(GW.to_string());
    assert_eq!(tracker.h2_totals().stalls()[&(process, Side::Inbound, "peer")].count, 0);
}

/// A stall still open is timed up to each tick, so its seconds grow while the connection
/// waits; once it ends, its time is the one between its frames, counted once.
#[test]
fn an_open_stall_is_timed_at_each_tick_and_counted_once() {
    let mut tracker = RequestTracker::default();
    stalled(&mut tracker);
    tracker.settle_h2(12 * MS);
    assert_eq!(gateway_stalls(&tracker), (1, MS));
    tracker.settle_h2(13 * MS);
    assert_eq!(gateway_stalls(&tracker), (1, 2 * MS), "the stall grows while it lasts");
    tracker.handle(data(1, true, &UPDATE, 14 * MS, None));
    tracker.settle_h2(15 * MS);
    assert_eq!(gateway_stalls(&tracker), (1, 3 * MS), "ended at the WINDOW_UPDATE");
    tracker.handle(close(1, 20 * MS));
    assert_eq!(gateway_stalls(&tracker), (1, 3 * MS), "not again at the close");
}

/// A tick past the frame that ends a stall, the frame not yet read: the stall came to less
/// than the tick showed, and the totals keep what they showed.
#[test]
fn a_stall_shown_longer_than_it_lasted_never_goes_down() {
    let mut tracker = RequestTracker::default();
    stalled(&mut tracker);
    tracker.settle_h2(20 * MS);
    assert_eq!(gateway_stalls(&tracker), (1, 9 * MS));
    tracker.handle(data(1, true, &UPDATE, 14 * MS, None));
    tracker.settle_h2(21 * MS);
    assert_eq!(gateway_stalls(&tracker), (1, 9 * MS));
    tracker.handle(close(1, 22 * MS));
    assert_eq!(gateway_stalls(&tracker), (1, 9 * MS));
}

/// Records of the connection lost: it is parsed afresh from its next bytes, a new session. What
/// the old one showed stays; the new one's signals add to it, by each of the three ways a
/// connection learns of its losses.
#[test]
fn signals_survive_a_resync_after_lost_records() {
    let mut tracker = RequestTracker::default();
    refused(&mut tracker);
    tracker.settle_h2(12 * MS);
    assert_eq!(signals(&tracker), (1, 0, 1));
    // The connection's own count of lost records moved: seen on its next record.
    tracker.handle(data_after_losses(1, true, &get(3), 20 * MS, 1));
    assert_eq!(signals(&tracker), (1, 0, 1), "kept, not doubled, at the resync");
    tracker.handle(data(1, false, &refuse(3), 21 * MS, None));
    tracker.settle_h2(22 * MS);
    assert_eq!(signals(&tracker), (2, 0, 2), "the new session's add to it");
    // The kernel's count read after a drain; then every connection's, its count unreadable.
    assert_eq!(tracker.after_loss(&[(1, Some(2))]), 0);
    tracker.settle_h2(23 * MS);
    assert_eq!(signals(&tracker), (2, 0, 2));
    tracker.handle(data(1, true, &get(5), 30 * MS, None));
    tracker.handle(data(1, false, &refuse(5), 31 * MS, None));
    tracker.resync_after_loss();
    tracker.settle_h2(32 * MS);
    assert_eq!(signals(&tracker), (3, 0, 3), "finished at the resync, before any tick");
    tracker.handle(close(1, 40 * MS));
    assert_eq!(signals(&tracker), (3, 0, 3));
}

/// A stall still open when records are lost ends at the connection's last record.
#[test]
fn an_open_stall_ends_at_a_resync() {
    let mut tracker = RequestTracker::default();
    stalled(&mut tracker);
    tracker.settle_h2(12 * MS);
    tracker.handle(data_after_losses(1, true, &UPDATE, 16 * MS, 1));
    tracker.settle_h2(17 * MS);
    assert_eq!(gateway_stalls(&tracker), (1, 5 * MS), "timed to the record that told of the loss");
}

/// The least active connection forgotten for room, or its socket reused after its close was
/// lost: its signals stay counted, once.
#[test]
fn signals_survive_eviction_and_a_reused_socket() {
    let mut tracker = RequestTracker::default();
    refused(&mut tracker);
    tracker.handle(open(1, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50001", 20 * MS));
    assert_eq!(signals(&tracker), (1, 0, 1), "a reused socket");
    tracker.handle(data(1, true, &[PREFACE, &get(1)[..]].concat(), 21 * MS, None));
    tracker.handle(data(1, false, &refuse(1), 22 * MS, None));
    tracker.settle_h2(23 * MS);
    assert_eq!(signals(&tracker), (2, 0, 2));
    for sk in 2..=MAX_CONNECTIONS as u64 + 1 {
        tracker.handle(open(sk, Opened::Accepted, None, "127.0.0.1:8080", "127.0.0.1:50002", 30 * MS));
    }
    assert_eq!(tracker.counts.evicted_connections, 1);
    assert!(!tracker.conns.contains_key(&1), "the least active went");
    tracker.settle_h2(31 * MS);
    assert_eq!(signals(&tracker), (2, 0, 2));
}
