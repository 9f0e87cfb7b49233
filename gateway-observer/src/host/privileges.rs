//! The capabilities the running daemon keeps once its programs are loaded and attached and its
//! listener is bound, and the drop to them: every other capability leaves the effective,
//! permitted, inheritable, ambient and bounding sets, and no-new-privileges is set, so a bug in
//! the daemon (it parses what the gateways send and write) cannot use more than it needs.
//! A capability the daemon was started without (a systemd `CapabilityBoundingSet=`) stays absent;
//! that is not an error. Capabilities belong to threads: the drop must run while the daemon has
//! one thread, and every thread started after it inherits the reduced sets.

use std::{fmt, io};

/// One capability kept for the daemon's life.
pub struct Kept {
    /// Its number (linux/capability.h).
    pub cap: u32,
    pub name: &'static str,
    pub why: &'static str,
}

/// What the daemon does after startup, and the capability each needs. Not kept: CAP_SYS_ADMIN
/// (no setns: `port=` targets in other network namespaces are read from /proc/PID/net/tcp and
/// /proc/PID/fd), CAP_SYS_RESOURCE (memlock matters only for loading, and only before Linux 5.11),
/// CAP_SYS_NICE and CAP_NET_BIND_SERVICE (the nice value is set and the port bound before the drop).
pub const KEPT: [Kept; 4] = [
    Kept {
        cap: 2,
        name: "CAP_DAC_READ_SEARCH",
        why: "list /proc/PID/fd (mode 0500, owned by the gateway's user) and read the gateways' files through /proc/PID/root",
    },
    Kept {
        cap: 19,
        name: "CAP_SYS_PTRACE",
        why: "ptrace-mode reads of other users' processes: /proc/PID/{fd/N,ns/net,root,maps,task/TID/syscall}",
    },
    Kept { cap: 38, name: "CAP_PERFMON", why: "attach tracing programs at run time (per-target uprobes)" },
    Kept {
        cap: 39,
        name: "CAP_BPF",
        why: "read and write the maps each tick (every bpf() call needs it before Linux 6.5 when unprivileged BPF is off) and load programs at run time",
    },
];

const CAP_SETPCAP: u32 = 8;
/// _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Why the drop failed. Each leaves the daemon with more than it should have: `run` stops.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("{0} threads at the capability drop, which changes the calling thread only")]
    Threads(usize),
    #[error("cannot read the capability sets: {0}")]
    Read(io::Error),
    #[error("cannot drop capability {cap} from the bounding set: {source}")]
    Bounding { cap: u32, source: io::Error },
    #[error("cannot clear the ambient capabilities: {0}")]
    Ambient(io::Error),
    #[error("cannot set the capability sets: {0}")]
    Set(io::Error),
    #[error("cannot set no-new-privileges: {0}")]
    NoNewPrivs(io::Error),
}

/// The capability sets after the drop, for the startup line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub effective: u64,
    pub permitted: u64,
    pub bounding: u64,
    /// Kept capabilities the daemon did not have to begin with.
    pub missing: u64,
}

/// The mask of every kept capability.
pub fn kept_mask() -> u64 {
    KEPT.iter().fold(0, |mask, k| mask | 1 << k.cap)
}

fn names(mask: u64) -> String {
    let names: Vec<&str> = KEPT.iter().filter(|k| mask & 1 << k.cap != 0).map(|k| k.name).collect();
    if names.is_empty() { "none".to_owned() } else { names.join(" ") }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "capabilities kept: {}", names(self.permitted))?;
        if self.missing != 0 {
            write!(f, " (started without {})", names(self.missing))?;
        }
        if self.effective != self.permitted || self.permitted & !kept_mask() != 0 {
            write!(f, "; effective {:#x}, permitted {:#x}", self.effective, self.permitted)?;
        }
        if self.bounding & !self.permitted != 0 {
            // Narrowing it needs CAP_SETPCAP; with no-new-privileges nothing can gain from it.
            write!(f, "; bounding set left at {:#x}", self.bounding)?;
        }
        write!(f, "; all else dropped, no new privileges")
    }
}

/// Drops every capability but the kept ones the daemon has, and sets no-new-privileges.
pub fn drop_to_kept() -> Result<Outcome, PrivilegeError> {
    drop_to(kept_mask())
}

