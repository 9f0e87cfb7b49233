//! Loads the embedded object, sets its load-time globals, attaches the programs, and gives typed
//! access to the maps.

use std::time::Duration;

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, Queue, RingBuf},
    programs::{BtfTracePoint, FEntry, FExit},
};
use gateway_observer_common::{
    MAX_SYSCALL_NR, MAX_THREADS, ProbeConfig, TargetInfo, ThreadState, drop_index, ring_share,
};

use super::{
    hooks::{AttachKind, CORE_HOOKS, DataHooks, Hook, OPTIONAL_HOOKS, OptionalHook, all_hooks},
    kernel_offsets::{KernelOffsets, OffsetError},
    thread_slots::ThreadSlots,
};
use crate::{host::procfs, probes::quotas::Quotas, syscalls};

/// Empty programs for `calibrate`: (program, tracepoint).
pub const BASELINE_PROGRAMS: &[(&str, &str)] =
    &[("baseline_sched_switch", "sched_switch"), ("baseline_sys_enter", "sys_enter")];

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// build.rs found no bpf-linker and embedded an empty object in place of the kernel programs.
    #[error(
        "this binary was built without bpf-linker, so it holds no kernel programs; run `cargo xtask setup` and rebuild"
    )]
    StandInObject,
    #[error(transparent)]
    Offsets(#[from] OffsetError),
    #[error("cannot read kernel BTF: {0}")]
    Btf(#[from] aya::BtfError),
    #[error("loading the eBPF object failed: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("program {0} is missing from the eBPF object")]
    MissingProgram(&'static str),
    #[error("map {0} is missing from the eBPF object")]
    MissingMap(&'static str),
    #[error("loading program {program} failed: {source}")]
    LoadProgram { program: &'static str, source: aya::programs::ProgramError },
    #[error("attaching {program} to {target} failed: {source}")]
    Attach { program: &'static str, target: &'static str, source: aya::programs::ProgramError },
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: aya::maps::MapError },
    #[error("cannot mmap the THREADS map: {0}")]
    Mmap(std::io::Error),
}

/// What the daemon may tune in the kernel programs.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSettings {
    /// Off-CPU waits at least this long are sent to userspace as events.
    pub block_threshold: Duration,
    /// Thread slots: how many target threads can be followed at once.
    pub max_threads: u32,
    /// Event-loop iterations at least this long on CPU are sent to userspace as events.
    pub busy_iteration: Duration,
    /// Thread slots and connections one target may hold.
    pub quotas: Quotas,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            block_threshold: Duration::from_millis(10),
            max_threads: MAX_THREADS,
            busy_iteration: Duration::from_millis(100),
            quotas: Quotas { threads: MAX_THREADS / 4, connections: gateway_observer_common::MAX_SOCKETS / 4 },
        }
    }
}

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

/// Size of the per-tid `TRACKED` array: the host's pid_max (tids never reach it).
fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(4_194_304) // PID_MAX_LIMIT on 64-bit: the largest it can be
}

/// What `attach_all` could attach beyond the core hooks.
pub struct Attachment {
    /// The source of socket bytes in use, or why there is none (requests are not timed).
    pub data: Result<DataHooks, ProbeError>,
    /// Optional hooks this kernel refused, each with why.
    pub missing: Vec<(OptionalHook, ProbeError)>,
}

pub struct Probes {
    ebpf: Ebpf,
    /// The kernel's BTF, parsed (about 10 MiB of heap): programs need it to load. Dropped once
    /// the daemon has attached what it runs (`forget_kernel_btf`), parsed again if needed.
    btf: Option<Btf>,
    slots: ThreadSlots,
    quotas: Quotas,
    /// Drains of the socket ring so far (`advance_ring_epoch`).
    ring_epoch: u64,
}

/// `bpf_map_update_elem` flag: only update an existing entry.
pub const BPF_EXIST: u64 = 2;

fn map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map { map, source }
}

