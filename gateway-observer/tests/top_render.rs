//! `top`'s screens drawn with ratatui's `TestBackend` on snapshots recorded from a real daemon
//! (`tests/data/top/`: a healthy reference gateway under load, and the same during incident 1
//! with four `EventLoopBlocked` alerts), on an empty daemon, and on a generated huge one, at
//! 80x24 and 200x60. Unprivileged.

use gateway_observer::top::{
    app::{App, Key, Screen, Update},
    model::{Alert, AlertEvidence, AlertProcess, Data, EventLoop, Process, SlowRequest, Snapshot, Upstream, Window},
    view,
};
use ratatui::{Terminal, backend::TestBackend};

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/data/top/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn recorded(which: &str) -> Data {
    Data::parse(&fixture(&format!("{which}_snapshot.json")), &fixture(&format!("{which}_alerts.json")))
        .expect("recorded fixture parses")
}

fn app_with(data: Data) -> App {
    let mut app = App::new("http://127.0.0.1:9464");
    app.apply(Update::Data(Box::new(data)));
    app
}

/// The screen as text, one line per row.
fn render(app: &App, (width, height): (u16, u16)) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal.draw(|frame| view::draw(frame, app)).expect("draw");
    let buffer = terminal.backend().buffer();
    assert_eq!((buffer.area.width, buffer.area.height), (width, height), "the buffer is the terminal's size");
    (0..height).map(|y| (0..width).map(|x| buffer[(x, y)].symbol()).collect::<String>()).collect::<Vec<_>>().join("\n")
}

fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} on screen:\n{screen}"))
}

#[test]
fn overview_shows_each_process_with_its_rate() {
    for size in SIZES {
        let screen = render(&app_with(recorded("healthy")), size);
        let row = line_with(&screen, "reference-gatew");
        assert!(
            row.contains("771.6"),
            "req/s of the recorded snapshot in the process row at {size:?}: {row:?}\n{screen}"
        );
        assert!(row.contains("18ms"), "its p99 at {size:?}: {row:?}");
        assert!(screen.contains("no alerts"), "healthy: no alerts at {size:?}\n{screen}");
        assert!(screen.contains("● connected"), "{screen}");
        let footer = screen.lines().last().expect("footer");
        for key in ["q quit", "? help", "s sort", "/ filter", "p pause", "esc back"] {
            assert!(footer.contains(key), "footer lists {key:?} at {size:?}: {footer:?}");
        }
    }
}

#[test]
fn overview_shows_open_alerts_during_the_incident() {
    for size in SIZES {
        let screen = render(&app_with(recorded("blocked")), size);
        let row = line_with(&screen, "reference-gatew");
        assert!(
            row.contains("547.3") && row.contains("96%") && row.contains("4 ●"),
            "rate, loop max, alerts at {size:?}: {row:?}"
        );
        let alert = line_with(&screen, "gw-worker-0");
        assert!(alert.contains("firing") && alert.contains("EventLoopBlocked"), "{alert:?}\n{screen}");
        assert!(screen.contains("5 Alerts (4)"), "the tab counts open alerts:\n{screen}");
        if size.1 >= 40 {
            assert!(screen.contains("Busiest event loops (4)"), "a tall overview adds the event loops:\n{screen}");
            let busiest = screen.lines().skip_while(|l| !l.contains("Busiest event loops")).nth(2).unwrap_or_default();
            assert!(
                busiest.contains("gw-worker-")
                    && busiest.contains("96%")
                    && busiest.contains("EventLoopBlocked (firing)"),
                "{busiest:?}\n{screen}"
            );
        }
    }
}

/// The blocked incident with names a target chose to drive a terminal: an escape sequence in the
/// process name, a C1 control in a thread name.
fn hostile() -> Data {
    let swap = |text: String| text.replace("reference-gatew", "r\\u001b[31mgw").replace("gw-worker-0", "w\\u009b0");
    Data::parse(&swap(fixture("blocked_snapshot.json")), &swap(fixture("blocked_alerts.json"))).expect("parses")
}

