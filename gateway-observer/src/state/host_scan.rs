//! The host's processes, as target specs are matched against them each tick: pid, parent, comm
//! (and cgroups and listening ports when a spec asks). Reading each process's stat every tick
//! was the tick's largest cost under load (8 % of the daemon at ~9k proxied requests/s, with 73
//! processes on the host); a process already known has only its comm read, which tells an exec
//! or a rename, and its stat again when its parent is gone (it was reparented). Every
//! `FULL_SCAN_EVERY` scans all are read again, for a pid reused with the same comm.

use std::collections::HashMap;

use super::targets::{PortListeners, ProcessEntry, TargetSpec};
use crate::host::procfs;

const FULL_SCAN_EVERY: u64 = 30;

#[derive(Debug, Default)]
pub struct HostScan {
    /// pid → (parent, comm), as last read.
    known: HashMap<u32, (u32, String)>,
    scans: u64,
}

impl HostScan {
    pub fn processes(&mut self, specs: &[TargetSpec], listeners: &PortListeners) -> Vec<ProcessEntry> {
        let want_cgroups = specs.iter().any(|s| matches!(s, TargetSpec::Cgroup(_)));
        let pids = procfs::processes();
        let full = self.scans.is_multiple_of(FULL_SCAN_EVERY);
        self.scans += 1;
        let mut previous = std::mem::take(&mut self.known);
        let live: std::collections::HashSet<u32> = pids.iter().copied().collect();
        let mut processes = Vec::with_capacity(pids.len());
        for pid in pids {
            let kept = previous.remove(&pid).filter(|(parent, comm)| {
                !full && (*parent == 0 || live.contains(parent)) && procfs::comm(pid).as_deref() == Some(comm.as_str())
            });
            let Some((parent, comm)) = kept.or_else(|| procfs::parent_and_comm(pid)) else { continue };
            processes.push(ProcessEntry {
                pid,
                parent,
                comm: comm.clone(),
                cgroups: if want_cgroups { procfs::cgroups(pid) } else { Vec::new() },
                ports: listeners.ports_of(pid),
            });
            self.known.insert(pid, (parent, comm));
        }
        processes
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// A child seen, then renamed by exec: the scan that follows names it anew, and one that
    /// finds it gone drops it.
    #[test]
    fn an_exec_renames_a_known_process_and_an_exit_drops_it() {
        let listeners = PortListeners::default();
        let mut scan = HostScan::default();
        // `sh` waits for a line, then becomes `sleep`.
        let mut child =
            Command::new("sh").args(["-c", "read line; exec sleep 30"]).stdin(Stdio::piped()).spawn().expect("sh");
        let pid = child.id();
        let comm_of = |scan: &mut HostScan| {
            scan.processes(&[], &listeners).into_iter().find(|p| p.pid == pid).map(|p| (p.parent, p.comm))
        };
        let me = std::process::id();
        assert_eq!(comm_of(&mut scan), Some((me, "sh".to_owned())));
        assert_eq!(comm_of(&mut scan), Some((me, "sh".to_owned())), "a known process, unchanged");
        use std::io::Write as _;
        writeln!(child.stdin.take().expect("stdin")).expect("write");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while procfs::comm(pid).as_deref() != Some("sleep") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(comm_of(&mut scan), Some((me, "sleep".to_owned())));
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert_eq!(comm_of(&mut scan), None);
        assert!(!scan.known.contains_key(&pid));
    }
}
