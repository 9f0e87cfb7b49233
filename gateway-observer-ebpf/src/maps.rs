//! Maps and load-time globals shared by every program, and the small helpers they use.
//!
//! Hot paths (every context switch and syscall on the host) do array lookups only, which the
//! verifier inlines: `TRACKED[tid]` says whether a thread is ours and where its state is, and
//! `THREADS[slot]` holds that state. Hash maps are touched only at fork.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, Queue, RingBuf, StackTrace},
};
use gateway_observer_common::{
    BPF_F_MMAPABLE, Event, MAX_BLOCK_DETAIL_THREADS, MAX_STACKS, MAX_SYSCALL_NR, MAX_TARGETS, MAX_THREADS, ProbeConfig,
    RINGBUF_BYTES, TargetInfo, ThreadState, drop_index, ring_wakes_reader,
};

/// Set by userspace at load time (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static PROBE_CONFIG: ProbeConfig = ProbeConfig {
    block_threshold_ns: 10_000_000,
    task_pid_offset: 0,
    task_tgid_offset: 0,
    regs_arg0_offset: 0,
    regs_arg1_offset: 0,
    regs_arg3_offset: 0,
    regs_arg4_offset: 0,
    busy_iteration_ns: 100_000_000,
    regs_arg2_offset: 0,
    sock_family_offset: 0,
    sock_local_port_offset: 0,
    sock_remote_port_offset: 0,
    sock_local_addr_offset: 0,
    sock_remote_addr_offset: 0,
    sock_local_addr6_offset: 0,
    sock_remote_addr6_offset: 0,
    sock_protocol_offset: 0,
    tcp_snd_una_offset: 0,
    tcp_snd_nxt_offset: 0,
    sock_state_offset: 0,
    sock_net_offset: 0,
    net_inum_offset: 0,
    regs_syscall_nr_offset: 0,
    msg_iter_type_offset: 0,
    msg_iter_buf_offset: 0,
    msg_iter_count_offset: 0,
    msg_iter_segs_offset: 0,
    iter_type_ubuf: 0,
    iter_type_iovec: 0,
    silence_tls: 0,
    _pad: 0,
    thread_quota: 0,
    socket_quota: 0,
    regs_go_g_offset: 0,
    icsk_ulp_ops_offset: 0,
};

/// The loader patches `PROBE_CONFIG` after compilation, so the compiler must not fold its
/// fields into constants. A volatile read of its address hides them, and each field is then
/// loaded where used, only the fields used (a volatile read of the whole struct loaded all of
/// its ~30 fields at every call, on every context switch).
#[inline(always)]
pub fn config() -> &'static ProbeConfig {
    // SAFETY: reads a local holding the static's address; the static lives for the program.
    unsafe { &*core::ptr::read_volatile(&&raw const PROBE_CONFIG) }
}

/// Processes (tgids) to watch: userspace adds them, fork adds their children.
#[map]
pub static TARGETS: HashMap<u32, TargetInfo> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// One entry per possible tid (sized to the host's pid_max at load): 0 for threads that are
/// not ours, else 1 + the thread's slot in `THREADS`.
#[map]
pub static TRACKED: Array<u32> = Array::with_max_entries(1, 0);

/// Target thread state by slot. mmap-able, so userspace reads every slot without a syscall each.
#[map]
pub static THREADS: Array<ThreadState> = Array::with_max_entries(MAX_THREADS, BPF_F_MMAPABLE);

/// Free slots of `THREADS`: userspace fills it, fork takes from it, userspace gives back.
#[map]
pub static FREE_SLOTS: Queue<u32> = Queue::with_max_entries(MAX_THREADS, 0);

/// `syscall_class::*` (low bits) and `data_shape::*` (high bits) for each syscall number,
/// written by userspace before attaching.
#[map]
pub static SYSCALL_CLASS: Array<u8> = Array::with_max_entries(MAX_SYSCALL_NR, 0);

/// What could not be recorded, by `drop_index::*`.
#[map]
pub static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(drop_index::COUNT, 0);

/// Which long blocks userspace wants one by one (tid → `block_detail::*`), for the blocked-loop
/// detector: those of the event loops it judges (with the blocking call's stack), and those the
/// threads that end JVM pauses end. Every other long block is only counted
/// (`ThreadState::long_blocks`): a pool of 2,000 threads napping 100 ms would otherwise send
/// 20,000 records and take nearly as many stacks a second.
#[map]
pub static BLOCK_DETAIL: HashMap<u32, u8> = HashMap::with_max_entries(MAX_BLOCK_DETAIL_THREADS, 0);

/// User stacks of long blocks, by id (the kernel dedups identical stacks).
#[map]
pub static STACKS: StackTrace = StackTrace::with_max_entries(MAX_STACKS, 0);

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

/// The state of a target thread, or None for every other thread (the common, cheap case).
#[inline(always)]
pub fn thread_state(tid: u32) -> Option<&'static mut ThreadState> {
    let slot = *TRACKED.get(tid)?;
    if slot == 0 {
        return None;
    }
    let state = THREADS.get_ptr_mut(slot - 1)?;
    // SAFETY: an array value pointer, valid for this program run; a thread's slot is written by
    // that thread's own events, which never run concurrently for the same phase of its life.
    Some(unsafe { &mut *state })
}

