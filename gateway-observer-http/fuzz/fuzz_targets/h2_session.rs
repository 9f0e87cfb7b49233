//! Drives an HTTP/2 [`Session`] with any byte string decoded as operations by [`replay`] (seeds:
//! real h2 conversations, `h2::fixtures`): it must never panic, keep its streams bounded, and
//! report streams whose times and byte counts fit what it was fed, and flow-control stalls no
//! longer than the time fed.

#![no_main]

use libfuzzer_sys::fuzz_target;

use gateway_observer_http::{
    Exchange, Role,
    connection::MAX_IN_FLIGHT,
    h2::{Session, flow::MAX_STREAMS},
    parser::MAX_PATH,
    replay::{self, Op},
};

fuzz_target!(|input: &[u8]| {
    let mut session = Session::new(Role::Server, true);
    let mut streams = Vec::new();
    let (mut now, mut fed) = (replay::START_NS, 0u64);
    for op in replay::decode(input) {
        match op {
            Op::Connect(role) => {
                session.on_close(now, &mut streams);
                streams.drain(..).for_each(|e| sane(&e, now, fed));
                session = Session::new(role, true);
                fed = 0;
            }
            Op::Segment(dir, seg) => {
                (now, fed) = (seg.ts_ns, fed.saturating_add(seg.len));
                session.on_segment(dir, &seg, &mut streams);
            }
            Op::Close { ts_ns } => {
                now = ts_ns;
                session.on_close(ts_ns, &mut streams);
            }
        }
        assert!(session.in_flight().count() <= MAX_IN_FLIGHT);
        assert!(session.in_flight().all(|r| r.path.redacted().len() <= MAX_PATH && r.request_bytes <= fed));
        let signals = session.signals(None);
        assert!(signals.resyncs <= session.lost_sync());
        // Stall time is a union of intervals between the times fed.
        for stalls in [signals.gateway_stalls, signals.peer_stalls] {
            assert!(stalls.stalled_ns <= now - replay::START_NS, "{stalls:?} by {now}");
        }
        assert!(session.flow_streams() <= 2 * MAX_STREAMS);
        streams.drain(..).for_each(|e| sane(&e, now, fed));
    }
    session.on_close(now, &mut streams);
    streams.drain(..).for_each(|e| sane(&e, now, fed));
    assert_eq!(session.in_flight().count(), 0, "streams open after close");
});

fn sane(e: &Exchange, now: u64, fed: u64) {
    let path = e.path.redacted();
    assert!(path.len() <= MAX_PATH && !path.contains(['?', '#']), "{e:?}");
    assert!(e.request_start_ns <= e.request_end_ns && e.request_start_ns <= e.response_end_ns, "{e:?}");
    assert!(e.response_end_ns <= now && e.response_start_ns.is_none_or(|s| s <= e.response_end_ns), "{e:?}");
    assert!(e.request_bytes <= fed && e.response_bytes <= fed, "{e:?} fed {fed}");
}
