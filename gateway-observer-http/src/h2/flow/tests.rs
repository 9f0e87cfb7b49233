//! Flow-control windows followed through [`crate::Connection`] from constructed frames, each
//! syscall seen as the kernel reports it.

use super::{MAX_STREAMS, Stalls};
use crate::exchange::Role;
use crate::h2::PREFACE;
use crate::h2::frames::{DATA, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED, HEADERS, SETTINGS, WINDOW_UPDATE};
use crate::h2::session::tests::{Conn, cat, frame, get};

fn settings(initial_window: u32) -> Vec<u8> {
    let mut entry = vec![0, 4];
    entry.extend(initial_window.to_be_bytes());
    frame(SETTINGS, 0, 0, &entry)
}

fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

fn data(stream: u32, len: usize, end: bool) -> Vec<u8> {
    frame(DATA, if end { FLAG_END_STREAM } else { 0 }, stream, &vec![b'x'; len])
}

/// :status 200 (static 8), the body to follow.
fn status(stream: u32) -> Vec<u8> {
    frame(HEADERS, FLAG_END_HEADERS, stream, &[0x88])
}

/// A server connection whose client gives streams `window` bytes.
fn server(window: u32) -> Conn {
    let mut c = Conn::new(Role::Server);
    c.read(1, &cat(&[PREFACE, &settings(window)]));
    c.write(2, &frame(SETTINGS, 0, 0, &[]));
    c
}

fn gateway(c: &Conn) -> Stalls {
    c.conn.h2_signals().gateway_stalls
}

fn close(c: &mut Conn, ts: u64) {
    c.conn.on_close(ts, &mut c.out);
}

#[test]
fn stream_window_stall_ends_at_its_window_update() {
    let mut c = server(100);
    c.read(10, &get(1, b"/"));
    c.write(20, &cat(&[&status(1), &data(1, 100, false)]));
    assert_eq!(gateway(&c).count, 1);
    // Still open: timed up to the moment asked, and only when asked.
    assert_eq!(c.conn.h2_signals_at(30).gateway_stalls.stalled_ns, 10);
    assert_eq!(gateway(&c).stalled_ns, 0);
    assert!(c.conn.h2_stalled());
    c.read(35, &window_update(1, 100));
    assert!(!c.conn.h2_stalled());
    assert_eq!(c.conn.h2_signals_at(1_000).gateway_stalls.stalled_ns, 15, "an ended stall keeps its time");
    c.write(40, &data(1, 50, true));
    close(&mut c, 50);
    assert_eq!(gateway(&c), Stalls { count: 1, stalled_ns: 15, dropped_streams: 0 });
    assert_eq!(c.conn.h2_signals().peer_stalls, Stalls::default());
    assert_eq!(c.out.len(), 1);
}

/// Padding and its length byte count against the window (RFC 9113 §6.9.1).
#[test]
fn padding_is_flow_controlled() {
    let mut c = server(100);
    c.read(10, &get(1, b"/"));
    let padded = cat(&[&[9], &[b'x'; 90], &[0; 9]]);
    c.write(20, &cat(&[&status(1), &frame(DATA, FLAG_PADDED, 1, &padded)]));
    assert_eq!(gateway(&c).count, 1);
}

/// A window closed by the frame that ends the stream holds nothing back.
#[test]
fn window_closed_by_the_last_frame_is_no_stall() {
    let mut c = server(100);
    c.read(10, &get(1, b"/"));
    c.write(20, &cat(&[&status(1), &data(1, 100, true)]));
    close(&mut c, 30);
    assert_eq!(gateway(&c), Stalls::default());
}

/// The connection's window (65,535 whatever SETTINGS say) closes with a stream open: stalled
/// until the WINDOW_UPDATE on stream 0, whatever the stream's own window does.
#[test]
fn connection_window_stall() {
    let mut c = server(1 << 20);
    c.read(10, &get(1, b"/"));
    c.write(20, &cat(&[&status(1), &data(1, 16_384, false)]));
    c.write(21, &data(1, 16_384, false));
    c.write(22, &data(1, 16_384, false));
    assert_eq!(gateway(&c).count, 0);
    c.write(23, &data(1, 16_383, false));
    assert_eq!(gateway(&c).count, 1);
    c.read(27, &window_update(1, 1000));
    c.read(30, &window_update(0, 65_535));
    c.write(31, &data(1, 10, true));
    close(&mut c, 40);
    assert_eq!(gateway(&c), Stalls { count: 1, stalled_ns: 7, dropped_streams: 0 });
}

