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

use super::{ProbeError, Probes, deferred_close::DeferredClose};
use crate::{
    host::tls_libraries::{Library, TlsCall},
    uprobe_opener::{self, UprobeOpener, UprobeRequest, helper::OpenError},
};

/// The entry program of each kind of call (the returns of OpenSSL's calls and Go's data calls
/// are the `ReturnPrograms`).
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
        TlsCall::GoReturn => unreachable!("a data call's return program is one of the ReturnPrograms"),
        TlsCall::GoHandshakeReturn => "go_tls_other_return",
    }
}

/// Every TLS program but the `ReturnPrograms`, loaded once (at the first attach) and attached
/// many times.
const TLS_PROGRAMS: &[&str] = &[
    "tls_read_enter",
    "tls_write_enter",
    "tls_read_ex_enter",
    "tls_write_ex_enter",
    "tls_other_enter",
    "go_tls_read_enter",
    "go_tls_write_enter",
    "go_tls_other_enter",
    "go_tls_other_return",
];

/// The programs that send the plaintext when a data call returns: the uretprobe of every OpenSSL
/// call, and the uprobe on the RETs of Go's `Read` and `Write`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReturnPrograms {
    pub exit: &'static str,
    pub go_return: &'static str,
}

/// Their HTTP/2 walks go on past one record's 32 frames, in `tls_walk_more`.
pub const CONTINUED: ReturnPrograms = ReturnPrograms { exit: "tls_exit", go_return: "go_tls_return" };

/// Their walks stop at the bound: for kernels whose verifier refuses the others (Debian 12's 6.1:
/// over a million instructions), as the `tcp_*msg` fallback's walks stop there.
pub const BOUNDED: ReturnPrograms = ReturnPrograms { exit: "tls_exit_bounded", go_return: "go_tls_return_bounded" };

/// The continuation that walks the plaintext's HTTP/2 frames past its head (loaded with the others, never
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
    /// Where detached events go to be closed: a close waits on the kernel's unregistering.
    closer: DeferredClose,
    /// The hooked processes whose calls are Go's.
    go_pids: std::collections::HashSet<u32>,
    /// Set once the programs are loaded, at the first attach.
    returns: Option<ReturnPrograms>,
    /// Why the `BOUNDED` ones are in use: what the verifier said of the others.
    bounded_because: Option<String>,
}

