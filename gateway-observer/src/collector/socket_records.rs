//! The socket ring's side of the collector: its records into the request tracker, what a drain
//! that lost records costs the connections that lost them, and the listening ports the kernel
//! and the tracker judge transfers by.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    time::Instant,
};

use gateway_observer_common::drop_index;

use super::{Collector, continued_walks};
use crate::{events::socket::SocketRecord, host::procfs, probes::ProbeError};

/// Re-read the ports targets listen on every this many ticks (and whenever a target appears).
const LISTEN_REFRESH_TICKS: u64 = 5;

/// Connections with requests in flight asked for their lost-record counts after a loss (a map
/// lookup each); past it, the rest are checked after the next loss.
const LOSS_CHECKS: usize = 1024;

impl Collector {
    /// After each drain of the socket ring: if the kernel lost records since the last one,
    /// responses may be among them. Each socket counts its own losses, so only the connections
    /// that lost records forget their requests in flight (see the tracker); if the kernel's
    /// counts cannot be read, every connection does. `drained`: records this drain read. A drain
    /// that read none found the ring empty, so nothing was written, and nothing lost (a loss
    /// needs a full ring), since the last one: the map syscalls are skipped (a drain runs 50
    /// times a second, also on a host with no requests).
    pub fn after_socket_drain(&mut self, drained: usize) {
        for late in self.continued_walks.after_drain() {
            self.handle_continued(&late);
        }
        let mid_way = self.requests.take_h2_mid_way();
        if !mid_way.is_empty() {
            self.h2_marks.tell(&mut self.probes, mid_way, Instant::now());
        }
        if drained == 0 {
            return;
        }
        if let Err(err) = self.probes.advance_ring_epoch() {
            tracing::debug!(error = %err, "cannot renew the targets' shares of the socket ring");
        }
        let Ok(lost) = self.probes.drop_count(drop_index::SOCKET_RINGBUF) else { return };
        if lost > self.socket_losses_seen {
            self.socket_losses_seen = lost;
            let sks = self.requests.sockets_in_flight(LOSS_CHECKS);
            match self.probes.sock_lost_counts(&sks) {
                Ok(counts) => self.requests.after_loss(&counts),
                Err(_) => self.requests.resync_after_loss(),
            };
        }
    }

    /// A record from the socket ring buffer; undecodable bytes are counted, never fatal. A
    /// walked record whose walk goes on waits for its continuations.
    pub fn handle_socket_bytes(&mut self, bytes: &[u8]) {
        match crate::events::socket::decode(bytes) {
            Ok(SocketRecord::Data(data)) if data.walk_continued => {
                if let Some(earlier) = self.continued_walks.hold(bytes, &data) {
                    self.handle_continued(&earlier);
                }
            }
            Ok(SocketRecord::H2Continued(more)) => {
                if let Some(whole) = self.continued_walks.extend(&more) {
                    self.handle_continued(&whole);
                }
            }
            Ok(record) => self.requests.handle(record),
            Err(_) => self.socket_decode_errors += 1,
        }
    }

    /// A walked record, with the headers its continuations added.
    fn handle_continued(&mut self, waiting: &continued_walks::Waiting) {
        match waiting.record() {
            Some(data) => self.requests.handle(SocketRecord::Data(data)),
            None => self.socket_decode_errors += 1,
        }
    }

    /// Keeps the kernel's LISTEN_PORTS and the tracker's per-process ports in line with what the
    /// targets listen on now.
    pub(super) fn sync_listen_ports(&mut self, live: &HashSet<u32>) -> Result<(), ProbeError> {
        // Targets that went away change nothing until the next refresh; new ones are read now.
        if live.is_subset(&self.listen_ports_of) && !self.collections.is_multiple_of(LISTEN_REFRESH_TICKS) {
            return Ok(());
        }
        let netns_of: HashMap<u32, u32> =
            live.iter().filter_map(|&tgid| Some((tgid, procfs::net_namespace_inum(tgid)?))).collect();
        // Each namespace's listening rows are read once: reading them from /proc (another
        // namespace than the daemon's) makes the kernel walk its whole connection hash.
        let mut rows_of: HashMap<u32, Vec<procfs::ListenRow>> = HashMap::new();
        let per_process: HashMap<u32, BTreeSet<u16>> = live
            .iter()
            .map(|&tgid| {
                let ports = match netns_of.get(&tgid) {
                    Some(netns) => procfs::listening_ports_among(
                        tgid,
                        rows_of.entry(*netns).or_insert_with(|| crate::host::sock_diag::listen_rows_in(*netns, tgid)),
                    ),
                    None => procfs::listening_ports(tgid),
                };
                (tgid, ports)
            })
            .collect();
        // Keyed by network namespace too: the same port in another pod is not the target's.
        let all: BTreeSet<u64> = per_process
            .iter()
            .filter_map(|(tgid, ports)| netns_of.get(tgid).map(|netns| (*netns, ports)))
            .flat_map(|(netns, ports)| ports.iter().map(move |port| gateway_observer_common::listen_key(netns, *port)))
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .take(gateway_observer_common::MAX_LISTEN_PORTS as usize)
            .collect();
        self.probes.set_listen_ports(&self.listen_ports, &all)?;
        self.listen_ports = all;
        self.listen_ports_of = live.clone();
        self.requests.set_listen_ports(per_process, netns_of);
        Ok(())
    }
}