/// Marks `tid` as ours, in `slot`, or (None) as no longer ours.
#[inline(always)]
pub fn set_tracked(tid: u32, slot: Option<u32>) {
    if let Some(entry) = TRACKED.get_ptr_mut(tid) {
        // SAFETY: an array value pointer; a tid is created and exits once, so no two writers.
        unsafe { *entry = slot.map_or(0, |s| s + 1) };
    }
}

#[inline(always)]
pub fn count_drop(index: u32) {
    if let Some(counter) = DROPS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot; no other CPU writes it.
        unsafe { *counter += 1 };
    }
}

/// Takes one from a target's budget (`TargetInfo::thread_budget`/`socket_budget`), or counts
/// `drop` and refuses when it is spent. The check and the take are not one atomic step: CPUs
/// racing past zero overshoot by one each, which bounds the overshoot by the CPU count.
#[inline(always)]
pub fn take_from_budget(budget: *mut i64, drop: u32) -> bool {
    // SAFETY: `budget` points into a TARGETS value, valid for this program run.
    let left = unsafe { core::ptr::read_volatile(budget) };
    if left <= 0 {
        count_drop(drop);
        return false;
    }
    // SAFETY: as above; an atomic add, since other CPUs take from the same budget.
    unsafe {
        core::intrinsics::atomic_xadd::<i64, i64, { core::intrinsics::AtomicOrdering::Relaxed }>(budget, -1);
    }
    true
}

/// Takes a connection from the budget of target `tgid`; false (counted) when it has none left
/// or is not a target.
#[inline(always)]
pub fn take_socket_budget(tgid: u32) -> bool {
    match TARGETS.get_ptr_mut(tgid) {
        // SAFETY: a map value pointer, valid for this program run.
        Some(target) => take_from_budget(unsafe { &raw mut (*target).socket_budget }, drop_index::SOCKS_QUOTA),
        None => false,
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: a helper with no arguments and no side effects.
    unsafe { bpf_ktime_get_ns() }
}

/// (tid, tgid) of the current task.
#[inline(always)]
pub fn current_ids() -> (u32, u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    (pid_tgid as u32, (pid_tgid >> 32) as u32)
}

/// Reads a field of a kernel struct that a BTF tracepoint handed us, at an offset learned from
/// BTF. The offset comes from frozen `.rodata`, so the verifier knows it as a constant and checks
/// the access against the struct's BTF; the load itself is a plain (fault-guarded) memory read,
/// much cheaper than a `bpf_probe_read_kernel` call.
#[inline(always)]
pub fn btf_field<T: Copy>(base: *const u8, offset: u32) -> T {
    // SAFETY: base is a BTF-typed pointer argument of a tp_btf program; the verifier rejects the
    // program at load if offset/size do not match a field, and guards the load against faults.
    unsafe { core::ptr::read_volatile(base.wrapping_add(offset as usize).cast::<T>()) }
}

/// Ring-buffer submit flags and query: records are committed without waking the daemon (a
/// wakeup is an inter-processor interrupt, several microseconds in a VM, per record); the daemon
/// drains its rings on a short timer, and is woken only when a ring is getting full.
const BPF_RB_NO_WAKEUP: u64 = 1;
pub const BPF_RB_FORCE_WAKEUP: u64 = 2;
pub const BPF_RB_AVAIL_DATA: u64 = 0;

/// The submit flags for a record of `record_bytes` in a ring of `capacity` bytes now holding
/// `unread` bytes (this record included): see `ring_wakes_reader`.
#[inline(always)]
pub fn submit_flags(unread: u64, capacity: u32, record_bytes: usize) -> u64 {
    if ring_wakes_reader(unread, capacity, record_bytes as u64) { BPF_RB_FORCE_WAKEUP } else { BPF_RB_NO_WAKEUP }
}

/// Sends one event, counting a full ring buffer instead of failing silently.
#[inline(always)]
pub fn emit(event: Event) {
    match EVENTS.reserve::<Event>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(submit_flags(EVENTS.query(BPF_RB_AVAIL_DATA), RINGBUF_BYTES, size_of::<Event>()));
        }
        None => count_drop(drop_index::RINGBUF),
    }
}

/// Index of the log2 bucket for `value`: 0 for 0, else 1 + floor(log2(value)), capped at the
/// last bucket. Written as a fixed sequence of shifts: no loop for the verifier, no clz in BPF.
#[inline(always)]
pub fn log2_bucket(mut value: u64) -> usize {
    if value == 0 {
        return 0;
    }
    let mut bucket: usize = 1;
    if value >= 1 << 32 {
        value >>= 32;
        bucket += 32;
    }
    if value >= 1 << 16 {
        value >>= 16;
        bucket += 16;
    }
    if value >= 1 << 8 {
        value >>= 8;
        bucket += 8;
    }
    if value >= 1 << 4 {
        value >>= 4;
        bucket += 4;
    }
    if value >= 1 << 2 {
        value >>= 2;
        bucket += 2;
    }
    if value >= 1 << 1 {
        bucket += 1;
    }
    bucket
}

/// Counts `value_ns` in a per-thread log2 histogram.
#[inline(always)]
pub fn hist_add(hist: &mut [u32; gateway_observer_common::THREAD_HIST_BUCKETS], value_ns: u64) {
    let bucket = log2_bucket(value_ns).min(hist.len() - 1);
    if let Some(count) = hist.get_mut(bucket) {
        *count = count.wrapping_add(1);
    }
}