impl TlsHooks {
    pub fn new(opener: UprobeOpener) -> Self {
        Self {
            opener,
            links: HashMap::new(),
            closer: DeferredClose::default(),
            go_pids: Default::default(),
            returns: None,
            bounded_because: None,
        }
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

    /// Why this kernel runs the `BOUNDED` return programs, if it does.
    pub fn bounded_because(&self) -> Option<&str> {
        self.bounded_because.as_deref()
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
        let returns = match self.returns {
            Some(returns) => returns,
            None => {
                for &program in TLS_PROGRAMS {
                    load(probes, program)?;
                }
                let (returns, refused) = load_return_programs(probes)?;
                if let Some(refused) = &refused {
                    tracing::warn!(
                        "degraded: HTTP/2 walks in TLS plaintext stop at 32 frames a call, frames past them are lost \
                         ({refused})"
                    );
                }
                (self.returns, self.bounded_because) = (Some(returns), refused);
                returns
            }
        };
        // Returns first: an entry seen with its return unhooked would leave the thread inside
        // the library as far as the kernel programs know (until its next poll). A Go call's
        // returns are uprobes on its RET sites.
        let exits = entries
            .iter()
            .filter(|(_, call, _)| call.has_uretprobe())
            .map(|&(symbol, _, offset)| (symbol, returns.exit, offset, true));
        let go_returns = entries
            .iter()
            .filter(|(_, call, _)| call.is_go_return())
            .map(|&(symbol, _, offset)| (symbol, returns.go_return, offset, false));
        let starts = entries
            .iter()
            .filter(|(_, call, _)| !call.is_go_return())
            .map(|&(symbol, call, offset)| (symbol, entry_program(call), offset, false));
        let starts = go_returns.chain(starts);
        let mut links = Vec::with_capacity(entries.len() * 2);
        for (symbol, program, offset, retprobe) in exits.chain(starts) {
            let request = UprobeRequest { pid, offset, retprobe };
            // The file checked and parsed is passed by descriptor: whatever its path names now,
            // in the target's mount namespace, the event is on that file.
            let event =
                self.opener.open(&library.file, request).map_err(|source| TlsAttachError::Open { symbol, source });
            let event = event.and_then(|event| {
                let prog: &mut UProbe = program_of(probes, program)?;
                let fd = prog.fd().map_err(|source| ProbeError::LoadProgram { program, source })?;
                uprobe_opener::set_program(&event, fd.as_fd()).map_err(|source| TlsAttachError::SetProgram {
                    program,
                    symbol,
                    source,
                })?;
                Ok(event)
            });
            match event {
                Ok(event) => links.push(event),
                Err(error) => {
                    self.closer.close(links);
                    return Err(error);
                }
            }
        }
        self.links.entry(pid).or_default().extend(links);
        if entries.iter().any(|(_, call, _)| call.is_go_return()) && self.go_pids.insert(pid) {
            self.publish_go_processes(probes)?;
        }
        Ok(())
    }

    /// Detaches process `pid`'s hooks (it exited, or is no longer a target).
    pub fn detach(&mut self, probes: &mut Probes, pid: u32) {
        if let Some(links) = self.links.remove(&pid) {
            self.closer.close(links);
        }
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

/// Loads the `CONTINUED` return programs with their continuation or the `BOUNDED` ones, with why:
/// the socket tracepoints' walks do not go on either (the `tcp_*msg` fallback, on kernels before
/// 6.5, whose verifiers would spend seconds on the others to refuse them: 6.1's does), or this
/// kernel refuses one of the others (the first line of the error: the verifier's log is long).
fn load_return_programs(probes: &mut Probes) -> Result<(ReturnPrograms, Option<String>), ProbeError> {
    let refused = if probes.walks_continue() {
        let continued = [CONTINUED.exit, CONTINUED.go_return, WALK_MORE_PROGRAM];
        let refused = continued.into_iter().find_map(|program| load(probes, program).err());
        let Some(refused) = refused else {
            probes.set_tail_call(WALK_MORE_PROGRAM, WALK_MORE_MAP)?;
            return Ok((CONTINUED, None));
        };
        // Those that did load are not needed: their fds go.
        for program in continued {
            if let Ok(prog) = program_of(probes, program) {
                let _ = prog.unload();
            }
        }
        refusal_summary(&crate::logging::error_chain(&refused))
    } else {
        "the socket walks stop there too: the TCP functions have no continuation programs".to_owned()
    };
    for program in [BOUNDED.exit, BOUNDED.go_return] {
        load(probes, program)?;
    }
    Ok((BOUNDED, Some(refused)))
}

/// A refused load's error without the verifier's log but its last line, which says why it gave up
/// ("BPF program is too large. Processed 1000001 insn").
fn refusal_summary(error: &str) -> String {
    let Some((head, log)) = error.split_once(" Verifier output:") else { return error.to_owned() };
    match log.lines().map(str::trim).rfind(|line| !line.is_empty()) {
        Some(last) => format!("{head} The verifier: {last}"),
        None => head.to_owned(),
    }
}

fn load(probes: &mut Probes, program: &'static str) -> Result<(), ProbeError> {
    program_of(probes, program)?.load().map_err(|source| ProbeError::LoadProgram { program, source })
}

fn program_of<'a>(probes: &'a mut Probes, program: &'static str) -> Result<&'a mut UProbe, ProbeError> {
    let prog = probes.ebpf_mut().program_mut(program).ok_or(ProbeError::MissingProgram(program))?;
    prog.try_into().map_err(|source| ProbeError::LoadProgram { program, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_the_verifiers_last_line() {
        let error = "loading program tls_exit failed: the BPF_PROG_LOAD syscall returned Argument list too long (os \
                     error 7). Verifier output: reg type unsupported for arg#0 function tls_exit#54\n0: (bf) r6 = r1\n\
                     BPF program is too large. Processed 1000001 insn\n\n";
        assert_eq!(
            refusal_summary(error),
            "loading program tls_exit failed: the BPF_PROG_LOAD syscall returned Argument list too long (os error 7). \
             The verifier: BPF program is too large. Processed 1000001 insn"
        );
        assert_eq!(refusal_summary("no such program"), "no such program");
    }
}