impl Probes {
    /// Loads the object into the kernel (verifier included) without attaching anything.
    pub fn load(settings: ProbeSettings) -> Result<Self, ProbeError> {
        if crate::EBPF_OBJECT.is_empty() {
            return Err(ProbeError::StandInObject);
        }
        let offsets = KernelOffsets::from_vmlinux()?;
        let config = ProbeConfig {
            block_threshold_ns: u64::try_from(settings.block_threshold.as_nanos()).unwrap_or(u64::MAX),
            task_pid_offset: offsets.task_pid,
            task_tgid_offset: offsets.task_tgid,
            regs_arg0_offset: offsets.regs_arg0,
            regs_arg1_offset: offsets.regs_arg1,
            regs_arg3_offset: offsets.regs_arg3,
            regs_arg4_offset: offsets.regs_arg4,
            busy_iteration_ns: u64::try_from(settings.busy_iteration.as_nanos()).unwrap_or(u64::MAX),
            regs_arg2_offset: offsets.regs_arg2,
            sock_family_offset: offsets.sock_family,
            sock_local_port_offset: offsets.sock_local_port,
            sock_remote_port_offset: offsets.sock_remote_port,
            sock_local_addr_offset: offsets.sock_local_addr,
            sock_remote_addr_offset: offsets.sock_remote_addr,
            sock_local_addr6_offset: offsets.sock_local_addr6,
            sock_remote_addr6_offset: offsets.sock_remote_addr6,
            sock_protocol_offset: offsets.sock_protocol,
            tcp_snd_una_offset: offsets.tcp_snd_una,
            tcp_snd_nxt_offset: offsets.tcp_snd_nxt,
            sock_state_offset: offsets.sock_state,
            sock_net_offset: offsets.sock_net,
            net_inum_offset: offsets.net_inum,
            regs_syscall_nr_offset: offsets.regs_syscall_nr,
            msg_iter_type_offset: offsets.msg_iter_type,
            msg_iter_buf_offset: offsets.msg_iter_buf,
            msg_iter_count_offset: offsets.msg_iter_count,
            msg_iter_segs_offset: offsets.msg_iter_segs,
            iter_type_ubuf: offsets.iter_type_ubuf,
            iter_type_iovec: offsets.iter_type_iovec,
            _pad: [0; 2],
            thread_quota: settings.quotas.threads,
            socket_quota: settings.quotas.connections,
        };
        let max_threads = settings.max_threads.max(1);
        // Parsed once, for the loader's relocations and the programs' loads. The loader parses
        // its own copy when created: dropped first, so two are never in memory at once.
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        let btf = Btf::from_sys_fs()?;
        let ebpf = loader
            .btf(Some(&btf))
            .override_global("PROBE_CONFIG", &config, true)
            .map_max_entries("TRACKED", pid_max())
            .map_max_entries("THREADS", max_threads)
            .map_max_entries("FREE_SLOTS", max_threads)
            .load(crate::EBPF_OBJECT)?;
        let threads_map = match ebpf.map("THREADS") {
            Some(aya::maps::Map::Array(data)) => data,
            _ => return Err(ProbeError::MissingMap("THREADS")),
        };
        let slots = ThreadSlots::map(threads_map, max_threads).map_err(ProbeError::Mmap)?;
        let mut probes = Self { ebpf, btf: Some(btf), slots, quotas: settings.quotas, ring_epoch: 0 };
        probes.write_syscall_classes()?;
        let mut free: Queue<&mut MapData, u32> = probes.map_mut("FREE_SLOTS")?;
        for slot in 0..max_threads {
            free.push(slot, 0).map_err(map_err("FREE_SLOTS"))?;
        }
        Ok(probes)
    }

    fn write_syscall_classes(&mut self) -> Result<(), ProbeError> {
        let mut classes: Array<&mut MapData, u8> = self.map_mut("SYSCALL_CLASS")?;
        for (nr, class) in syscalls::class_table(MAX_SYSCALL_NR).into_iter().enumerate() {
            let nr = u32::try_from(nr).unwrap_or(u32::MAX);
            classes.set(nr, class, 0).map_err(map_err("SYSCALL_CLASS"))?;
        }
        Ok(())
    }

    /// Loads and attaches one program on a BTF tracepoint (the empty programs of `calibrate`).
    pub fn attach(&mut self, program: &'static str, tracepoint: &'static str) -> Result<(), ProbeError> {
        self.attach_hook(&Hook { program, kind: AttachKind::TracePoint, target: tracepoint })
    }

