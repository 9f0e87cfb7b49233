//! Maps and load-time globals shared by every program, and the small helpers they use.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use gateway_observer_common::{
    Event, HistKey, HistValue, MAX_HIST_ENTRIES, MAX_SYSCALL_NR, MAX_TARGETS, MAX_THREADS,
    ProbeConfig, RINGBUF_BYTES, TargetInfo, ThreadState,
    drop_index,
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
};

#[inline(always)]
pub fn config() -> ProbeConfig {
    // SAFETY: a read of our own static; volatile so the compiler keeps the load the loader patches.
    unsafe { core::ptr::read_volatile(&PROBE_CONFIG) }
}

/// Processes (tgids) to watch: userspace adds them, fork adds their children.
#[map]
pub static TARGETS: HashMap<u32, TargetInfo> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// One byte per possible tid (sized to the host's pid_max at load): 1 for a target thread. An
/// array lookup is inlined by the verifier, far cheaper than hashing, and it is the only work
/// the hot paths do for the rest of the host's threads.
#[map]
pub static TRACKED: Array<u8> = Array::with_max_entries(1, 0);

#[inline(always)]
pub fn is_tracked(tid: u32) -> bool {
    TRACKED.get(tid).is_some_and(|flag| *flag != 0)
}

#[inline(always)]
pub fn set_tracked(tid: u32, tracked: bool) {
    if let Some(flag) = TRACKED.get_ptr_mut(tid) {
        // SAFETY: a byte in an array map; a concurrent writer of the same tid cannot exist (a
        // tid is created and exits once).
        unsafe { *flag = tracked as u8 };
    }
}

/// State of target threads by tid; only looked up once `TRACKED` says the thread is ours.
#[map]
pub static THREADS: HashMap<u32, ThreadState> = HashMap::with_max_entries(MAX_THREADS, 0);

/// log2 histograms by (tgid, kind, bucket); per CPU because several CPUs update one process's.
#[map]
pub static HIST: PerCpuHashMap<HistKey, HistValue> =
    PerCpuHashMap::with_max_entries(MAX_HIST_ENTRIES, 0);

/// `syscall_class::*` for each syscall number, written by userspace before attaching.
#[map]
pub static SYSCALL_CLASS: Array<u8> = Array::with_max_entries(MAX_SYSCALL_NR, 0);

/// What could not be recorded, by `drop_index::*`.
#[map]
pub static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(drop_index::COUNT, 0);

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

#[inline(always)]
pub fn count_drop(index: u32) {
    if let Some(counter) = DROPS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot; no other CPU writes it.
        unsafe { *counter += 1 };
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

/// Sends one event, counting a full ring buffer instead of failing silently.
#[inline(always)]
pub fn emit(event: Event) {
    match EVENTS.reserve::<Event>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(0);
        }
        None => count_drop(drop_index::RINGBUF),
    }
}

/// Index of the log2 bucket for `value`: 0 for 0, else 1 + floor(log2(value)).
/// Written as a fixed sequence of shifts: no loop for the verifier, no clz instruction in BPF.
#[inline(always)]
pub fn log2_bucket(mut value: u64) -> u16 {
    if value == 0 {
        return 0;
    }
    let mut bucket: u16 = 1;
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

#[inline(always)]
pub fn hist_add(tgid: u32, kind: u16, value_ns: u64) {
    let key = HistKey { tgid, kind, bucket: log2_bucket(value_ns) };
    if let Some(slot) = HIST.get_ptr_mut(key) {
        // SAFETY: a per-CPU value; no other CPU writes it.
        unsafe { add_sample(&mut *slot, value_ns) };
        return;
    }
    // BPF_NOEXIST: another CPU may have inserted the key meanwhile; then add to it.
    let first = HistValue { count: 1, sum_ns: value_ns };
    if HIST.insert(key, first, BPF_NOEXIST).is_err() {
        match HIST.get_ptr_mut(key) {
            // SAFETY: as above.
            Some(slot) => unsafe { add_sample(&mut *slot, value_ns) },
            None => count_drop(drop_index::HIST_MAP_FULL),
        }
    }
}

#[inline(always)]
fn add_sample(slot: &mut HistValue, value_ns: u64) {
    slot.count += 1;
    slot.sum_ns += value_ns;
}

/// `bpf_map_update_elem` flag: only create, never replace.
pub const BPF_NOEXIST: u64 = 1;
