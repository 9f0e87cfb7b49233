//! Thread and process lifecycle: follow new threads and forked children of targets, and mark
//! threads that exit so userspace can read their last totals and free their slot.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use gateway_observer_common::{Event, TargetInfo, drop_index, event_kind};

use crate::maps::{
    FREE_SLOTS, TARGETS, THREADS, btf_field, config, count_drop, current_ids, emit, now_ns, set_tracked,
    take_from_budget, thread_state,
};

/// `bpf_map_update_elem` flag: only create, never replace.
const BPF_NOEXIST: u64 = 1;

/// sched_process_fork(struct task_struct *parent, struct task_struct *child); runs in the parent,
/// for new threads and new processes alike.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> u32 {
    let (_, parent_tgid) = current_ids();
    let Some(mut target) = TARGETS.get_ptr_mut(parent_tgid) else { return 0 };
    let child: *const u8 = ctx.arg(1);
    let cfg = config();
    let child_tid: u32 = btf_field(child, cfg.task_pid_offset);
    let child_tgid: u32 = btf_field(child, cfg.task_tgid_offset);
    if child_tgid != parent_tgid {
        let info = TargetInfo {
            parent_tgid,
            _pad: 0,
            thread_budget: i64::from(cfg.thread_quota),
            socket_budget: i64::from(cfg.socket_quota),
            ring_epoch: 0,
            ring_used: 0,
        };
        if TARGETS.insert(child_tgid, info, BPF_NOEXIST).is_err() {
            count_drop(drop_index::TARGETS_FULL);
            return 0;
        }
        let Some(child_target) = TARGETS.get_ptr_mut(child_tgid) else { return 0 };
        target = child_target;
        emit(Event {
            kind: event_kind::PROCESS_FORK,
            tid: child_tid,
            tgid: parent_tgid,
            reason: child_tgid,
            timestamp_ns: now_ns(),
            ..Event::default()
        });
    }
    // SAFETY: a map value pointer, valid for this program run.
    if !take_from_budget(unsafe { &raw mut (*target).thread_budget }, drop_index::THREADS_QUOTA) {
        return 0;
    }
    let Ok(Some(slot)) = FREE_SLOTS.pop() else {
        count_drop(drop_index::THREADS_FULL);
        return 0;
    };
    let Some(state) = THREADS.get_ptr_mut(slot) else { return 0 };
    // SAFETY: a free slot, owned by nobody until TRACKED points at it below. Userspace cleared it
    // before returning it to FREE_SLOTS, so only the identity needs writing.
    unsafe {
        (*state).tid = child_tid;
        (*state).tgid = child_tgid;
        (*state).syscall_nr = -1;
    }
    set_tracked(child_tid, Some(slot));
    0
}

/// sched_process_exit(struct task_struct *p, bool group_dead); runs in the exiting thread.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(_ctx: BtfTracePointContext) -> u32 {
    let (tid, tgid) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    if let Ok(comm) = aya_ebpf::helpers::bpf_get_current_comm() {
        state.exit_comm = comm;
    }
    state.exited = 1;
    set_tracked(tid, None);
    emit(Event { kind: event_kind::THREAD_EXIT, tid, tgid, timestamp_ns: now_ns(), ..Event::default() });
    0
}
