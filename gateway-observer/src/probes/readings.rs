//! What the kernel programs report outside the rings' records: drop counters, user stacks, the
//! rings themselves, the followed sockets' counts and unread marks, and the programs' run times.

use std::time::Duration;

use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};
use gateway_observer_common::drop_index;

use super::{
    hooks::all_hooks,
    loader::{ProbeError, Probes, map_err},
};

impl Probes {
    /// What the kernel could not record, by `drop_index::*`, summed over CPUs.
    pub fn drops(&self) -> Result<[u64; drop_index::COUNT as usize], ProbeError> {
        let mut out = [0u64; drop_index::COUNT as usize];
        for (index, slot) in (0..drop_index::COUNT).zip(out.iter_mut()) {
            *slot = self.drop_count(index)?;
        }
        Ok(out)
    }

    /// One `drop_index::*` counter, summed over CPUs (one syscall).
    pub fn drop_count(&self, index: u32) -> Result<u64, ProbeError> {
        let drops: PerCpuArray<&MapData, u64> = self.map("DROPS")?;
        Ok(drops.get(&index, 0).map_err(map_err("DROPS"))?.iter().sum())
    }

    /// The instruction pointers of a captured user stack, innermost first.
    pub fn user_stack(&self, stack_id: u32) -> Option<Vec<u64>> {
        let stacks: aya::maps::StackTraceMap<&MapData> = self.map("STACKS").ok()?;
        let trace = stacks.get(&stack_id, 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }

    /// Deletes a captured stack no block needs any more (the kernel never frees one itself).
    pub fn remove_stack(&mut self, stack_id: u32) -> Result<(), ProbeError> {
        let mut stacks: aya::maps::StackTraceMap<&mut MapData> = self.map_mut("STACKS")?;
        match stacks.remove(&stack_id) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(ProbeError::Map { map: "STACKS", source }),
        }
    }

    /// The thread ring buffer, handed to its single reader.
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        self.take_ring("EVENTS")
    }

    /// The socket ring buffer (connections and data), handed to its single reader.
    pub fn take_socket_events(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        self.take_ring("SOCKET_EVENTS")
    }

    fn take_ring(&mut self, name: &'static str) -> Result<RingBuf<MapData>, ProbeError> {
        let map = self.ebpf.take_map(name).ok_or(ProbeError::MissingMap(name))?;
        RingBuf::try_from(map).map_err(map_err(name))
    }

    /// Makes `new` (`listen_key(namespace, port)` values) the ports connections are followed
    /// from accept on, replacing `old`.
    pub fn set_listen_ports(
        &mut self,
        old: &std::collections::BTreeSet<u64>,
        new: &std::collections::BTreeSet<u64>,
    ) -> Result<(), ProbeError> {
        let mut ports: HashMap<&mut MapData, u64, u8> = self.map_mut("LISTEN_PORTS")?;
        for key in old.difference(new) {
            // Already gone is fine: the aim is its absence.
            let _ = ports.remove(key);
        }
        for key in new.difference(old) {
            ports.insert(key, 1, 0).map_err(map_err("LISTEN_PORTS"))?;
        }
        Ok(())
    }

    /// Makes `new` (tid → `block_detail::*`) the long blocks the kernel sends one by one,
    /// replacing `old`. Returns the threads of `new` that did not fit (the map is full).
    pub fn set_block_detail(
        &mut self,
        old: &std::collections::HashMap<u32, u8>,
        new: &std::collections::HashMap<u32, u8>,
    ) -> Result<Vec<u32>, ProbeError> {
        let mut detail: HashMap<&mut MapData, u32, u8> = self.map_mut("BLOCK_DETAIL")?;
        for tid in old.keys().filter(|tid| !new.contains_key(tid)) {
            // Already gone is fine: the aim is its absence.
            let _ = detail.remove(tid);
        }
        Ok(new
            .iter()
            .filter(|(tid, role)| old.get(tid) != Some(role))
            .filter(|(tid, role)| detail.insert(**tid, **role, 0).is_err())
            .map(|(tid, _)| *tid)
            .collect())
    }

    /// Connections in SOCKS (a full map drops new ones; counted in DROPS).
    pub fn socket_count(&self) -> Result<usize, ProbeError> {
        let socks: HashMap<&MapData, u64, gateway_observer_common::SockState> = self.map("SOCKS")?;
        Ok(socks.keys().count())
    }

    /// For each of `sks`, its count of lost data records, or None when it is no longer in SOCKS.
    /// A lookup (a syscall) each, so callers bound `sks`.
    pub fn sock_lost_counts(&self, sks: &[u64]) -> Result<Vec<(u64, Option<u32>)>, ProbeError> {
        let socks: HashMap<&MapData, u64, gateway_observer_common::SockState> = self.map("SOCKS")?;
        Ok(sks.iter().map(|sk| (*sk, socks.get(sk, 0).ok().map(|state| state.lost))).collect())
    }

    /// For each of `sks` still in SOCKS with bytes unread: (sk, when those bytes first arrived).
    /// A lookup (a syscall) each, so callers bound `sks`.
    pub fn unread_since(&self, sks: &[u64]) -> Result<Vec<(u64, u64)>, ProbeError> {
        let socks: HashMap<&MapData, u64, gateway_observer_common::SockState> = self.map("SOCKS")?;
        Ok(sks
            .iter()
            .filter_map(|sk| socks.get(sk, 0).ok().map(|state| (*sk, state.unread_since_ns)))
            .filter(|(_, since)| *since != 0)
            .collect())
    }

    /// (program, cumulative run time, run count) from the kernel's BPF stats; both stay 0 unless
    /// stats are enabled (`kernel.bpf_stats_enabled` or `aya::sys::enable_stats`).
    pub fn program_stats(&self) -> Vec<(&'static str, Duration, u64)> {
        let hooks: Vec<_> = all_hooks().map(|h| (h.program, h.target)).collect();
        self.stats_of(&hooks)
    }

    /// Run time and count of the given programs (those loaded).
    pub fn stats_of(&self, programs: &[(&'static str, &'static str)]) -> Vec<(&'static str, Duration, u64)> {
        programs
            .iter()
            .filter_map(|(name, _)| {
                let prog = self.ebpf.program(name)?;
                let info = prog.info().ok()?;
                Some((*name, info.run_time(), info.run_count()))
            })
            .collect()
    }
}
