//! Uprobes on a target's TLS library (`tls_libraries` finds it and where its calls begin): one
//! set of links per process, attached for that pid only, so a process that is not a target never
//! traps; dropping them detaches. Pre-forked workers each get their own: a uprobe opened for one
//! pid does not follow its forks. The events come from `uprobe_opener` (opening one needs
//! CAP_SYS_ADMIN, which the daemon drops); the programs are set on them here.

use std::{
    collections::HashMap,
    os::fd::{AsFd as _, OwnedFd},
};

use aya::{
    maps::{Array, MapData},
    programs::UProbe,
};

use super::{ProbeError, Probes};
use crate::{
    host::tls_libraries::{Library, TlsCall},
    uprobe_opener::{self, UprobeOpener, UprobeRequest, helper::OpenError},
};

/// The uretprobe every hooked call returns through.
const EXIT_PROGRAM: &str = "tls_exit";

/// The entry program of each kind of call.
fn entry_program(call: TlsCall) -> &'static str {
    match call {
        TlsCall::Read => "tls_read_enter",
        TlsCall::Write => "tls_write_enter",
        TlsCall::ReadEx => "tls_read_ex_enter",
        TlsCall::WriteEx => "tls_write_ex_enter",
        TlsCall::Other => "tls_other_enter",
        TlsCall::GoRead => "go_tls_read_enter",
        TlsCall::GoWrite => "go_tls_write_enter",
        TlsCall::GoHandshake => "go_tls_other_enter",
        TlsCall::GoReturn => "go_tls_return",
        TlsCall::GoHandshakeReturn => "go_tls_other_return",
    }
}

/// Every TLS program, loaded once (at the first attach) and attached many times.
pub const TLS_PROGRAMS: &[&str] = &[
    "tls_read_enter",
    "tls_write_enter",
    "tls_read_ex_enter",
    "tls_write_ex_enter",
    "tls_other_enter",
    EXIT_PROGRAM,
    "go_tls_read_enter",
    "go_tls_write_enter",
    "go_tls_other_enter",
    "go_tls_return",
    "go_tls_other_return",
];

/// The continuation of the plaintext's HTTP/2 walks past 32 frames (loaded with the others, never
/// attached: `tls_exit` and `go_tls_return` tail-call it through `WALK_MORE_MAP`).
const WALK_MORE_PROGRAM: &str = "tls_walk_more";
const WALK_MORE_MAP: &str = "TLS_WALK_MORE";

/// The kernel's count of processes with Go TLS calls hooked: while 0, socket transfers skip the
/// per-goroutine lookup.
const GO_PROCESSES_MAP: &str = "GO_TLS_PROCESSES";

/// Why a TLS call could not be hooked.
#[derive(Debug, thiserror::Error)]
pub enum TlsAttachError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("opening the uprobe at {symbol} failed: {source}")]
    Open { symbol: &'static str, source: OpenError },
    #[error("setting {program} on the uprobe at {symbol} failed: {source}")]
    SetProgram { program: &'static str, symbol: &'static str, source: std::io::Error },
}

/// The uprobe events (one fd each, the program set on it) of the processes whose TLS library
/// calls are hooked: closing an fd detaches.
pub struct TlsHooks {
    opener: UprobeOpener,
    links: HashMap<u32, Vec<OwnedFd>>,
    /// The hooked processes whose calls are Go's.
    go_pids: std::collections::HashSet<u32>,
    loaded: bool,
}

impl TlsHooks {
    pub fn new(opener: UprobeOpener) -> Self {
        Self { opener, links: HashMap::new(), go_pids: Default::default(), loaded: false }
    }

    /// Where the uprobes come from (it also opens files through `/proc/PID/map_files`).
    pub fn opener(&self) -> &UprobeOpener {
        &self.opener
    }

    /// Uprobe events held, for every hooked process (each closes when its process goes).
    pub fn events(&self) -> usize {
        self.links.values().map(Vec::len).sum()
    }

