//! Where a transfer's bytes are in the caller's memory: its first buffer, the buffer its last
//! bytes are in, and the iovec array they came from, from the syscall's arguments (or, inside
//! TCP, the kernel's copy of the array); a small transfer over many buffers, gathered.

use aya_ebpf::{
    cty::c_void,
    helpers::generated::{bpf_loop, bpf_probe_read_kernel, bpf_probe_read_user},
    macros::map,
    maps::PerCpuArray,
};
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

/// A transfer of at most the head's size over two or more user buffers, its first short of it:
/// `gather_small_transfer` takes it.
#[inline(always)]
pub fn scattered_small(iovs: IovArray, first_len: u64, len: u64) -> bool {
    let (iov, count, kernel_copy) = iovs;
    iov != 0 && !kernel_copy && count >= 2 && first_len < len && len <= DATA_HEAD_BYTES as u64
}

/// Buffers of a small transfer gathered into its head (below).
const GATHER_IOV: u64 = 16;

/// Bytes one CPU gathers a transfer into: twice the head, so that the verifier sees each piece's
/// copy (an offset under the head's size, a length up to it) stay inside.
#[repr(C)]
pub struct Gathered {
    pub bytes: [u8; 2 * DATA_HEAD_BYTES],
}

#[map]
static GATHERED: PerCpuArray<Gathered> = PerCpuArray::with_max_entries(1, 0);

/// A transfer of at most the head's size spread over more buffers than the walk follows (gRPC's
/// C core writes a buffer per header name and value, a frame header may straddle two) gathered
/// whole, in order, from the user iovec array `iovs` (its first buffer holding `first_len` of the
/// `len` bytes): where the bytes are (valid for this program run), or None when they do not all
/// come from the first `GATHER_IOV` buffers. One buffer per `bpf_loop` step: the verifier checks
/// the step once, where an unrolled loop was checked again for every state reaching it (a
/// million instructions in the socket tracepoints).
#[inline(always)]
pub fn gather_small_transfer(iovs: IovArray, first_len: u64, len: u64) -> Option<*const Gathered> {
    if !scattered_small(iovs, first_len, len) {
        return None;
    }
    let (iov, count, _) = iovs;
    let mut gather = Gather { iov, len, copied: 0, failed: 0 };
    let steps = count.min(GATHER_IOV) as u32;
    // SAFETY: the step reads `gather` (on this stack) only while `bpf_loop` runs.
    unsafe { bpf_loop(steps, gather_step as *mut c_void, (&raw mut gather).cast(), 0) };
    let gathered = GATHERED.get_ptr_mut(0)?;
    (gather.failed == 0 && gather.copied == len).then_some(gathered.cast_const())
}

/// The state `gather_step` carries from one buffer to the next.
#[repr(C)]
struct Gather {
    iov: u64,
    len: u64,
    copied: u64,
    failed: u64,
}

/// Copies buffer `index` of the iovec array into `GATHERED`, after the bytes before it; 1 ends the
/// loop (all gathered, or a failure).
#[inline(never)]
extern "C" fn gather_step(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `gather_small_transfer`'s `Gather`, alive while its `bpf_loop` runs.
    let gather = unsafe { &mut *ctx.cast::<Gather>() };
    if gather.copied >= gather.len {
        return 1;
    }
    let Some(gathered) = GATHERED.get_ptr_mut(0) else {
        gather.failed = 1;
        return 1;
    };
    let mut entry = [0u64; 4];
    copy_words(&mut entry, gather.iov + (index & (GATHER_IOV - 1)) * 16, 16, false);
    let (base, buf_len) = (entry[0], entry[1]);
    let size = buf_len.min(gather.len - gather.copied);
    let at = gather.copied;
    if size > DATA_HEAD_BYTES as u64 || at >= DATA_HEAD_BYTES as u64 {
        gather.failed = 1;
        return 1;
    }
    // SAFETY: at most the head's size, at an offset under it, into the per-CPU area of twice its
    // size.
    let failed = unsafe {
        let dst = (*gathered).bytes.as_mut_ptr().add(at as usize);
        size > 0 && bpf_probe_read_user(dst.cast(), size as u32, base as *const _) != 0
    };
    if failed {
        gather.failed = 1;
        return 1;
    }
    gather.copied += size;
    0
}