#[test]
fn names_with_control_characters_are_shown_escaped() {
    let mut app = app_with(hostile());
    for screen_key in ['1', '2', '5'] {
        app.on_key(Key::Char(screen_key));
        let screen = render(&app, (200, 60));
        assert!(screen.contains("r\\x1b[31mgw"), "the process name, escaped, on screen {screen_key}:\n{screen}");
    }
    let screen = render(&app, (200, 60));
    assert!(screen.contains("w\\u{9b}0"), "the thread name, escaped, on the alerts screen:\n{screen}");
}

#[test]
fn alerts_pane_shows_kind_subject_and_evidence() {
    for size in SIZES {
        let mut app = app_with(recorded("blocked"));
        app.on_key(Key::Char('5'));
        let screen = render(&app, size);
        let row = line_with(&screen, "▶ firing");
        assert!(
            row.contains("EventLoopBlocked") && row.contains("gw-worker-0") && row.contains("reference-gatew (9279)"),
            "{row:?}\n{screen}"
        );
        assert!(
            screen.contains("Evidence: EventLoopBlocked/9279/gw-worker-0"),
            "the first alert is selected at {size:?}:\n{screen}"
        );
        assert!(line_with(&screen, "reason:").contains("reason: socket"), "an evidence line at {size:?}:\n{screen}");
        assert!(line_with(&screen, "syscall:").contains("syscall: recvfrom"), "{screen}");
        // Moving the selection shows the next alert's evidence.
        app.on_key(Key::Down);
        let screen = render(&app, size);
        assert!(screen.contains("Evidence: EventLoopBlocked/9279/gw-worker-1"), "{screen}");
    }
    // Tall enough, the stack is on screen too.
    let mut app = app_with(recorded("blocked"));
    app.on_key(Key::Char('5'));
    let screen = render(&app, (200, 60));
    assert!(screen.contains("recv+0x64 (libc.so.6)"), "the stack frame:\n{screen}");
}

#[test]
fn process_view_shows_event_loops_with_their_alert() {
    for size in SIZES {
        let mut app = app_with(recorded("blocked"));
        app.on_key(Key::Enter);
        assert_eq!(app.screen, Screen::Process);
        let screen = render(&app, size);
        let row = line_with(&screen, "gw-worker-0");
        assert!(
            row.contains("96%") && row.contains("EventLoopBlocked") && row.contains('█'),
            "utilization bar and alert at {size:?}: {row:?}\n{screen}"
        );
        assert!(screen.contains("reference-gatew (9279)"), "{screen}");
        assert!(screen.contains("thread groups: not in this daemon's snapshot"), "{screen}");
        let listening = line_with(&screen, "listening");
        assert!(
            listening.contains(":8080 accept queue 3, 2 waiting unread up to 1.40s"),
            "at {size:?}: {listening:?}\n{screen}"
        );
    }
}

#[test]
fn requests_and_upstreams_views_show_the_recorded_rows() {
    for size in SIZES {
        let mut app = app_with(recorded("blocked"));
        app.on_key(Key::Char('3'));
        let screen = render(&app, size);
        let slowest = line_with(&screen, "GET /api/x");
        assert!(slowest.contains("2.00s"), "the slowest request first at {size:?}: {slowest:?}\n{screen}");
        assert!(screen.contains("In flight, oldest first (8)"), "{screen}");
        assert!(line_with(&screen, "gw-worker-2").contains("waiting"), "{screen}");
        app.on_key(Key::Char('4'));
        let screen = render(&app, size);
        let peer = line_with(&screen, "127.0.0.1:18081");
        assert!(peer.contains("119ms"), "oldest outstanding age at {size:?}: {peer:?}\n{screen}");
        assert!(screen.find("127.0.0.1:18081") < screen.find("127.0.0.1:16379"), "sorted by outstanding:\n{screen}");
    }
}

#[test]
fn empty_daemon_says_so() {
    for size in SIZES {
        let mut app = app_with(Data::default());
        let screen = render(&app, size);
        assert!(screen.contains("no targets"), "at {size:?}:\n{screen}");
        assert!(screen.contains("no alerts"), "at {size:?}:\n{screen}");
        app.on_key(Key::Char('5'));
        assert!(render(&app, size).contains("no alerts"), "alerts screen at {size:?}");
        for screen_key in ['2', '3', '4'] {
            app.on_key(Key::Char(screen_key));
            render(&app, size);
        }
    }
}

