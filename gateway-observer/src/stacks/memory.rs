//! A bounded copy of a stopped thread's stack, from its stack pointer up, with
//! `process_vm_readv` (no ptrace stop: the thread never notices). The copy may be short: a stack
//! ends (the main thread's near its top, a thread's at its guard gap) before the window does.

use std::io;

/// Bytes above the stack pointer copied: deep enough for the native frames of an interpreter's
/// or a server's call chain (CPython's eval loop frames are ~200 bytes each), small enough to read
/// for many threads per alert.
pub const WINDOW: usize = 64 << 10;
const PAGE: u64 = 4096;

/// The copy of `[sp, sp + bytes.len())`.
#[derive(Debug, Default, Clone)]
pub struct StackCopy {
    pub sp: u64,
    pub bytes: Vec<u8>,
}

impl StackCopy {
    /// The 8 bytes at `addr`, if copied.
    pub fn word(&self, addr: u64) -> Option<u64> {
        let start = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let bytes = self.bytes.get(start..start.checked_add(8)?)?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?))
    }
}

/// Copies up to `window` bytes of `tid`'s memory from `sp` up.
pub fn read_stack(tid: u32, sp: u64, window: usize) -> io::Result<StackCopy> {
    let mut bytes = vec![0u8; window];
    // One remote iovec per page: the kernel stops at the first page it cannot read and a short
    // transfer never splits an iovec, so what came is exactly the readable start of the window.
    let mut remote = Vec::with_capacity(window / PAGE as usize + 1);
    let end = sp.saturating_add(window as u64);
    let mut at = sp;
    while at < end {
        let next = ((at / PAGE) + 1).saturating_mul(PAGE).min(end);
        remote.push(libc::iovec { iov_base: at as *mut libc::c_void, iov_len: (next - at) as usize });
        at = next;
    }
    let local = libc::iovec { iov_base: bytes.as_mut_ptr().cast(), iov_len: bytes.len() };
    let pid = libc::pid_t::try_from(tid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `local` points into `bytes`, ours and `window` long for the call; the remote iovecs
    // are addresses in the other process, which the kernel checks (they are never dereferenced
    // here). IOV_MAX (1024) is above the 17 iovecs of a 64 KiB window.
    let read = unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), remote.len() as libc::c_ulong, 0) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    bytes.truncate(usize::try_from(read).unwrap_or(0));
    Ok(StackCopy { sp, bytes })
}

/// Reads exactly `buf.len()` bytes of process `pid`'s memory at `addr`; false if any of them
/// cannot be read (unmapped, the process gone, not permitted).
pub fn read_exact(pid: u32, addr: u64, buf: &mut [u8]) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` points into `buf`, ours and `buf.len()` long for the call; `remote` is an
    // address in the other process, which the kernel checks (never dereferenced here).
    let read = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    usize::try_from(read).is_ok_and(|n| n == buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_stack_and_stops_at_what_is_unmapped() {
        let marker: u64 = std::hint::black_box(0x5eed_cafe_f00d_0001);
        let at = &marker as *const u64 as u64;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let copy = read_stack(tid, at, WINDOW).expect("process_vm_readv on ourselves");
        assert_eq!(copy.word(at), Some(0x5eed_cafe_f00d_0001));
        assert_eq!(copy.word(at - 8), None, "below the window");
        // A page nobody mapped (the first page): nothing, yet no error.
        let none = read_stack(tid, 0x1000, WINDOW).map(|c| c.bytes.len());
        assert!(matches!(none, Ok(0) | Err(_)), "{none:?}");
    }

    #[test]
    fn a_window_across_the_end_of_a_mapping_is_short() {
        // Two pages mapped, the second taken away: a copy from the middle of the first is short.
        // SAFETY: an anonymous private mapping of ours; unmapped below before the test ends.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: the second page of the mapping just made.
        assert_eq!(unsafe { libc::munmap(base.cast::<u8>().add(PAGE as usize).cast(), PAGE as usize) }, 0);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let copy = read_stack(tid, base as u64 + 0x800, WINDOW).expect("a short read is no error");
        assert_eq!(copy.bytes.len(), 0x800);
        // SAFETY: the first page, still ours.
        unsafe { libc::munmap(base, PAGE as usize) };
    }
}
