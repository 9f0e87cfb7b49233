//! Uprobes on a target's TLS library (`tls_libraries` finds it and where its calls begin): one
//! set of links per process, attached for that pid only, so a process that is not a target never
//! traps; dropping them detaches. Pre-forked workers each get their own: a uprobe opened for one
//! pid does not follow its forks.

use std::{collections::HashMap, num::NonZeroU32, os::fd::AsRawFd as _};

use aya::programs::{
    UProbe,
    uprobe::{UProbeLink, UProbeScope},
};

use super::{ProbeError, Probes};
use crate::host::tls_libraries::{Library, TlsCall};

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
    }
}

/// Every TLS program, loaded once (at the first attach) and attached many times.
pub const TLS_PROGRAMS: &[&str] =
    &["tls_read_enter", "tls_write_enter", "tls_read_ex_enter", "tls_write_ex_enter", "tls_other_enter", EXIT_PROGRAM];

/// Links of the processes whose TLS library calls are hooked.
#[derive(Default)]
pub struct TlsHooks {
    links: HashMap<u32, Vec<UProbeLink>>,
    loaded: bool,
}

impl TlsHooks {
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
    ) -> Result<(), ProbeError> {
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or(ProbeError::MissingProgram("pid 0"))?);
        if !self.loaded {
            for &program in TLS_PROGRAMS {
                let prog: &mut UProbe = program_of(probes, program)?;
                prog.load().map_err(|source| ProbeError::LoadProgram { program, source })?;
            }
            self.loaded = true;
        }
        // The kernel resolves this path in our context: the descriptor names the very file that
        // was checked and parsed, in the target's mount namespace.
        let target = format!("/proc/self/fd/{}", library.file.as_raw_fd());
        // Returns first: an entry seen with its return unhooked would leave the thread inside
        // the library as far as the kernel programs know (until its next poll).
        let exits = entries.iter().map(|&(symbol, _, offset)| (symbol, EXIT_PROGRAM, offset));
        let starts = entries.iter().map(|&(symbol, call, offset)| (symbol, entry_program(call), offset));
        let mut links = Vec::with_capacity(entries.len() * 2);
        for (symbol, program, offset) in exits.chain(starts) {
            let prog: &mut UProbe = program_of(probes, program)?;
            let attach_err = |source| ProbeError::Attach { program, target: symbol, source };
            let id = prog.attach(offset, &target, scope).map_err(attach_err)?;
            links.push(prog.take_link(id).map_err(attach_err)?);
        }
        self.links.entry(pid).or_default().extend(links);
        Ok(())
    }

    /// Detaches process `pid`'s hooks (it exited, or is no longer a target).
    pub fn detach(&mut self, pid: u32) {
        self.links.remove(&pid);
    }
}

fn program_of<'a>(probes: &'a mut Probes, program: &'static str) -> Result<&'a mut UProbe, ProbeError> {
    let prog = probes.ebpf_mut().program_mut(program).ok_or(ProbeError::MissingProgram(program))?;
    prog.try_into().map_err(|source| ProbeError::LoadProgram { program, source })
}
