//! Loads the embedded object, sets its load-time globals, attaches the programs, and gives typed
//! access to the maps (used by `followed` and `readings`, which hold the rest of `Probes`).

use std::time::Duration;

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, MapData, ProgramArray, Queue},
    programs::{BtfTracePoint, FEntry, FExit},
};
use gateway_observer_common::{MAX_SYSCALL_NR, MAX_THREADS, ProbeConfig};

use super::{
    hooks::{AttachKind, CORE_HOOKS, DataHooks, Hook, OPTIONAL_HOOKS, OptionalHook, WALK_CONTINUATIONS},
    kernel_offsets::{KernelOffsets, OffsetError},
    thread_slots::ThreadSlots,
};
use crate::{probes::quotas::Quotas, syscalls};

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
    /// TLS plaintext is read from uprobes: the kernel then keeps reporting TLS connections'
    /// ciphertext (a memory-BIO session is tied to its connection through it); otherwise only
    /// their first record.
    pub tls_plaintext: bool,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            block_threshold: Duration::from_millis(10),
            max_threads: MAX_THREADS,
            busy_iteration: Duration::from_millis(100),
            quotas: Quotas { threads: MAX_THREADS / 4, connections: gateway_observer_common::MAX_SOCKETS / 4 },
            tls_plaintext: false,
        }
    }
}

/// Size of the per-tid `TRACKED` array: the host's pid_max (tids never reach it).
fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(4_194_304) // PID_MAX_LIMIT on 64-bit: the largest it can be
}

/// What `attach_all` could attach beyond the core hooks.
pub struct Attachment {
    /// The source of socket bytes in use, or why there is none (requests are not timed).
    pub data: Result<DataHooks, ProbeError>,
    /// Whether HTTP/2 frames past a transfer's head are walked (socket tracepoints only: their
    /// continuation programs), or why not.
    pub walk_continuations: Result<(), ProbeError>,
    /// Optional hooks this kernel refused, each with why.
    pub missing: Vec<(OptionalHook, ProbeError)>,
}

pub struct Probes {
    pub(super) ebpf: Ebpf,
    /// The kernel's BTF, parsed (about 10 MiB of heap): programs need it to load. Dropped once
    /// the daemon has attached what it runs (`forget_kernel_btf`), parsed again if needed.
    pub(super) btf: Option<Btf>,
    pub(super) slots: ThreadSlots,
    pub(super) quotas: Quotas,
    /// Drains of the socket ring so far (`advance_ring_epoch`).
    pub(super) ring_epoch: u64,
    /// The socket tracepoints' HTTP/2 walks go on past the head: their continuations are loaded.
    pub(super) walks_continue: bool,
}

/// `bpf_map_update_elem` flag: only update an existing entry.
pub const BPF_EXIST: u64 = 2;

pub(super) fn map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> ProbeError {
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
            silence_tls: u8::from(!settings.tls_plaintext),
            _pad: 0,
            thread_quota: settings.quotas.threads,
            socket_quota: settings.quotas.connections,
            regs_go_g_offset: offsets.regs_go_g,
            icsk_ulp_ops_offset: offsets.icsk_ulp_ops,
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
        let mut probes =
            Self { ebpf, btf: Some(btf), slots, quotas: settings.quotas, ring_epoch: 0, walks_continue: false };
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
        let (prog, btf) = self.program_with_btf(program)?;
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

    /// The object's program `name`, with the kernel's BTF it loads against (parsed again if
    /// `forget_kernel_btf` freed it).
    fn program_with_btf(&mut self, name: &'static str) -> Result<(&mut aya::programs::Program, &Btf), ProbeError> {
        if self.btf.is_none() {
            self.btf = Some(Btf::from_sys_fs()?);
        }
        let btf = self.btf.as_ref().ok_or(ProbeError::MissingProgram(name))?;
        let prog = self.ebpf.program_mut(name).ok_or(ProbeError::MissingProgram(name))?;
        Ok((prog, btf))
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
        let walk_continuations = match data {
            Ok(DataHooks::SocketTracepoints) => self.load_walk_continuations(),
            _ => Err(ProbeError::MissingProgram("sock_recv_length")),
        };
        Ok(Attachment { data, walk_continuations, missing })
    }

    /// Loads the continuation programs of the socket tracepoints' HTTP/2 walks into the program
    /// arrays their tracepoints tail-call through. Until they are there, no frame past a
    /// transfer's head is walked.
    pub fn load_walk_continuations(&mut self) -> Result<(), ProbeError> {
        for &(program, tracepoint, array) in WALK_CONTINUATIONS {
            let load_err = |source| ProbeError::LoadProgram { program, source };
            let (prog, btf) = self.program_with_btf(program)?;
            let prog: &mut BtfTracePoint = prog.try_into().map_err(load_err)?;
            prog.load(tracepoint, btf).map_err(load_err)?;
            self.set_tail_call(program, array)?;
        }
        self.walks_continue = true;
        Ok(())
    }

    /// Whether the socket tracepoints' HTTP/2 walks go on past the head (`load_walk_continuations`).
    pub fn walks_continue(&self) -> bool {
        self.walks_continue
    }

    /// Puts the loaded `program` in slot 0 of the program array `array`, for the programs that
    /// tail-call through it.
    pub(super) fn set_tail_call(&mut self, program: &'static str, array: &'static str) -> Result<(), ProbeError> {
        let load_err = |source| ProbeError::LoadProgram { program, source };
        let prog = self.ebpf.program(program).ok_or(ProbeError::MissingProgram(program))?;
        // A copy of the descriptor: the map is borrowed from the same object.
        let fd =
            prog.fd().map_err(load_err)?.try_clone().map_err(|e| load_err(aya::programs::ProgramError::IOError(e)))?;
        let mut slots: ProgramArray<&mut MapData> = self.map_mut(array)?;
        slots.set(0, &fd, 0).map_err(map_err(array))
    }

    /// The loaded object, for the per-target uprobes (`probes::tls`).
    pub(super) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Frees the parsed kernel BTF once every program the daemon runs is attached.
    pub fn forget_kernel_btf(&mut self) {
        self.btf = None;
    }

    pub(super) fn map_mut<'a, T>(&'a mut self, name: &'static str) -> Result<T, ProbeError>
    where
        T: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>,
    {
        let map = self.ebpf.map_mut(name).ok_or(ProbeError::MissingMap(name))?;
        T::try_from(map).map_err(map_err(name))
    }

    pub(super) fn map<'a, T>(&'a self, name: &'static str) -> Result<T, ProbeError>
    where
        T: TryFrom<&'a aya::maps::Map, Error = aya::maps::MapError>,
    {
        let map = self.ebpf.map(name).ok_or(ProbeError::MissingMap(name))?;
        T::try_from(map).map_err(map_err(name))
    }
}
