//! The processes and threads the kernel programs follow: TARGETS (with each target's budgets and
//! ring share), TRACKED and the THREADS slots, written when targets come and go and read each tick.

use aya::maps::{Array, HashMap, MapData, Queue};
use gateway_observer_common::{TargetInfo, ThreadState, ring_share};

use super::{
    loader::{BPF_EXIST, ProbeError, Probes, map_err},
    quotas::Quotas,
};
use crate::host::procfs;

/// The first state of a thread that was already running when followed. If it is blocked now,
/// its off-CPU span opens now with the reason /proc shows, so a thread that never wakes up again
/// (parked for good, stuck for minutes) counts as blocked rather than unseen; and the syscall it
/// is in is noted as `sched_switch` would have, so how it ends is read (a timed wait's outcome).
fn state_when_found(tgid: u32, tid: u32) -> ThreadState {
    let mut state = ThreadState { tid, tgid, ..ThreadState::default() };
    if let Some(letter) = procfs::thread_state(tgid, tid).filter(|s| *s != 'R') {
        let syscall = procfs::thread_syscall(tgid, tid);
        state.offcpu_reason = crate::syscalls::blocked_reason(letter, syscall);
        state.offcpu_start_ns = crate::clock::monotonic_ns();
        if let Some((nr, args)) = syscall {
            state.syscall_nr = i32::try_from(nr).unwrap_or(-1);
            state.syscall_class = crate::syscalls::class_of(nr);
            state.syscall_arg0 = args[0];
            state.futex_timed = u8::from(crate::syscalls::futex_timed(nr, &args));
        }
    }
    state
}

impl Probes {
    /// Starts following a process: it goes into TARGETS first (so threads it creates from now on
    /// are followed by the fork hook), then each of its current threads gets a slot, up to its
    /// quota. Returns how many of its threads the quota left unfollowed.
    pub fn add_target(&mut self, tgid: u32, parent_tgid: u32) -> Result<usize, ProbeError> {
        let quotas = self.quotas;
        self.set_target(tgid, quotas.target_info(parent_tgid, 0, 0), 0)?;
        let mut followed = 0;
        let mut refused = 0;
        for tid in procfs::threads(tgid) {
            if self.tracked_slot(tid)?.is_some() {
                followed += 1;
                continue; // the fork hook got there first
            }
            if followed >= quotas.threads as usize {
                refused += 1;
                continue;
            }
            let slot = {
                let mut free: Queue<&mut MapData, u32> = self.map_mut("FREE_SLOTS")?;
                match free.pop(0) {
                    Ok(slot) => slot,
                    Err(_) => break, // full: counted by the kernel for new threads; nothing to add
                }
            };
            self.slots.write(slot, state_when_found(tgid, tid));
            self.set_tracked(tid, Some(slot))?;
            followed += 1;
        }
        // The fork hook may have taken from the budget meanwhile: the next tick counts again.
        self.set_target(tgid, quotas.target_info(parent_tgid, followed, 0), BPF_EXIST)?;
        Ok(refused)
    }

    /// The quotas targets are held to.
    pub fn quotas(&self) -> Quotas {
        self.quotas
    }

    /// Writes a target's entry (its budgets); with `BPF_EXIST`, only if it is still a target.
    pub fn set_target(&mut self, tgid: u32, info: TargetInfo, flags: u64) -> Result<(), ProbeError> {
        let mut targets: HashMap<&mut MapData, u32, TargetInfo> = self.map_mut("TARGETS")?;
        match targets.insert(tgid, info, flags) {
            Ok(()) => Ok(()),
            // Gone since it was listed (BPF_EXIST): nothing to update.
            Err(aya::maps::MapError::SyscallError(e))
                if flags == BPF_EXIST && e.io_error.raw_os_error() == Some(libc::ENOENT) =>
            {
                Ok(())
            }
            Err(source) => Err(ProbeError::Map { map: "TARGETS", source }),
        }
    }