/// Drops every capability not in `wanted` (a mask by capability number), and sets
/// no-new-privileges: the daemon's drop, and the uprobe opener's (`uprobe_opener`).
pub fn drop_to(wanted: u64) -> Result<Outcome, PrivilegeError> {
    let threads = std::fs::read_dir("/proc/self/task").map_err(PrivilegeError::Read)?.count();
    if threads != 1 {
        return Err(PrivilegeError::Threads(threads));
    }
    let before = capget()?;
    let keep = before.permitted & wanted;
    let last = last_cap();
    if before.effective & 1 << CAP_SETPCAP != 0 {
        for cap in (0..=last).filter(|cap| keep & 1 << cap == 0) {
            if in_bounding_set(cap) {
                // SAFETY: prctl with integer arguments; it changes this thread's bounding set.
                if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) } != 0 {
                    return Err(PrivilegeError::Bounding { cap, source: io::Error::last_os_error() });
                }
            }
        }
    }
    // SAFETY: as above; clearing the ambient set needs no privilege.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(PrivilegeError::Ambient(io::Error::last_os_error()));
    }
    capset(Sets { effective: keep, permitted: keep, inheritable: 0 })?;
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(PrivilegeError::NoNewPrivs(io::Error::last_os_error()));
    }
    let after = capget()?;
    let bounding = (0..=last).filter(|&cap| in_bounding_set(cap)).fold(0, |mask, cap| mask | 1 << cap);
    Ok(Outcome {
        effective: after.effective,
        permitted: after.permitted,
        bounding,
        missing: wanted & !before.permitted,
    })
}

/// The highest capability this kernel knows.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
        .min(63)
}

fn in_bounding_set(cap: u32) -> bool {
    // SAFETY: prctl with integer arguments; it only reads this thread's bounding set.
    unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) == 1 }
}

/// `struct __user_cap_header_struct` (linux/capability.h).
#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`: one 32-bit word of each set.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

struct Held {
    effective: u64,
    permitted: u64,
}

struct Sets {
    effective: u64,
    permitted: u64,
    inheritable: u64,
}

/// This thread's effective and permitted sets.
fn capget() -> Result<Held, PrivilegeError> {
    let mut header = Header { version: CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: version 3 reads two data structs, and `data` holds two; pid 0 is this thread.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(PrivilegeError::Read(io::Error::last_os_error()));
    }
    let join = |low: u32, high: u32| u64::from(low) | u64::from(high) << 32;
    Ok(Held {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
    })
}

fn capset(sets: Sets) -> Result<(), PrivilegeError> {
    let split = |mask: u64| [mask as u32, (mask >> 32) as u32];
    let (e, p, i) = (split(sets.effective), split(sets.permitted), split(sets.inheritable));
    let mut header = Header { version: CAPABILITY_VERSION_3, pid: 0 };
    let data = [0, 1].map(|w| Data { effective: e[w], permitted: p[w], inheritable: i[w] });
    // SAFETY: version 3 reads two data structs, and `data` holds two; pid 0 is this thread.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(PrivilegeError::Set(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: u64 = (1 << 41) - 1;

    #[test]
    fn the_kept_set_is_the_four_capabilities_by_number() {
        assert_eq!(kept_mask(), 1 << 2 | 1 << 19 | 1 << 38 | 1 << 39);
    }

    #[test]
    fn a_full_drop_names_the_kept_set_once() {
        let outcome = Outcome { effective: kept_mask(), permitted: kept_mask(), bounding: kept_mask(), missing: 0 };
        assert_eq!(
            outcome.to_string(),
            "capabilities kept: CAP_DAC_READ_SEARCH CAP_SYS_PTRACE CAP_PERFMON CAP_BPF; all else dropped, no new privileges"
        );
    }

    #[test]
    fn capabilities_started_without_are_named_not_failed() {
        let had = kept_mask() & !(1 << 2);
        let outcome = Outcome { effective: had, permitted: had, bounding: had, missing: 1 << 2 };
        assert_eq!(
            outcome.to_string(),
            "capabilities kept: CAP_SYS_PTRACE CAP_PERFMON CAP_BPF (started without CAP_DAC_READ_SEARCH); all else dropped, no new privileges"
        );
    }

    #[test]
    fn a_bounding_set_that_could_not_be_narrowed_is_shown() {
        let outcome = Outcome { effective: kept_mask(), permitted: kept_mask(), bounding: ALL, missing: 0 };
        assert!(outcome.to_string().contains("bounding set left at 0x1ffffffffff"), "{outcome}");
    }
}
