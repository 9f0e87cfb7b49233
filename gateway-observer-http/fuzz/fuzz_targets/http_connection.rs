//! Drives [`Connection`] with any byte string, decoded as operations by [`replay`]:
//! it must never panic, keep at most `MAX_IN_FLIGHT` requests, and report sane exchanges (time
//! only moves forward in the encoding, so ends never precede starts).

#![no_main]

use libfuzzer_sys::fuzz_target;

use gateway_observer_http::{
    Connection, Exchange, ExchangeOutcome, Role,
    connection::MAX_IN_FLIGHT,
    parser::MAX_PATH,
    replay::{self, Op},
};

fuzz_target!(|input: &[u8]| {
    let mut conn = Connection::new(Role::Server);
    let mut out = Vec::new();
    let mut now = replay::START_NS;
    let mut fed = 0u64;
    for op in replay::decode(input) {
        match op {
            Op::Connect(role) => {
                conn.on_close(now, &mut out);
                check(&conn, &mut out, fed, now);
                conn = Connection::new(role);
                fed = 0;
            }
            Op::Segment(dir, seg) => {
                now = seg.ts_ns;
                fed = fed.saturating_add(seg.len);
                conn.on_segment(dir, &seg, &mut out);
            }
            Op::Close { ts_ns } => {
                now = ts_ns;
                conn.on_close(ts_ns, &mut out);
            }
        }
        check(&conn, &mut out, fed, now);
    }
    conn.on_close(now, &mut out);
    check(&conn, &mut out, fed, now);
    assert_eq!(conn.in_flight().count(), 0, "requests in flight after close");
});

fn check(conn: &Connection, out: &mut Vec<Exchange>, fed: u64, now: u64) {
    assert!(conn.in_flight().count() <= MAX_IN_FLIGHT);
    for r in conn.in_flight() {
        let path = r.path.redacted();
        assert!(path.len() <= MAX_PATH && !path.contains('?'), "path {path:?}");
        assert!(r.request_start_ns <= now && r.request_bytes <= fed);
    }
    if !conn.is_http() {
        assert!(conn.non_http_bytes() <= fed);
    }
    for e in out.drain(..) {
        let path = e.path.redacted();
        assert!(path.len() <= MAX_PATH && !path.contains('?') && !path.contains('#'), "path {path:?}");
        assert!(e.request_end_ns >= e.request_start_ns, "{e:?}");
        assert!(e.response_end_ns >= e.request_start_ns, "{e:?}");
        assert!(e.response_end_ns <= now, "{e:?}");
        if let Some(start) = e.response_start_ns {
            assert!(start <= e.response_end_ns, "{e:?}");
        }
        assert!(e.request_bytes <= fed && e.response_bytes <= fed, "{e:?} fed {fed}");
        match e.outcome {
            ExchangeOutcome::Upgraded => assert!(e.status.is_some(), "{e:?}"),
            // None: the response's start line was in unseen bytes.
            ExchangeOutcome::Complete => assert!(e.status.is_none_or(|s| s >= 200), "{e:?}"),
            ExchangeOutcome::Closed => {}
        }
    }
}