    /// Processes hooked now.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.links.keys().copied()
    }

    pub fn is_hooked(&self, pid: u32) -> bool {
        self.links.contains_key(&pid)
    }

    /// Hooks the calls `entries` (symbol, kind, file offset) of `library` in process `pid`: entry
    /// and return of each. All or nothing: on an error, what was attached is detached.
    pub fn attach(
        &mut self,
        probes: &mut Probes,
        pid: u32,
        library: &Library,
        entries: &[(&'static str, TlsCall, u64)],
    ) -> Result<(), TlsAttachError> {
        if !self.loaded {
            for &program in TLS_PROGRAMS {
                let prog: &mut UProbe = program_of(probes, program)?;
                prog.load().map_err(|source| ProbeError::LoadProgram { program, source })?;
            }
            load_walk_continuation(probes)?;
            self.loaded = true;
        }
        // Returns first: an entry seen with its return unhooked would leave the thread inside
        // the library as far as the kernel programs know (until its next poll). A Go call's
        // returns are uprobes on its RET sites.
        let exits = entries
            .iter()
            .filter(|(_, call, _)| call.has_uretprobe())
            .map(|&(symbol, _, offset)| (symbol, EXIT_PROGRAM, offset, true));
        let go_returns = entries.iter().filter(|(_, call, _)| call.is_go_return());
        let starts = entries.iter().filter(|(_, call, _)| !call.is_go_return());
        let starts =
            go_returns.chain(starts).map(|&(symbol, call, offset)| (symbol, entry_program(call), offset, false));
        let mut links = Vec::with_capacity(entries.len() * 2);
        for (symbol, program, offset, retprobe) in exits.chain(starts) {
            let request = UprobeRequest { pid, offset, retprobe };
            // The file checked and parsed is passed by descriptor: whatever its path names now,
            // in the target's mount namespace, the event is on that file.
            let event =
                self.opener.open(&library.file, request).map_err(|source| TlsAttachError::Open { symbol, source })?;
            let prog: &mut UProbe = program_of(probes, program)?;
            let fd = prog.fd().map_err(|source| ProbeError::LoadProgram { program, source })?;
            uprobe_opener::set_program(&event, fd.as_fd()).map_err(|source| TlsAttachError::SetProgram {
                program,
                symbol,
                source,
            })?;
            links.push(event);
        }
        self.links.entry(pid).or_default().extend(links);
        if entries.iter().any(|(_, call, _)| call.is_go_return()) && self.go_pids.insert(pid) {
            self.publish_go_processes(probes)?;
        }
        Ok(())
    }

    /// Detaches process `pid`'s hooks (it exited, or is no longer a target).
    pub fn detach(&mut self, probes: &mut Probes, pid: u32) {
        self.links.remove(&pid);
        if self.go_pids.remove(&pid) {
            let _ = self.publish_go_processes(probes);
        }
    }

    /// Tells the kernel programs how many processes have Go calls hooked.
    fn publish_go_processes(&self, probes: &mut Probes) -> Result<(), ProbeError> {
        let mut count: Array<&mut MapData, u32> = probes.map_mut(GO_PROCESSES_MAP)?;
        count.set(0, self.go_pids.len() as u32, 0).map_err(|source| ProbeError::Map { map: GO_PROCESSES_MAP, source })
    }
}

/// Loads the plaintext walks' continuation into the program array the TLS programs tail-call.
fn load_walk_continuation(probes: &mut Probes) -> Result<(), ProbeError> {
    let program = WALK_MORE_PROGRAM;
    program_of(probes, program)?.load().map_err(|source| ProbeError::LoadProgram { program, source })?;
    probes.set_tail_call(program, WALK_MORE_MAP)
}

fn program_of<'a>(probes: &'a mut Probes, program: &'static str) -> Result<&'a mut UProbe, ProbeError> {
    let prog = probes.ebpf_mut().program_mut(program).ok_or(ProbeError::MissingProgram(program))?;
    prog.try_into().map_err(|source| ProbeError::LoadProgram { program, source })
}
