//! Gathers, each tick, what the RequestQueueing detector judges, per target that listens: the
//! connections holding request bytes unread past the threshold (the kernel's per-socket arrival
//! time, looked up for the tracker's idle inbound connections), accept queues (socket
//! diagnostics, or /proc in another network namespace) and listen overflows (/proc), and the
//! socket queue waits of requests completed in the window.
//!
//! Processes sharing a listener (nginx's master and workers) are one: facts go to the lowest pid.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::api::v1;
use crate::host::procfs;
use crate::probes::{ProbeError, Probes};
use crate::state::requests::RequestTracker;
use crate::state::requests::queueing::ListenerKey;
use crate::state::requests::stats::ClientImpact;

/// SOCKS lookups per tick at most (a syscall each); more idle connections are looked at in turn.
const LOOKUPS_PER_TICK: usize = 2048;
/// Accept queues are read this often when nothing waits. In another network namespace than the
/// daemon's they come from /proc/PID/net/tcp{,6}, and reading it up to the end of its listening
/// rows still makes the kernel walk its whole established-connection hash (8 % of the daemon's
/// CPU under load when read every tick); in its own, from socket diagnostics (`sock_diag`).
const ACCEPT_QUEUE_EVERY: u64 = 10;

#[derive(Debug, Default)]
pub struct RequestQueues {
    /// Per network namespace: (when, its ListenOverflows) samples over the window.
    overflow_samples: HashMap<u32, VecDeque<(u64, u64)>>,
    /// What the last gathering found, for the detector, metrics and the snapshot.
    pub last: Vec<QueueFacts>,
    /// Accept queue per (owner, port) as last read, and gatherings since.
    accept_queues: HashMap<(u32, u16), u32>,
    gatherings: u64,
    /// When the last gathering ran (CLOCK_MONOTONIC), and how many exchanges had been recorded
    /// then: those recorded since are the last tick's.
    last_gathered_ns: Option<u64>,
    last_appended: Option<u64>,
    /// Per owner, its clients' impact gathering by gathering.
    impacts: HashMap<u32, ImpactWindow>,
}

/// An owner's client impact per gathering, over the window. Each gathering walks only the
/// requests recorded since the last: walking the whole window (some 100k requests at 10k
/// proxied requests/s) for every owner at every tick was a tenth of the daemon's work there. The
/// window's edge moves by whole gatherings: it holds those that began within it.
#[derive(Debug, Default)]
struct ImpactWindow {
    /// (when the gathering's stretch began, the impact in it), oldest first.
    gatherings: VecDeque<(u64, ClientImpact)>,
}

impl ImpactWindow {
    /// Adds the stretch from `began_ns`, forgets those that began before `since_ns`, and returns
    /// the impact over the ones left.
    fn add(&mut self, began_ns: u64, impact: ClientImpact, since_ns: u64) -> ClientImpact {
        self.gatherings.push_back((began_ns, impact));
        while self.gatherings.front().is_some_and(|(began, _)| *began < since_ns) {
            self.gatherings.pop_front();
        }
        self.gatherings.iter().fold(ClientImpact::default(), |total, (_, impact)| ClientImpact {
            requests: total.requests + impact.requests,
            delayed_in_socket: total.delayed_in_socket + impact.delayed_in_socket,
            max_socket_queue_seconds: total.max_socket_queue_seconds.max(impact.max_socket_queue_seconds),
            refused: total.refused + impact.refused,
        })
    }
}

/// Waiting connections per listener: (count, oldest unread age).
type Waiting = HashMap<ListenerKey, (u32, u64)>;