    /// The slot TRACKED points at for `tid`, if any.
    pub fn tracked_slot(&self, tid: u32) -> Result<Option<u32>, ProbeError> {
        let tracked: Array<&MapData, u32> = self.map("TRACKED")?;
        match tracked.get(&tid, 0) {
            Ok(0) | Err(aya::maps::MapError::OutOfBounds { .. }) => Ok(None),
            Ok(entry) => Ok(Some(entry - 1)),
            Err(source) => Err(ProbeError::Map { map: "TRACKED", source }),
        }
    }

    fn set_tracked(&mut self, tid: u32, slot: Option<u32>) -> Result<(), ProbeError> {
        let mut tracked: Array<&mut MapData, u32> = self.map_mut("TRACKED")?;
        tracked.set(tid, slot.map_or(0, |s| s + 1), 0).map_err(map_err("TRACKED"))
    }

    /// Stops following a process (it exited, or no longer matches).
    pub fn remove_target(&mut self, tgid: u32) -> Result<(), ProbeError> {
        let mut targets: HashMap<&mut MapData, u32, TargetInfo> = self.map_mut("TARGETS")?;
        match targets.remove(&tgid) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(ProbeError::Map { map: "TARGETS", source }),
        }
    }

    /// The share of the congested socket ring each target may write between two drains.
    pub fn set_ring_share(&mut self, records: u64) -> Result<(), ProbeError> {
        let mut share: Array<&mut MapData, u64> = self.map_mut("RING_SHARE")?;
        share.set(ring_share::SHARE, records, 0).map_err(map_err("RING_SHARE"))
    }

    /// The socket ring was drained: its room, and every target's share of it, are back.
    pub fn advance_ring_epoch(&mut self) -> Result<(), ProbeError> {
        self.ring_epoch += 1;
        let epoch = self.ring_epoch;
        let mut share: Array<&mut MapData, u64> = self.map_mut("RING_SHARE")?;
        share.set(ring_share::EPOCH, epoch, 0).map_err(map_err("RING_SHARE"))
    }

    /// Processes in TARGETS, with the target they were forked from (0 for one userspace added).
    pub fn targets(&self) -> Result<Vec<(u32, u32)>, ProbeError> {
        Ok(self.target_infos()?.into_iter().map(|(tgid, info)| (tgid, info.parent_tgid)).collect())
    }

    /// Processes in TARGETS with their entries (budgets included).
    pub fn target_infos(&self) -> Result<Vec<(u32, TargetInfo)>, ProbeError> {
        let targets: HashMap<&MapData, u32, TargetInfo> = self.map("TARGETS")?;
        Ok(targets.iter().filter_map(Result::ok).collect())
    }

    /// Every occupied slot: (slot, a copy of its state), into `out`, emptied first. The caller
    /// keeps `out` from tick to tick: 2,000 threads' copies are 1.7 MB, which a new vector would
    /// map and fault in afresh each tick (above the allocator's mmap threshold).
    pub fn threads_into(&self, out: &mut Vec<(u32, ThreadState)>) {
        out.clear();
        out.extend(
            (0..self.slots.slots())
                .filter(|&slot| self.slots.tid(slot).is_some_and(|tid| tid != 0))
                .filter_map(|slot| self.slots.read(slot).map(|state| (slot, state)))
                // Again on the copy: the kernel can free the slot between the cheap tid read and the copy.
                .filter(|(_, state)| state.tid != 0),
        );
    }

    /// A fresh copy of one slot.
    pub fn thread_slot(&self, slot: u32) -> Option<ThreadState> {
        self.slots.read(slot)
    }

    /// Frees a thread's slot once its last totals are read: after its exit, or when it is gone
    /// without the exit hook having run (it exited between /proc listing and slot assignment).
    pub fn release_thread(&mut self, slot: u32, tid: u32) -> Result<(), ProbeError> {
        if self.tracked_slot(tid)? == Some(slot) {
            self.set_tracked(tid, None)?;
        }
        self.slots.write(slot, ThreadState::default());
        let mut free: Queue<&mut MapData, u32> = self.map_mut("FREE_SLOTS")?;
        free.push(slot, 0).map_err(map_err("FREE_SLOTS"))
    }
}
