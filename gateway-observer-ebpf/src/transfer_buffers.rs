//! Where a transfer's bytes are in the caller's memory: its first buffer, the buffer its last
//! bytes are in, and the iovec array they came from, from the syscall's arguments (or, inside
//! TCP, the kernel's copy of the array).

use aya_ebpf::helpers::generated::{bpf_probe_read_kernel, bpf_probe_read_user};
use gateway_observer_common::{DATA_HEAD_BYTES, ThreadState, data_shape};

/// Readv/writev of more buffers than this are not looked into (UIO_MAXIOV is 1024).
const MAX_IOV: u64 = 1024;
/// Buffers of a readv/writev searched for the one holding the last byte moved.
const TAIL_IOV_SCAN: u64 = 8;

/// An iovec array: its address (0 for a single buffer), entries, and whether it is the kernel's
/// copy.
pub type IovArray = (u64, u64, bool);

/// Where the bytes moved are: (first buffer, its bytes moved, end of the last bytes moved or 0
/// when unknown, how many of those last bytes are in that one buffer), and the iovec array they
/// came from (0 for a single buffer), its entries and whether it is the kernel's copy.
#[inline(always)]
pub fn buffers(state: &ThreadState, len: u64) -> ((u64, u64, u64, u64), IovArray) {
    let (iov, count, kernel_copy) = match state.data_shape {
        data_shape::READ_BUF | data_shape::WRITE_BUF => {
            return ((state.data_buf, len, tail_after_head(state.data_buf, len), len), (0, 1, false));
        }
        data_shape::READ_IOV | data_shape::WRITE_IOV => (state.data_buf, state.data_count, false),
        data_shape::READ_KERNEL_IOV | data_shape::WRITE_KERNEL_IOV => (state.data_buf, state.data_count, true),
        data_shape::READ_MSG | data_shape::WRITE_MSG => {
            // struct msghdr (x86-64 user ABI): msg_iov at 16, msg_iovlen at 24.
            let iov: u64 = read_user(state.data_buf + 16);
            let count: u64 = read_user(state.data_buf + 24);
            (iov, count, false)
        }
        _ => return ((0, 0, 0, 0), (0, 0, false)),
    };
    (iov_buffers(iov, count, len, kernel_copy), (iov, count, kernel_copy))
}

/// The end of the last bytes moved, when `len` bytes from `buf` were moved: 0 (no tail to copy)
/// when the head holds them all, which is most requests (a copy costs about as much as its bytes).
#[inline(always)]
fn tail_after_head(buf: u64, len: u64) -> u64 {
    if len <= DATA_HEAD_BYTES as u64 { 0 } else { buf + len }
}

/// The first iovec holds the head; the tail is in the iovec where the bytes moved end, looked
/// for among the first few (headers + body + chunk trailer is the common shape of a response).
/// The iovec array is in user memory at the syscall, in the kernel's copy inside TCP. The first
/// two entries come in one copy: a probe read costs ~100 ns whatever its size, and two entries
/// (headers, body) are what gateways write most.
#[inline(always)]
fn iov_buffers(iov: u64, count: u64, len: u64, kernel_copy: bool) -> (u64, u64, u64, u64) {
    if iov == 0 || count == 0 || count > MAX_IOV {
        return (0, 0, 0, 0);
    }
    let read = |addr: u64| -> u64 { if kernel_copy { read_kernel(addr) } else { read_user(addr) } };
    // [base 0, len 0, base 1, len 1]; only the first two words when there is one entry.
    let mut entries = [0u64; 4];
    let bytes = if count >= 2 { 32 } else { 16 };
    copy_words(&mut entries, iov, bytes, kernel_copy);
    let (base, first_len) = (entries[0], entries[1]);
    if first_len >= len {
        return (base, len, tail_after_head(base, len), len);
    }
    if count >= 2 && first_len + entries[3] >= len {
        return (base, first_len, entries[2] + (len - first_len), len - first_len);
    }
    let mut before = first_len + entries[3];
    let mut index = 2u64;
    while index < TAIL_IOV_SCAN && index < count {
        let entry = iov + index * 16;
        let buf_len = read(entry + 8);
        if before + buf_len >= len {
            let buf = read(entry);
            return (base, first_len, buf + (len - before), len - before);
        }
        before += buf_len;
        index += 1;
    }
    (base, first_len, 0, 0)
}

/// Copies `bytes` (16 or 32) from `addr` into `words`; a fault leaves zeros.
#[inline(always)]
fn copy_words(words: &mut [u64; 4], addr: u64, bytes: u32, kernel_copy: bool) {
    let dst = words.as_mut_ptr().cast();
    // SAFETY: `words` holds 32 bytes and `bytes` is at most 32.
    let failed = unsafe {
        if kernel_copy {
            bpf_probe_read_kernel(dst, bytes, addr as *const _)
        } else {
            bpf_probe_read_user(dst, bytes, addr as *const _)
        }
    } != 0;
    if failed {
        *words = [0; 4];
    }
}

#[inline(always)]
fn read_kernel(addr: u64) -> u64 {
    let mut value = 0u64;
    // SAFETY: copies 8 bytes of kernel memory into a local; a fault leaves 0.
    unsafe {
        bpf_probe_read_kernel((&mut value as *mut u64).cast(), 8, addr as *const _);
    }
    value
}

#[inline(always)]
pub fn read_user<T: Default>(addr: u64) -> T {
    let mut value = T::default();
    // SAFETY: copies size_of::<T>() bytes of user memory into a local; a fault leaves the default.
    unsafe {
        bpf_probe_read_user((&mut value as *mut T).cast(), core::mem::size_of::<T>() as u32, addr as *const _);
    }
    value
}
