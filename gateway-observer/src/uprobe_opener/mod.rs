//! Opens per-process uprobes (perf events of the kernel's `uprobe` PMU) for `probes::tls`.
//!
//! Since "perf: Revert to requiring CAP_SYS_ADMIN for uprobes" (6.16, backported to the stable
//! 6.1 and 6.12 lines) `perf_uprobe_event_init` refuses a caller without CAP_SYS_ADMIN with
//! `EACCES`: CAP_PERFMON no longer suffices, because a uprobe planted mid-instruction corrupts
//! the traced program. The daemon drops CAP_SYS_ADMIN once started, so targets that appear later
//! (an nginx started after it, the workers of `nginx -s reload`) get their uprobes from a small
//! process forked before the drop ([`helper`]): it keeps CAP_SYS_ADMIN with only what it needs to
//! check a request, opens the event and passes its fd back. Attaching the program to that fd
//! needs no capability (`PERF_EVENT_IOC_SET_BPF`), so the daemon does it; closing the fd
//! detaches. `check`, which keeps its capabilities, opens in process.

mod fd_passing;
pub mod helper;

use std::{
    fs::File,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use crate::host::mapped_files::{self, MappedError, MappedFile};

/// The kernel's `uprobe` PMU: its perf type and the config bit that makes a uretprobe.
#[derive(Debug, Clone, Copy)]
pub struct UprobePmu {
    kind: u32,
    retprobe_bit: u32,
}

const PMU_DIR: &str = "/sys/bus/event_source/devices/uprobe";

impl UprobePmu {
    pub fn read() -> io::Result<Self> {
        let kind = std::fs::read_to_string(format!("{PMU_DIR}/type"))?;
        let kind = kind.trim().parse().map_err(|_| io::Error::other(format!("{PMU_DIR}/type: {kind:?}")))?;
        let format = std::fs::read_to_string(format!("{PMU_DIR}/format/retprobe"))?;
        Ok(Self { kind, retprobe_bit: parse_retprobe_bit(&format)? })
    }
}

/// The bit of `config:N` (the retprobe format file).
fn parse_retprobe_bit(format: &str) -> io::Result<u32> {
    format
        .trim()
        .strip_prefix("config:")
        .and_then(|bit| bit.parse().ok())
        .filter(|&bit| bit < 64)
        .ok_or_else(|| io::Error::other(format!("uprobe retprobe format {format:?}")))
}

/// Where the opened events come from.
pub enum UprobeOpener {
    /// This process opens them (it holds CAP_SYS_ADMIN for its life).
    InProcess(UprobePmu),
    /// The helper forked before the capability drop opens them.
    Helper(helper::Helper),
}

/// One uprobe to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobeRequest {
    pub pid: u32,
    /// File offset of the probed instruction in the library.
    pub offset: u64,
    pub retprobe: bool,
}

impl UprobeOpener {
    /// The file process `pid` maps at `mapped`'s range, opened through `/proc/PID/map_files`
    /// (its path deleted or naming another file): the helper holds the capability that needs.
    pub fn open_mapped(&self, pid: u32, mapped: &MappedFile) -> Result<File, helper::OpenError> {
        match self {
            Self::InProcess(_) => mapped_files::open(pid, mapped).map_err(|e| match e {
                MappedError::Io(e) => helper::OpenError::Kernel(e),
                MappedError::NotRegular | MappedError::Mismatch => {
                    helper::OpenError::Refused(helper::Refusal::NotMapped)
                }
            }),
            Self::Helper(helper) => helper.open_mapped(pid, mapped),
        }
    }

    /// The event of `request` on `library` (opened in the target's root), enabled, no program yet.
    pub fn open(&self, library: &File, request: UprobeRequest) -> Result<OwnedFd, helper::OpenError> {
        match self {
            Self::InProcess(pmu) => perf_event_open(*pmu, library, request).map_err(helper::OpenError::Kernel),
            Self::Helper(helper) => helper.open(library, request),
        }
    }
}

/// `struct perf_event_attr` up to `config2` (`PERF_ATTR_SIZE_VER1`, enough for uprobes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    /// `uprobe_path`: a user pointer to the file's path.
    config1: u64,
    /// `probe_offset`.
    config2: u64,
}

/// `_IO('$', 0)` and `_IOW('$', 8, u32)` (linux/perf_event.h; the same on x86-64 and arm64).
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
/// `PERF_FLAG_FD_CLOEXEC`.
const FD_CLOEXEC_FLAG: libc::c_ulong = 1 << 3;

/// Opens the uprobe of `request` with this process's capabilities. The kernel resolves the path
/// in our context: `/proc/self/fd/N` names the very file that was checked.
fn perf_event_open(pmu: UprobePmu, library: &File, request: UprobeRequest) -> io::Result<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", library.as_raw_fd())).map_err(io::Error::other)?;
    let attr = PerfEventAttr {
        kind: pmu.kind,
        size: size_of::<PerfEventAttr>() as u32,
        config: if request.retprobe { 1 << pmu.retprobe_bit } else { 0 },
        config1: path.as_ptr() as u64,
        config2: request.offset,
        ..PerfEventAttr::default()
    };
    let pid = libc::pid_t::try_from(request.pid).map_err(io::Error::other)?;
    // SAFETY: `attr` is a valid perf_event_attr of the size it states, and `path` outlives the call.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, &attr, pid, -1 as libc::c_int, -1 as libc::c_int, FD_CLOEXEC_FLAG)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Runs the program `program` (a loaded kprobe-type program) on the uprobe `event` and enables
/// it. Needs no capability: the program was loaded and the event opened by those who had them.
pub fn set_program(event: &OwnedFd, program: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    for (request, arg) in [(PERF_EVENT_IOC_SET_BPF, program.as_raw_fd()), (PERF_EVENT_IOC_ENABLE, 0)] {
        // SAFETY: ioctls on a perf event fd we own, with an fd or 0 as their argument.
        if unsafe { libc::ioctl(event.as_raw_fd(), request, arg) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retprobe_bit_is_read_from_the_format_file() {
        assert_eq!(parse_retprobe_bit("config:0\n").unwrap(), 0);
        assert_eq!(parse_retprobe_bit("config:12").unwrap(), 12);
        assert!(parse_retprobe_bit("config:64").is_err());
        assert!(parse_retprobe_bit("config1:0-63").is_err());
    }

    #[test]
    fn the_attr_layout_matches_the_kernel_first_version() {
        // PERF_ATTR_SIZE_VER1 = 72: config2 ends it.
        assert_eq!(size_of::<PerfEventAttr>(), 72);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config1), 56);
    }
}
