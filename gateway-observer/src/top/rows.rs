//! The rows each screen lists, derived from [`App`]'s data, filter, sort key and drill-down.
//! Keys (selection bounds, Enter) and views call the same functions, so the row a key selects is
//! the row drawn highlighted.

use std::collections::BTreeMap;

use super::{
    app::{App, Screen},
    model::{Alert, EventLoop, InFlight, Process, SlowRequest, ThreadGroup, Upstream},
};

/// One row of the overview: a process the daemon knows about from any part of the snapshot.
#[derive(Debug, Clone)]
pub struct ProcessRow<'a> {
    pub pid: u32,
    pub comm: &'a str,
    /// Its request summary, if it has served any.
    pub process: Option<&'a Process>,
    pub loops: usize,
    pub loop_max: Option<f64>,
    pub open_alerts: usize,
}

impl App {
    fn matches(&self, fields: &[&str]) -> bool {
        self.filter.is_empty() || {
            let needle = self.filter.to_lowercase();
            fields.iter().any(|f| f.to_lowercase().contains(&needle))
        }
    }

    /// Every process in the snapshot (served requests, has event loops, or has an open alert),
    /// filtered by name or pid, sorted by the overview's sort key.
    pub fn process_rows(&self) -> Vec<ProcessRow<'_>> {
        let snap = &self.data.snapshot;
        let mut rows: BTreeMap<u32, ProcessRow<'_>> = BTreeMap::new();
        let row = |pid: u32| ProcessRow { pid, comm: "", process: None, loops: 0, loop_max: None, open_alerts: 0 };
        for p in &snap.processes {
            rows.entry(p.pid).or_insert_with(|| row(p.pid)).process = Some(p);
        }
        for l in &snap.event_loops {
            let r = rows.entry(l.pid).or_insert_with(|| row(l.pid));
            r.loops += 1;
            r.loop_max = match (r.loop_max, l.utilization) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if r.comm.is_empty() {
                r.comm = &l.comm;
            }
        }
        for a in self.data.alerts.iter().filter(|a| a.is_open()) {
            let r = rows.entry(a.process.pid).or_insert_with(|| row(a.process.pid));
            r.open_alerts += 1;
            if r.comm.is_empty() {
                r.comm = &a.process.comm;
            }
        }
        let mut rows: Vec<ProcessRow<'_>> = rows
            .into_values()
            .map(|mut r| {
                if let Some(p) = r.process.filter(|p| !p.comm.is_empty()) {
                    r.comm = &p.comm;
                }
                r
            })
            .filter(|r| self.matches(&[r.comm, &r.pid.to_string()]))
            .collect();
        let rate = |r: &ProcessRow<'_>| r.process.and_then(|p| p.inbound.per_second).unwrap_or(-1.0);
        let p99 = |r: &ProcessRow<'_>| r.process.and_then(|p| p.inbound.p99_seconds).unwrap_or(-1.0);
        let in_flight = |r: &ProcessRow<'_>| r.process.and_then(|p| p.in_flight).unwrap_or(0);
        match self.sort_key(Screen::Overview) {
            "p99" => rows.sort_by(|a, b| p99(b).total_cmp(&p99(a))),
            "in-flight" => rows.sort_by_key(|r| std::cmp::Reverse(in_flight(r))),
            "loop util" => rows.sort_by(|a, b| b.loop_max.unwrap_or(-1.0).total_cmp(&a.loop_max.unwrap_or(-1.0))),
            "alerts" => rows.sort_by_key(|r| std::cmp::Reverse(r.open_alerts)),
            "name" => rows.sort_by(|a, b| a.comm.cmp(b.comm).then(a.pid.cmp(&b.pid))),
            _ => rows.sort_by(|a, b| rate(b).total_cmp(&rate(a))),
        }
        rows
    }

    /// The process the process screen shows: the one drilled into, else the overview's selection.
    pub fn focus_pid(&self) -> Option<u32> {
        self.focus.or_else(|| self.process_rows().get(self.selected[0]).map(|r| r.pid))
    }

    pub fn focus_process(&self) -> Option<&Process> {
        let pid = self.focus_pid()?;
        self.data.snapshot.processes.iter().find(|p| p.pid == pid)
    }

    /// In scope of the drill-down (everything when there is none).
    fn in_scope(&self, pid: u32) -> bool {
        self.focus.is_none_or(|f| f == pid)
    }

    /// Event loops of the focused process.
    pub fn loop_rows(&self) -> Vec<&EventLoop> {
        let pid = self.focus_pid();
        let mut rows: Vec<&EventLoop> = self
            .data
            .snapshot
            .event_loops
            .iter()
            .filter(|l| pid.is_none_or(|p| p == l.pid) && self.matches(&[&l.thread, &l.comm]))
            .collect();
        match self.sort_key(Screen::Process) {
            "name" => rows.sort_by(|a, b| a.thread.cmp(&b.thread)),
            // Utilization is the event-loop analogue of blocked time.
            _ => rows.sort_by(|a, b| b.utilization.unwrap_or(-1.0).total_cmp(&a.utilization.unwrap_or(-1.0))),
        }
        rows
    }

    /// Thread groups of the focused process, most blocked first unless sorted by name.
    pub fn group_rows(&self) -> Vec<&ThreadGroup> {
        let Some(p) = self.focus_process() else { return Vec::new() };
        let mut rows: Vec<&ThreadGroup> = p.thread_groups.iter().filter(|g| self.matches(&[&g.name])).collect();
        match self.sort_key(Screen::Process) {
            "name" => rows.sort_by(|a, b| a.name.cmp(&b.name)),
            "utilization" => rows.sort_by(|a, b| b.cpu.unwrap_or(-1.0).total_cmp(&a.cpu.unwrap_or(-1.0))),
            _ => rows.sort_by(|a, b| b.blocked_seconds().total_cmp(&a.blocked_seconds())),
        }
        rows
    }

    pub fn request_rows(&self) -> Vec<&SlowRequest> {
        let mut rows: Vec<&SlowRequest> = self
            .data
            .snapshot
            .slowest_requests
            .iter()
            .filter(|r| {
                let peer = r.upstream.as_ref().map_or("", |u| u.peer.as_str());
                self.in_scope(r.pid) && self.matches(&[&r.process, &r.method, &r.path, peer])
            })
            .collect();
        let key: fn(&SlowRequest) -> f64 = match self.sort_key(Screen::Requests) {
            "age" => |r| -r.age_seconds.unwrap_or(f64::MAX),
            "upstream" => |r| r.breakdown.upstream_seconds.unwrap_or(-1.0),
            _ => |r| r.duration_seconds.unwrap_or(-1.0),
        };
        rows.sort_by(|a, b| key(b).total_cmp(&key(a)));
        rows
    }

    /// In-flight requests, oldest first (not selectable).
    pub fn in_flight_rows(&self) -> Vec<(&Process, &InFlight)> {
        let mut rows: Vec<(&Process, &InFlight)> = self
            .data
            .snapshot
            .processes
            .iter()
            .filter(|p| self.in_scope(p.pid))
            .flat_map(|p| p.in_flight_oldest.iter().map(move |r| (p, r)))
            .filter(|(p, r)| self.matches(&[&p.comm, &r.method, &r.path, r.thread_name.as_deref().unwrap_or("")]))
            .collect();
        rows.sort_by(|a, b| b.1.age_seconds.unwrap_or(0.0).total_cmp(&a.1.age_seconds.unwrap_or(0.0)));
        rows
    }

    pub fn upstream_rows(&self) -> Vec<(&Process, &Upstream)> {
        let mut rows: Vec<(&Process, &Upstream)> = self
            .data
            .snapshot
            .processes
            .iter()
            .filter(|p| self.in_scope(p.pid))
            .flat_map(|p| p.upstreams.iter().map(move |u| (p, u)))
            .filter(|(p, u)| self.matches(&[&p.comm, &u.peer]))
            .collect();
        match self.sort_key(Screen::Upstreams) {
            "oldest" => rows.sort_by(|a, b| {
                b.1.oldest_age_seconds.unwrap_or(-1.0).total_cmp(&a.1.oldest_age_seconds.unwrap_or(-1.0))
            }),
            "connections" => rows.sort_by_key(|r| std::cmp::Reverse(r.1.connections.unwrap_or(0))),
            "peer" => rows.sort_by(|a, b| a.1.peer.cmp(&b.1.peer)),
            _ => rows.sort_by_key(|r| std::cmp::Reverse(r.1.outstanding.unwrap_or(0))),
        }
        rows
    }

    pub fn alert_rows(&self) -> Vec<&Alert> {
        let mut rows: Vec<&Alert> = self
            .data
            .alerts
            .iter()
            .filter(|a| self.matches(&[a.kind(), &a.subject, &a.summary, &a.process.comm, &a.state]))
            .collect();
        match self.sort_key(Screen::Alerts) {
            "since" => rows.sort_by(|a, b| b.since.cmp(&a.since)),
            "kind" => rows.sort_by(|a, b| a.kind().cmp(b.kind()).then(a.subject.cmp(&b.subject))),
            _ => rows.sort_by(|a, b| a.state_rank().cmp(&b.state_rank()).then(b.since.cmp(&a.since))),
        }
        rows
    }

    pub fn selected_alert(&self) -> Option<&Alert> {
        self.alert_rows().get(self.selected[Screen::Alerts.index()]).copied()
    }

    pub fn open_alerts(&self) -> usize {
        self.data.alerts.iter().filter(|a| a.is_open()).count()
    }
}
