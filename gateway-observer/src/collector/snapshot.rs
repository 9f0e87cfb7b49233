//! The per-process state `/api/v1/snapshot` serves, built as [`v1::Snapshot`]. Every wire struct
//! is written out field by field (no `..Default::default()`), so a field added to the wire type
//! does not compile until the daemon fills it.

use std::collections::BTreeMap;

use super::Collector;
use crate::{
    api::v1,
    host::procfs,
    state::requests::{InFlightRequest, UpstreamPeer, slowest::SlowRequest, stats::WindowSummary},
};

impl Collector {
    /// The current per-process state that `/api/v1/snapshot` serves.
    pub fn snapshot(&self) -> v1::Snapshot {
        let event_loops = self
            .loops
            .iter()
            .map(|l| v1::EventLoop {
                pid: l.thread.tgid,
                comm: l.thread.comm.clone(),
                thread: l.thread.name.clone(),
                tid: Some(l.thread.tid),
                utilization: Some(l.utilization),
            })
            .collect();
        let now = self.tick.mono_ns;
        // Every target, with or without HTTP traffic.
        let mut per_process = self.requests.per_process(now);
        for pid in self.cpu_seen.keys() {
            per_process.entry(*pid).or_default();
        }
        let processes = per_process
            .into_iter()
            .map(|(pid, requests)| {
                let comm = procfs::comm(pid).unwrap_or_default();
                v1::Process {
                    pid,
                    thread_groups: self.thread_groups_of(&comm),
                    comm,
                    cpu: self.cpu_cores.get(&pid).copied(),
                    inbound: window(&requests.inbound),
                    outbound: window(&requests.outbound),
                    in_flight: Some(requests.in_flight as u64),
                    in_flight_oldest: requests.in_flight_oldest.into_iter().map(|r| in_flight(pid, r)).collect(),
                    upstreams: requests.upstreams.into_iter().map(upstream).collect(),
                    listeners: self.request_queues.listeners_of(pid),
                }
            })
            .collect();
        v1::Snapshot {
            version: Some(v1::VERSION),
            targets: Some(self.map_entries.get("targets").copied().unwrap_or(0) as u64),
            threads: Some(self.map_entries.get("threads").copied().unwrap_or(0) as u64),
            event_loops,
            processes,
            slowest_requests: self.requests.slowest.list().iter().map(slow_request).collect(),
        }
    }

    /// Thread groups of processes named `comm`, by state now (as in `pool_threads`).
    fn thread_groups_of(&self, comm: &str) -> Vec<v1::ThreadGroup> {
        let mut groups: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
        for ((process, group, state), count) in &self.thread_states {
            if process == comm {
                *groups.entry(group).or_default().entry(state).or_default() += count;
            }
        }
        groups
            .into_iter()
            .map(|(name, states)| {
                let get = |s: &str| Some(states.get(s).copied().unwrap_or(0) as u64);
                v1::ThreadGroup {
                    name: name.to_owned(),
                    threads: Some(states.values().sum::<usize>() as u64),
                    running: get("running"),
                    runnable: get("runnable"),
                    blocked: get("blocked"),
                    idle: get("idle"),
                    blocked_seconds_by_reason: BTreeMap::new(),
                    cpu: None,
                }
            })
            .collect()
    }
}

fn window(w: &WindowSummary) -> v1::Window {
    v1::Window {
        requests: Some(w.requests),
        per_second: Some(w.per_second),
        refused: Some(w.refused),
        p50_seconds: Some(w.p50_seconds),
        p90_seconds: Some(w.p90_seconds),
        p99_seconds: Some(w.p99_seconds),
        max_seconds: Some(w.max_seconds),
    }
}

fn in_flight(pid: u32, r: InFlightRequest) -> v1::InFlight {
    v1::InFlight {
        thread: Some(r.thread),
        thread_name: procfs::thread_comm(pid, r.thread),
        method: r.method.to_owned(),
        path: r.path,
        age_seconds: Some(r.age_seconds),
        socket_queue_seconds: r.socket_queue_seconds,
        response_started: Some(r.response_started),
    }
}

fn upstream(u: UpstreamPeer) -> v1::Upstream {
    v1::Upstream {
        peer: u.peer,
        connections: Some(u.connections as u64),
        outstanding: Some(u.outstanding as u64),
        oldest_age_seconds: Some(u.oldest_age_seconds),
        retransmits: Some(u.retransmits),
        one_way: Some(u.one_way as u64),
    }
}

fn slow_request(r: &SlowRequest) -> v1::SlowRequest {
    let b = &r.breakdown;
    v1::SlowRequest {
        pid: r.pid,
        process: r.process.clone(),
        thread: Some(r.thread),
        method: r.method.to_owned(),
        path: r.path.clone(),
        status: r.status,
        duration_seconds: Some(r.duration_seconds),
        age_seconds: Some(r.age_seconds),
        breakdown: v1::Breakdown {
            socket_queue_seconds: b.socket_queue_seconds,
            before_upstream_seconds: b.before_upstream_seconds,
            upstream_seconds: b.upstream_seconds,
            response_write_seconds: b.response_write_seconds,
        },
        upstream: r.upstream.as_ref().map(|u| v1::UpstreamCall { peer: u.peer.to_string(), status: u.status }),
    }
}