impl RequestQueues {
    pub fn gather(
        &mut self,
        tracker: &mut RequestTracker,
        probes: &Probes,
        now_ns: u64,
        window_ns: u64,
        threshold_ns: u64,
    ) -> Result<(), ProbeError> {
        let waiting = waiting_connections(tracker, probes, now_ns, threshold_ns)?;
        // Owner pid → (its listeners, every pid sharing them).
        let mut owners: BTreeMap<u32, (Vec<ListenerKey>, BTreeSet<u32>)> = BTreeMap::new();
        for (listener, pids) in tracker.listeners() {
            let Some(&owner) = pids.first() else { continue };
            let entry = owners.entry(owner).or_default();
            entry.0.push(listener);
            entry.1.extend(pids);
        }
        let namespaces: BTreeSet<u32> =
            owners.values().flat_map(|(listeners, _)| listeners.iter().map(|(netns, _)| *netns)).collect();
        self.overflow_samples.retain(|netns, _| namespaces.contains(netns));
        self.accept_queues.retain(|(pid, _), _| owners.contains_key(pid));
        self.impacts.retain(|pid, _| owners.contains_key(pid));
        let since = now_ns.saturating_sub(window_ns);
        let tick_start = self.last_gathered_ns.replace(now_ns).unwrap_or(since).max(since);
        let last_appended = self.last_appended.replace(tracker.stats.appended());
        let read_queues = self.gatherings.is_multiple_of(ACCEPT_QUEUE_EVERY) || !waiting.is_empty();
        self.gatherings += 1;
        // A namespace's tables are read once a gathering, however many owners listen in it.
        let mut rows_of: HashMap<u32, Vec<procfs::ListenRow>> = HashMap::new();
        let mut overflows_of: HashMap<u32, u64> = HashMap::new();
        self.last = owners
            .into_iter()
            .map(|(owner, (ports, sharers))| {
                // An owner's listeners are all in its own namespace.
                let netns = ports.first().map_or(0, |(netns, _)| *netns);
                if read_queues {
                    let rows =
                        rows_of.entry(netns).or_insert_with(|| crate::host::sock_diag::listen_rows_in(netns, owner));
                    for &(_, port) in &ports {
                        let queued = rows.iter().filter(|r| r.port == port).map(|r| r.accept_queue).sum();
                        self.accept_queues.insert((owner, port), queued);
                    }
                }
                let listeners = ports
                    .iter()
                    .map(|&(netns, port)| {
                        let (count, oldest) = waiting.get(&(netns, port)).copied().unwrap_or_default();
                        let accept_queue = self.accept_queues.get(&(owner, port)).copied().unwrap_or(0);
                        ListenerFacts { port, accept_queue, waiting: count, oldest_unread_ns: oldest }
                    })
                    .collect();
                let sharers: Vec<u32> = sharers.into_iter().collect();
                let stats = &tracker.stats;
                let whole_window = || stats.impact_of(&sharers, since, threshold_ns);
                let last_tick = match last_appended {
                    Some(count) => stats.impact_of_newest(&sharers, count, threshold_ns),
                    None => whole_window(),
                };
                // An owner seen for the first time gets the whole window once; its stretch began
                // at the window's start, so the window never reaches further back than it.
                let (began, stretch) = if self.impacts.contains_key(&owner) {
                    (tick_start, last_tick.clone())
                } else {
                    (since, whole_window())
                };
                let impact = self.impacts.entry(owner).or_default().add(began, stretch, since);
                QueueFacts {
                    pid: owner,
                    comm: procfs::comm(owner).unwrap_or_default(),
                    sharers,
                    listeners,
                    window_ns,
                    completed: impact.requests,
                    delayed: impact.delayed_in_socket,
                    delayed_last_tick: last_tick.delayed_in_socket,
                    max_queue_ns: (impact.max_socket_queue_seconds * 1e9) as u64,
                    refused: impact.refused,
                    listen_overflows: *overflows_of
                        .entry(netns)
                        .or_insert_with(|| self.overflows_in_window(netns, owner, now_ns, window_ns)),
                }
            })
            .collect();
        Ok(())
    }

    /// The listeners of `pid` for the snapshot (empty for a process that does not own one).
    pub fn listeners_of(&self, pid: u32) -> Vec<v1::Listener> {
        self.last
            .iter()
            .filter(|facts| facts.pid == pid)
            .flat_map(|facts| &facts.listeners)
            .map(ListenerFacts::to_wire)
            .collect()
    }

    /// ListenOverflows of a namespace over the window, read through a process in it (the counter
    /// is namespace-wide: another listener's overflows count too, which the evidence says by its
    /// name).
    fn overflows_in_window(&mut self, netns: u32, pid: u32, now_ns: u64, window_ns: u64) -> u64 {
        let Some(value) = procfs::listen_overflows(pid) else { return 0 };
        let samples = self.overflow_samples.entry(netns).or_default();
        samples.push_back((now_ns, value));
        while samples.len() > 1 && samples.front().is_some_and(|(t, _)| now_ns.saturating_sub(*t) > window_ns) {
            samples.pop_front();
        }
        samples.front().map_or(0, |(_, first)| value.saturating_sub(*first))
    }
}