/// SETTINGS_INITIAL_WINDOW_SIZE moves open streams' windows by the difference, below 0 too.
#[test]
fn settings_move_open_stream_windows() {
    let mut c = server(100);
    c.read(10, &get(1, b"/"));
    c.write(20, &cat(&[&status(1), &data(1, 60, false)]));
    c.read(30, &settings(50));
    assert_eq!(gateway(&c).count, 1);
    c.read(45, &settings(200));
    close(&mut c, 60);
    assert_eq!(gateway(&c), Stalls { count: 1, stalled_ns: 15, dropped_streams: 0 });
}

/// A client uploading into the gateway's window: the peer's stall.
#[test]
fn peer_upload_stall() {
    let mut c = Conn::new(Role::Server);
    c.read(1, &cat(&[PREFACE, &frame(SETTINGS, 0, 0, &[])]));
    c.write(2, &settings(100));
    // POST (static 3) http / without END_STREAM: a body follows.
    c.read(10, &frame(HEADERS, FLAG_END_HEADERS, 1, &[0x83, 0x86, 0x84]));
    c.read(20, &data(1, 100, false));
    c.write(26, &window_update(1, 100));
    c.read(27, &data(1, 1, true));
    c.write(30, &cat(&[&status(1), &data(1, 1, true)]));
    close(&mut c, 40);
    let s = c.conn.h2_signals();
    assert_eq!((s.peer_stalls.count, s.peer_stalls.stalled_ns, s.gateway_stalls.count), (1, 6, 0));
}

/// First seen mid-way: no window is known. A SETTINGS with the initial window makes later
/// streams' known; the connection's stays unknown.
#[test]
fn midway_windows_stay_unknown_until_settings() {
    let mut c = Conn::new(Role::Server);
    c.read(1, &get(7, b"/"));
    assert!(c.conn.is_h2());
    c.write(2, &cat(&[&status(7), &data(7, 16_384, false)]));
    for t in 3..8 {
        c.write(t, &data(7, 16_384, false));
    }
    assert_eq!(gateway(&c).count, 0);
    c.read(10, &settings(100));
    c.read(11, &get(9, b"/"));
    c.write(12, &cat(&[&status(9), &data(9, 100, false)]));
    assert_eq!(gateway(&c).count, 1);
}

/// A frame header lost in unseen bytes: the stall open ends there, later WINDOW_UPDATEs move
/// nothing, and streams opened after the walk resumes are followed again.
#[test]
fn lost_sync_forgets_open_windows() {
    let mut c = server(100);
    c.read(10, &get(1, b"/"));
    c.write(20, &cat(&[&status(1), &data(1, 100, false)]));
    c.write(30, &cat(&[&data(3, 1000, false), &data(3, 10, false)]));
    assert_eq!(c.conn.lost_sync(), 1);
    c.read(40, &window_update(1, 100));
    assert_eq!(gateway(&c), Stalls { count: 1, stalled_ns: 10, dropped_streams: 0 });
    c.read(50, &get(5, b"/"));
    c.write(51, &cat(&[&status(5), &data(5, 100, false)]));
    assert_eq!(gateway(&c).count, 2);
}

#[test]
fn stream_windows_are_capped() {
    let mut c = server(100);
    let n = MAX_STREAMS as u32 + 44;
    for i in 0..n {
        c.read(10 + u64::from(i), &get(2 * i + 1, b"/"));
    }
    assert_eq!(gateway(&c).dropped_streams, 44);
    // The newest stream is still followed.
    c.write(1000, &cat(&[&status(2 * n - 1), &data(2 * n - 1, 100, false)]));
    assert_eq!(gateway(&c).count, 1);
}