    /// Loads and attaches one program. Each is independent, so `check` can report them one by one.
    pub fn attach_hook(&mut self, hook: &Hook) -> Result<(), ProbeError> {
        let Hook { program, kind, target } = *hook;
        let load_err = |source| ProbeError::LoadProgram { program, source };
        let attach_err = |source| ProbeError::Attach { program, target, source };
        if self.btf.is_none() {
            self.btf = Some(Btf::from_sys_fs()?);
        }
        let btf = self.btf.as_ref().ok_or(ProbeError::MissingProgram(program))?;
        let prog = self.ebpf.program_mut(program).ok_or(ProbeError::MissingProgram(program))?;
        match kind {
            AttachKind::TracePoint => {
                let prog: &mut BtfTracePoint = prog.try_into().map_err(load_err)?;
                prog.load(target, btf).map_err(load_err)?;
                prog.attach().map_err(attach_err)?;
            }
            AttachKind::Entry => {
                let prog: &mut FEntry = prog.try_into().map_err(load_err)?;
                prog.load(target, btf).map_err(load_err)?;
                prog.attach().map_err(attach_err)?;
            }
            AttachKind::Exit => {
                let prog: &mut FExit = prog.try_into().map_err(load_err)?;
                prog.load(target, btf).map_err(load_err)?;
                prog.attach().map_err(attach_err)?;
            }
        }
        Ok(())
    }

    /// Unloads a program (detaching it), as if never attached.
    fn detach_hook(&mut self, hook: &Hook) {
        let Some(prog) = self.ebpf.program_mut(hook.program) else { return };
        // Not loaded (it failed to) is fine: the aim is that it runs nowhere.
        let _ = match (hook.kind, prog) {
            (AttachKind::TracePoint, aya::programs::Program::BtfTracePoint(p)) => p.unload(),
            (AttachKind::Entry, aya::programs::Program::FEntry(p)) => p.unload(),
            (AttachKind::Exit, aya::programs::Program::FExit(p)) => p.unload(),
            _ => Ok(()),
        };
    }

    /// Attaches every program of a set; on a failure, detaches what it attached.
    fn attach_set(&mut self, hooks: &[Hook]) -> Result<(), ProbeError> {
        for (index, hook) in hooks.iter().enumerate() {
            if let Err(e) = self.attach_hook(hook) {
                for attached in &hooks[..index] {
                    self.detach_hook(attached);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Attaches the core hooks (an error if one fails), the optional ones this kernel has, and
    /// the first source of socket transfer bytes it has. What is missing is reported, not an
    /// error: the daemon runs the rest.
    pub fn attach_all(&mut self) -> Result<Attachment, ProbeError> {
        self.attach_set(CORE_HOOKS)?;
        let mut missing = Vec::new();
        for optional in OPTIONAL_HOOKS {
            if let Err(e) = self.attach_hook(&optional.hook) {
                missing.push((*optional, e));
            }
        }
        let mut data = Err(ProbeError::MissingProgram("sock_recv_length"));
        for source in [DataHooks::SocketTracepoints, DataHooks::TcpFunctions] {
            match self.attach_set(source.hooks()) {
                Ok(()) => {
                    data = Ok(source);
                    break;
                }
                Err(e) => data = Err(e),
            }
        }
        Ok(Attachment { data, missing })
    }

    /// The loaded object, for the per-target uprobes (`probes::tls`).
    pub(super) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Frees the parsed kernel BTF once every program the daemon runs is attached.
    pub fn forget_kernel_btf(&mut self) {
        self.btf = None;
    }

    fn map_mut<'a, T>(&'a mut self, name: &'static str) -> Result<T, ProbeError>
    where
        T: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>,
    {
        let map = self.ebpf.map_mut(name).ok_or(ProbeError::MissingMap(name))?;
        T::try_from(map).map_err(map_err(name))
    }

    fn map<'a, T>(&'a self, name: &'static str) -> Result<T, ProbeError>
    where
        T: TryFrom<&'a aya::maps::Map, Error = aya::maps::MapError>,
    {
        let map = self.ebpf.map(name).ok_or(ProbeError::MissingMap(name))?;
        T::try_from(map).map_err(map_err(name))
    }

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

    /// Every occupied slot: (slot, a copy of its state).
    pub fn threads(&self) -> Vec<(u32, ThreadState)> {
        (0..self.slots.slots())
            .filter(|&slot| self.slots.tid(slot).is_some_and(|tid| tid != 0))
            .filter_map(|slot| self.slots.read(slot).map(|state| (slot, state)))
            .filter(|(_, state)| state.tid != 0)
            .collect()
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