#[test]
fn a_daemon_that_is_down_is_shown_as_retrying() {
    let mut app = App::new("http://127.0.0.1:9");
    app.apply(Update::Failed("cannot connect to 127.0.0.1:9: Connection refused (os error 111)".into()));
    let screen = render(&app, (80, 24));
    assert!(screen.contains("disconnected, retrying"), "{screen}");
    // After data, a failure keeps the data on screen and says it is stale.
    let mut app = app_with(recorded("healthy"));
    app.apply(Update::Failed("connection refused".into()));
    let screen = render(&app, (80, 24));
    assert!(screen.contains("disconnected, retrying") && screen.contains("reference-gatew"), "{screen}");
}

#[test]
fn help_and_filter_are_drawn() {
    let mut app = app_with(recorded("blocked"));
    app.on_key(Key::Char('?'));
    let screen = render(&app, (80, 24));
    assert!(screen.contains("cycle the sort key"), "{screen}");
    app.on_key(Key::Esc);
    app.on_key(Key::Char('5'));
    app.on_key(Key::Char('/'));
    for c in "worker-3".chars() {
        app.on_key(Key::Char(c));
    }
    assert!(render(&app, (80, 24)).contains("/worker-3▏"), "the filter being typed is in the footer");
    app.on_key(Key::Enter);
    let screen = render(&app, (80, 24));
    assert!(screen.contains("Alerts (1)") && screen.contains("filter: worker-3"), "{screen}");
    assert!(!screen.contains("gw-worker-0"), "{screen}");
}

/// 500 processes, 5000 slow requests, 300 alerts, long names: every screen draws within its
/// area without panicking, in both sizes, with the selection at the end.
#[test]
fn huge_snapshot_renders_within_the_area() {
    let long = "x".repeat(300);
    let processes: Vec<Process> = (0..500)
        .map(|i| Process {
            pid: 10_000 + i,
            comm: format!("gateway-{i}-{long}"),
            inbound: Window { per_second: Some(f64::from(i) * 1000.0), p99_seconds: Some(1e9), ..Window::default() },
            in_flight: Some(u64::MAX),
            upstreams: (0..4)
                .map(|u| Upstream {
                    peer: format!("10.0.{u}.{i}:8080{long}"),
                    outstanding: Some(u),
                    ..Upstream::default()
                })
                .collect(),
            ..Process::default()
        })
        .collect();
    let event_loops = (0..2000)
        .map(|i| EventLoop {
            pid: 10_000 + i % 500,
            comm: "gateway".into(),
            thread: format!("loop-{i}"),
            tid: Some(i),
            utilization: Some(f64::from(i % 7) / 3.0),
        })
        .collect();
    let slowest_requests = (0..5000)
        .map(|i| SlowRequest {
            pid: 10_000 + i % 500,
            method: "POST".into(),
            path: format!("/{i}/{long}"),
            duration_seconds: Some(f64::from(i)),
            status: Some(500),
            ..SlowRequest::default()
        })
        .collect();
    let alerts = (0..300)
        .map(|i| Alert {
            id: format!("EventLoopBlocked/{i}/{long}"),
            state: ["firing", "pending", "resolved"][i % 3].into(),
            process: AlertProcess { pid: 10_000 + i as u32, comm: long.clone() },
            subject: format!("worker-{i}"),
            summary: long.clone(),
            evidence: AlertEvidence::from_wire(
                "EventLoopBlocked".into(),
                serde_json::json!({"reason": "socket", "stack": vec![long.clone(); 50], "nested": {"deep": {"x": [1, 2, 3]}}}),
            ),
            ..Alert::default()
        })
        .collect();
    let data = Data {
        snapshot: Snapshot {
            targets: Some(500),
            threads: Some(100_000),
            event_loops,
            processes,
            slowest_requests,
            ..Snapshot::default()
        },
        alerts,
    };
    let mut app = app_with(data);
    for size in SIZES.into_iter().chain([(20, 5), (1, 1)]) {
        for screen in ['1', '2', '3', '4', '5'] {
            app.on_key(Key::Char(screen));
            render(&app, size);
            app.on_key(Key::End);
            let text = render(&app, size);
            assert_eq!(text.lines().count(), usize::from(size.1));
        }
    }
    assert_eq!(app.selected[Screen::Requests.index()], 4999);
    let screen = render(&app, (80, 24));
    assert!(screen.contains("Alerts (300)"), "{screen}");
}
