//! The state of `top`, apart from any terminal: which screen, selection, sort, filter, pause,
//! the data shown and a short history per process. Keys and refreshes change it through
//! [`App::on_key`] and [`App::apply`], which do no I/O, so every behaviour is unit-tested here;
//! `view/` only reads it, and lists rows through the same functions so that what is selected
//! is what is drawn (those listing functions are in `rows.rs`).

use std::collections::{BTreeMap, VecDeque};

use super::model::Data;
pub use super::rows::ProcessRow;

/// Points of history kept per process (one per refresh).
pub const HISTORY: usize = 120;
/// Rows a page key moves.
const PAGE: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Overview,
    Process,
    Requests,
    Upstreams,
    Alerts,
}

impl Screen {
    pub const ALL: [Screen; 5] =
        [Screen::Overview, Screen::Process, Screen::Requests, Screen::Upstreams, Screen::Alerts];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn title(self) -> &'static str {
        match self {
            Screen::Overview => "Overview",
            Screen::Process => "Process",
            Screen::Requests => "Requests",
            Screen::Upstreams => "Upstreams",
            Screen::Alerts => "Alerts",
        }
    }

    /// What `s` cycles through, first is the default.
    pub fn sort_keys(self) -> &'static [&'static str] {
        match self {
            Screen::Overview => &["req/s", "p99", "in-flight", "loop util", "alerts", "name"],
            Screen::Process => &["utilization", "blocked", "name"],
            Screen::Requests => &["duration", "age", "upstream"],
            Screen::Upstreams => &["outstanding", "oldest", "connections", "peer"],
            Screen::Alerts => &["state", "since", "kind"],
        }
    }
}

/// A key, as `top` understands it (the terminal's events are mapped in `mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Tab,
    BackTab,
    Backspace,
    Char(char),
    /// Ctrl-C: raw mode turns SIGINT into this key.
    Interrupt,
}

/// What a refresh brought.
#[derive(Debug, Clone)]
pub enum Update {
    Data(Box<Data>),
    Failed(String),
}

/// The daemon, as last heard of.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    Connecting,
    Up,
    Down { error: String, failures: u32 },
}

/// Recent inbound rate and p99 of one process, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub per_second: VecDeque<f64>,
    pub p99_seconds: VecDeque<f64>,
}

#[derive(Debug, Clone)]
pub struct App {
    /// `--connect`, shown in the header.
    pub endpoint: String,
    pub screen: Screen,
    pub data: Data,
    pub link: Link,
    /// Refreshes applied so far.
    pub refreshes: u64,
    pub paused: bool,
    /// The newest data received while paused, applied on resume.
    held: Option<Box<Data>>,
    /// Selected row per screen.
    pub selected: [usize; 5],
    /// Index into `Screen::sort_keys` per screen.
    pub sort: [usize; 5],
    /// Applied filter (case-insensitive substring), empty for none.
    pub filter: String,
    /// The filter being typed after `/`.
    pub editing: Option<String>,
    pub help: bool,
    /// The process drilled into: scopes the process, requests and upstreams screens.
    pub focus: Option<u32>,
    /// Where Esc returns from a drill-down.
    back: Option<Screen>,
    pub history: BTreeMap<u32, History>,
    pub quit: bool,
}

impl App {
    pub fn new(endpoint: impl Into<String>) -> App {
        App {
            endpoint: endpoint.into(),
            screen: Screen::Overview,
            data: Data::default(),
            link: Link::Connecting,
            refreshes: 0,
            paused: false,
            held: None,
            selected: [0; 5],
            sort: [0; 5],
            filter: String::new(),
            editing: None,
            help: false,
            focus: None,
            back: None,
            history: BTreeMap::new(),
            quit: false,
        }
    }

