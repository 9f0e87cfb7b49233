//! The per-process state `/api/v1/snapshot` serves.

use std::collections::BTreeMap;

use super::{Collector, monotonic_ns};
use crate::procfs;

impl Collector {
    /// The current per-process state that `/api/v1/snapshot` serves (version 1).
    pub fn snapshot(&self) -> serde_json::Value {
        let loops: Vec<serde_json::Value> = self
            .loops
            .iter()
            .map(|l| {
                serde_json::json!({
                    "pid": l.thread.tgid, "comm": l.thread.comm, "thread": l.thread.name,
                    "tid": l.thread.tid, "utilization": l.utilization,
                })
            })
            .collect();
        let now = monotonic_ns();
        // Every target, with or without HTTP traffic.
        let mut per_process = self.requests.per_process(now);
        for pid in self.cpu_seen.keys() {
            per_process.entry(*pid).or_default();
        }
        let processes: Vec<serde_json::Value> = per_process
            .into_iter()
            .map(|(pid, requests)| {
                let in_flight: Vec<serde_json::Value> = requests
                    .in_flight_oldest
                    .iter()
                    .map(|r| {
                        let mut value = serde_json::json!(r);
                        value["thread_name"] = serde_json::json!(procfs::thread_comm(pid, r.thread));
                        value
                    })
                    .collect();
                let comm = procfs::comm(pid).unwrap_or_default();
                let groups = self.thread_groups_of(&comm);
                serde_json::json!({
                    "pid": pid, "comm": comm, "cpu": self.cpu_cores.get(&pid), "thread_groups": groups,
                    "inbound": requests.inbound,
                    "outbound": requests.outbound, "in_flight": requests.in_flight,
                    "in_flight_oldest": in_flight, "upstreams": requests.upstreams,
                    "listeners": self.request_queues.listeners_of(pid),
                })
            })
            .collect();
        serde_json::json!({
            "version": 1,
            "targets": self.map_entries.get("targets").copied().unwrap_or(0),
            "threads": self.map_entries.get("threads").copied().unwrap_or(0),
            "event_loops": loops,
            "processes": processes,
            "slowest_requests": self.requests.slowest.list(),
        })
    }

    /// Thread groups of processes named `comm`, by state now (as in `pool_threads`).
    fn thread_groups_of(&self, comm: &str) -> Vec<serde_json::Value> {
        let mut groups: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
        for ((process, group, state), count) in &self.thread_states {
            if process == comm {
                *groups.entry(group).or_default().entry(state).or_default() += count;
            }
        }
        groups
            .into_iter()
            .map(|(name, states)| {
                let get = |s: &str| states.get(s).copied().unwrap_or(0);
                serde_json::json!({
                    "name": name, "threads": states.values().sum::<usize>(), "running": get("running"),
                    "runnable": get("runnable"), "blocked": get("blocked"), "idle": get("idle"),
                })
            })
            .collect()
    }
}