/// Per listening port, the idle inbound connections whose unread bytes arrived at least
/// `threshold_ns` ago.
fn waiting_connections(
    tracker: &mut RequestTracker,
    probes: &Probes,
    now_ns: u64,
    threshold_ns: u64,
) -> Result<Waiting, ProbeError> {
    let candidates = tracker.unread_candidates(now_ns, threshold_ns, LOOKUPS_PER_TICK);
    let listener_of: HashMap<u64, ListenerKey> = candidates.iter().map(|c| (c.sk, c.listener)).collect();
    let sks: Vec<u64> = candidates.iter().map(|c| c.sk).collect();
    let mut waiting = Waiting::new();
    for (sk, since) in probes.unread_since(&sks)? {
        let age = now_ns.saturating_sub(since);
        if age < threshold_ns {
            continue;
        }
        let Some(listener) = listener_of.get(&sk) else { continue };
        let entry = waiting.entry(*listener).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(age);
    }
    Ok(waiting)
}

/// One listening port of a process, now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListenerFacts {
    pub port: u16,
    /// Connections handshaken and not yet accepted.
    pub accept_queue: u32,
    /// Connections holding bytes unread for at least the threshold.
    pub waiting: u32,
    /// The age of the oldest unread bytes among them.
    pub oldest_unread_ns: u64,
}

/// A process that listens (the lowest pid of those sharing its listeners), now and over the
/// window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueFacts {
    pub pid: u32,
    pub comm: String,
    /// Every process sharing the listeners (nginx's master and workers), `pid` among them.
    pub sharers: Vec<u32>,
    pub listeners: Vec<ListenerFacts>,
    pub window_ns: u64,
    /// Inbound requests completed in the window, those whose bytes waited past the threshold
    /// before the gateway read them, and the longest such wait.
    pub completed: u64,
    pub delayed: u64,
    /// Of `delayed`, those completed in the last tick: the queueing is still going on.
    pub delayed_last_tick: u64,
    pub max_queue_ns: u64,
    /// 5xx answers or connections closed unanswered in the window.
    pub refused: u64,
    /// Connections the network namespace dropped in the window because an accept queue was full.
    pub listen_overflows: u64,
}

impl ListenerFacts {
    /// As the snapshot shows it, and the alert evidence too.
    pub fn to_wire(&self) -> v1::Listener {
        v1::Listener {
            port: self.port,
            accept_queue: Some(u64::from(self.accept_queue)),
            waiting: Some(u64::from(self.waiting)),
            oldest_unread_seconds: Some(secs(self.oldest_unread_ns)),
        }
    }
}

impl QueueFacts {
    pub fn waiting(&self) -> u32 {
        self.listeners.iter().map(|l| l.waiting).sum()
    }

    pub fn oldest_unread_ns(&self) -> u64 {
        self.listeners.iter().map(|l| l.oldest_unread_ns).max().unwrap_or(0)
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn impact(requests: u64, delayed: u64, max_queue_seconds: f64) -> ClientImpact {
        ClientImpact { requests, delayed_in_socket: delayed, max_socket_queue_seconds: max_queue_seconds, refused: 0 }
    }

    #[test]
    fn the_window_sums_the_gatherings_that_began_in_it() {
        let mut window = ImpactWindow::default();
        // A 5 s window, gathered every second from 10 s on; the first stretch covers the window.
        let total = window.add(5 * S, impact(40, 0, 0.0), 5 * S);
        assert_eq!(total, impact(40, 0, 0.0));
        let total = window.add(10 * S, impact(10, 2, 0.4), 6 * S);
        assert_eq!(total, impact(10, 2, 0.4), "the first stretch began before the window");
        for t in 11..=14 {
            window.add(t * S, impact(10, 0, 0.0), (t - 4) * S);
        }
        assert_eq!(window.add(15 * S, impact(10, 1, 0.2), 11 * S), impact(50, 1, 0.2), "began at 11..=15");
        // The delayed requests of the stretch from 10 s are out of the window once it has passed.
        assert_eq!(window.add(16 * S, impact(10, 0, 0.0), 12 * S), impact(50, 1, 0.2));
        assert_eq!(window.gatherings.len(), 5);
    }
}