    pub fn sort_key(&self, screen: Screen) -> &'static str {
        let keys = screen.sort_keys();
        keys[self.sort[screen.index()] % keys.len()]
    }

    /// Takes a refresh: new data (held back while paused) or a failure (the old data stays).
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Failed(error) => {
                let failures = match &self.link {
                    Link::Down { failures, .. } => failures.saturating_add(1),
                    _ => 1,
                };
                self.link = Link::Down { error, failures };
            }
            Update::Data(data) => {
                self.link = Link::Up;
                if self.paused {
                    self.held = Some(data);
                } else {
                    self.show(*data);
                }
            }
        }
    }

    fn show(&mut self, data: Data) {
        self.refreshes += 1;
        self.history.retain(|pid, _| data.snapshot.processes.iter().any(|p| p.pid == *pid));
        for p in &data.snapshot.processes {
            let h = self.history.entry(p.pid).or_default();
            for (series, value) in
                [(&mut h.per_second, p.inbound.per_second), (&mut h.p99_seconds, p.inbound.p99_seconds)]
            {
                if series.len() == HISTORY {
                    series.pop_front();
                }
                series.push_back(value.unwrap_or(0.0));
            }
        }
        self.data = data;
        self.clamp();
    }

    /// Changes the state for one key press.
    pub fn on_key(&mut self, key: Key) {
        if key == Key::Interrupt {
            self.quit = true;
            return;
        }
        if let Some(text) = &mut self.editing {
            match key {
                Key::Enter => {
                    self.filter = text.trim().to_owned();
                    self.editing = None;
                    self.selected = [0; 5];
                }
                Key::Esc => self.editing = None,
                Key::Backspace => {
                    text.pop();
                }
                Key::Char(c) if !c.is_control() => text.push(c),
                _ => {}
            }
            return;
        }
        if self.help {
            // Any key closes help; q still quits.
            self.help = false;
            if key == Key::Char('q') {
                self.quit = true;
            }
            return;
        }
        let i = self.screen.index();
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('?') => self.help = true,
            Key::Char('p') => {
                self.paused = !self.paused;
                if !self.paused
                    && let Some(data) = self.held.take()
                {
                    self.show(*data);
                }
            }
            Key::Char('s') => {
                self.sort[i] = (self.sort[i] + 1) % self.screen.sort_keys().len();
                self.selected[i] = 0;
            }
            Key::Char('/') => self.editing = Some(self.filter.clone()),
            Key::Tab => self.switch(Screen::ALL[(i + 1) % Screen::ALL.len()]),
            Key::BackTab => self.switch(Screen::ALL[(i + Screen::ALL.len() - 1) % Screen::ALL.len()]),
            Key::Char(c @ '1'..='5') => self.switch(Screen::ALL[c as usize - '1' as usize]),
            Key::Up | Key::Char('k') => self.selected[i] = self.selected[i].saturating_sub(1),
            Key::Down | Key::Char('j') => self.selected[i] = self.selected[i].saturating_add(1),
            Key::PageUp => self.selected[i] = self.selected[i].saturating_sub(PAGE),
            Key::PageDown => self.selected[i] = self.selected[i].saturating_add(PAGE),
            Key::Home | Key::Char('g') => self.selected[i] = 0,
            Key::End | Key::Char('G') => self.selected[i] = usize::MAX,
            Key::Enter => self.drill(),
            Key::Esc => {
                if self.focus.is_some() || self.back.is_some() {
                    self.focus = None;
                    let back = self.back.take().unwrap_or(Screen::Overview);
                    self.screen = back;
                } else if !self.filter.is_empty() {
                    self.filter.clear();
                }
            }
            _ => {}
        }
        self.clamp();
    }

    fn switch(&mut self, screen: Screen) {
        self.screen = screen;
    }

    fn drill(&mut self) {
        let pid = match self.screen {
            Screen::Overview => self.process_rows().get(self.selected[0]).map(|r| r.pid),
            Screen::Alerts => self.alert_rows().get(self.selected[4]).map(|a| a.process.pid),
            _ => None,
        };
        if let Some(pid) = pid {
            self.back = Some(self.screen);
            self.focus = Some(pid);
            self.screen = Screen::Process;
            self.selected[Screen::Process.index()] = 0;
        }
    }

    fn clamp(&mut self) {
        for screen in Screen::ALL {
            let n = self.rows(screen);
            let s = &mut self.selected[screen.index()];
            *s = (*s).min(n.saturating_sub(1));
        }
    }

    /// Selectable rows on a screen.
    pub fn rows(&self, screen: Screen) -> usize {
        match screen {
            Screen::Overview => self.process_rows().len(),
            Screen::Process => self.loop_rows().len(),
            Screen::Requests => self.request_rows().len(),
            Screen::Upstreams => self.upstream_rows().len(),
            Screen::Alerts => self.alert_rows().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::model::{Alert, AlertProcess, EventLoop, Process, SlowRequest, Snapshot, Window};

    fn process(pid: u32, comm: &str, rps: f64) -> Process {
        Process {
            pid,
            comm: comm.into(),
            inbound: Window { per_second: Some(rps), p99_seconds: Some(rps / 1e4), ..Window::default() },
            in_flight: Some(pid as u64),
            ..Process::default()
        }
    }

    fn data(procs: Vec<Process>, alerts: Vec<Alert>) -> Box<Data> {
        let event_loops = procs
            .iter()
            .map(|p| EventLoop {
                pid: p.pid,
                comm: p.comm.clone(),
                thread: format!("{}-loop", p.comm),
                tid: None,
                utilization: Some(0.5),
            })
            .collect();
        let slowest_requests = procs
            .iter()
            .map(|p| SlowRequest {
                pid: p.pid,
                process: p.comm.clone(),
                path: "/x".into(),
                duration_seconds: Some(0.1),
                ..SlowRequest::default()
            })
            .collect();
        Box::new(Data {
            snapshot: Snapshot { processes: procs, event_loops, slowest_requests, ..Snapshot::default() },
            alerts,
        })
    }

    fn alert(pid: u32, kind: &str, subject: &str, state: &str) -> Alert {
        Alert {
            evidence: crate::api::v1::AlertEvidence::from_wire(kind.into(), serde_json::Value::Null),
            subject: subject.into(),
            state: state.into(),
            process: AlertProcess { pid, comm: "gw".into() },
            ..Alert::default()
        }
    }

    fn app() -> App {
        let mut app = App::new("http://127.0.0.1:9464");
        app.apply(Update::Data(data(
            vec![process(1, "nginx", 100.0), process(2, "envoy", 300.0), process(3, "java", 200.0)],
            vec![
                alert(3, "PoolSaturated", "rpc-pool-*", "firing"),
                alert(2, "EventLoopBlocked", "gw-worker-0", "resolved"),
            ],
        )));
        app
    }

    fn names(app: &App) -> Vec<&str> {
        app.process_rows().iter().map(|r| r.comm).collect()
    }

    #[test]
    fn sort_cycles_through_the_keys_and_back() {
        let mut app = app();
        assert_eq!(names(&app), ["envoy", "java", "nginx"], "by req/s");
        app.on_key(Key::Char('s'));
        assert_eq!(app.sort_key(Screen::Overview), "p99");
        app.on_key(Key::Char('s'));
        assert_eq!(names(&app), ["java", "envoy", "nginx"], "by in-flight (= pid here)");
        app.on_key(Key::Char('s'));
        app.on_key(Key::Char('s'));
        assert_eq!(app.sort_key(Screen::Overview), "alerts");
        assert_eq!(names(&app)[0], "java", "the one open alert");
        app.on_key(Key::Char('s'));
        assert_eq!(names(&app), ["envoy", "java", "nginx"], "by name");
        app.on_key(Key::Char('s'));
        assert_eq!(app.sort_key(Screen::Overview), "req/s", "wrapped around");
        assert_eq!(app.sort[Screen::Alerts.index()], 0, "other screens keep their sort");
    }

    #[test]
    fn filter_narrows_the_list_and_esc_cancels_typing() {
        let mut app = app();
        app.on_key(Key::Char('/'));
        for c in "NGI".chars() {
            app.on_key(Key::Char(c));
        }
        assert_eq!(app.editing.as_deref(), Some("NGI"));
        assert_eq!(names(&app).len(), 3, "not applied while typing");
        app.on_key(Key::Enter);
        assert_eq!(names(&app), ["nginx"]);
        // Typing q in the filter does not quit; Esc abandons the new text.
        app.on_key(Key::Char('/'));
        app.on_key(Key::Char('q'));
        assert!(!app.quit);
        app.on_key(Key::Esc);
        assert_eq!(app.filter, "NGI");
        app.on_key(Key::Char('4'));
        assert_eq!(app.rows(Screen::Upstreams), 0);
        app.on_key(Key::Char('5'));
        app.on_key(Key::Char('/'));
        app.on_key(Key::Backspace);
        app.on_key(Key::Backspace);
        app.on_key(Key::Backspace);
        app.on_key(Key::Char('r'));
        app.on_key(Key::Char('p'));
        app.on_key(Key::Char('c'));
        app.on_key(Key::Enter);
        assert_eq!(app.alert_rows().iter().map(|a| a.subject.as_str()).collect::<Vec<_>>(), ["rpc-pool-*"]);
        app.on_key(Key::Esc);
        assert!(app.filter.is_empty(), "Esc with nothing to leave clears the filter");
        assert_eq!(app.alert_rows().len(), 2);
    }

    #[test]
    fn enter_drills_in_and_esc_leaves() {
        let mut app = app();
        app.on_key(Key::Down); // java
        app.on_key(Key::Enter);
        assert_eq!((app.screen, app.focus), (Screen::Process, Some(3)));
        assert_eq!(app.loop_rows().iter().map(|l| l.thread.as_str()).collect::<Vec<_>>(), ["java-loop"]);
        app.on_key(Key::Char('3'));
        let pids: Vec<u32> = app.request_rows().iter().map(|r| r.pid).collect();
        assert_eq!(pids, [3], "the drill-down scopes other screens");
        app.on_key(Key::Esc);
        assert_eq!((app.screen, app.focus), (Screen::Overview, None));
        // From an alert: to its process, and back to the alerts.
        app.on_key(Key::Char('5'));
        app.on_key(Key::Enter);
        assert_eq!((app.screen, app.focus), (Screen::Process, Some(3)), "firing alert first");
        app.on_key(Key::Esc);
        assert_eq!(app.screen, Screen::Alerts);
    }

    #[test]
    fn pause_holds_new_data_until_resumed() {
        let mut app = app();
        app.on_key(Key::Char('p'));
        app.apply(Update::Data(data(vec![process(9, "haproxy", 1.0)], vec![])));
        assert_eq!(names(&app), ["envoy", "java", "nginx"], "paused: the old data stays");
        assert_eq!(app.link, Link::Up);
        app.on_key(Key::Char('p'));
        assert_eq!(names(&app), ["haproxy"], "resumed: the newest data is shown");
        assert_eq!(app.refreshes, 2);
    }

    #[test]
    fn selection_stays_within_the_rows() {
        let mut app = app();
        for _ in 0..10 {
            app.on_key(Key::Char('j'));
        }
        assert_eq!(app.selected[0], 2);
        app.on_key(Key::End);
        assert_eq!(app.selected[0], 2);
        app.apply(Update::Data(data(vec![process(1, "nginx", 1.0)], vec![])));
        assert_eq!(app.selected[0], 0, "clamped when rows disappear");
        app.on_key(Key::Up);
        assert_eq!(app.selected[0], 0);
    }

    #[test]
    fn failures_keep_the_data_and_count() {
        let mut app = app();
        app.apply(Update::Failed("connection refused".into()));
        app.apply(Update::Failed("connection refused".into()));
        assert_eq!(app.link, Link::Down { error: "connection refused".into(), failures: 2 });
        assert_eq!(names(&app).len(), 3);
        app.apply(Update::Data(data(vec![], vec![])));
        assert_eq!(app.link, Link::Up);
    }

    #[test]
    fn history_is_bounded_and_follows_processes() {
        let mut app = App::new("x");
        for i in 0..(HISTORY + 5) {
            app.apply(Update::Data(data(vec![process(1, "nginx", i as f64)], vec![])));
        }
        let h = &app.history[&1];
        assert_eq!(h.per_second.len(), HISTORY);
        assert_eq!(h.per_second.back(), Some(&((HISTORY + 4) as f64)));
        app.apply(Update::Data(data(vec![process(2, "envoy", 1.0)], vec![])));
        assert!(!app.history.contains_key(&1), "an exited process's history is dropped");
    }

    #[test]
    fn help_and_quit() {
        let mut app = app();
        app.on_key(Key::Char('?'));
        assert!(app.help);
        app.on_key(Key::Char('j'));
        assert!(!app.help && app.selected[0] == 0, "a key closes help and does nothing else");
        app.on_key(Key::Char('q'));
        assert!(app.quit);
        let mut app = self::app();
        app.on_key(Key::Char('/'));
        app.on_key(Key::Interrupt);
        assert!(app.quit, "Ctrl-C quits even while typing");
    }

    #[test]
    fn tab_cycles_screens() {
        let mut app = app();
        let mut seen = vec![app.screen];
        for _ in 0..5 {
            app.on_key(Key::Tab);
            seen.push(app.screen);
        }
        assert_eq!(
            seen,
            [Screen::Overview, Screen::Process, Screen::Requests, Screen::Upstreams, Screen::Alerts, Screen::Overview]
        );
        app.on_key(Key::BackTab);
        assert_eq!(app.screen, Screen::Alerts);
    }
}
