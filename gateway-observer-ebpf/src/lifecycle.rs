//! Thread and process lifecycle: follow new threads and forked children of targets, forget
//! threads that exit (so the per-thread maps never leak).

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use gateway_observer_common::{Event, TargetInfo, ThreadState, drop_index, event_kind};

use crate::maps::{
    BPF_NOEXIST, TARGETS, THREADS, btf_field, config, count_drop, current_ids, emit, is_tracked,
    now_ns, set_tracked,
};

/// sched_process_fork(struct task_struct *parent, struct task_struct *child); runs in the parent,
/// for new threads and new processes alike.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> u32 {
    let (_, parent_tgid) = current_ids();
    // SAFETY: a map value read; TargetInfo is plain data.
    if unsafe { TARGETS.get(parent_tgid) }.is_none() {
        return 0;
    }
    let child: *const u8 = ctx.arg(1);
    let cfg = config();
    let child_tid: u32 = btf_field(child, cfg.task_pid_offset);
    let child_tgid: u32 = btf_field(child, cfg.task_tgid_offset);
    if child_tgid != parent_tgid {
        let info = TargetInfo { parent_tgid, _pad: 0 };
        if TARGETS.insert(child_tgid, info, BPF_NOEXIST).is_err() {
            count_drop(drop_index::TARGETS_MAP_FULL);
            return 0;
        }
        emit(Event {
            kind: event_kind::PROCESS_FORK,
            tid: child_tid,
            tgid: parent_tgid,
            reason: child_tgid,
            timestamp_ns: now_ns(),
            ..Event::default()
        });
    }
    let state = ThreadState { tgid: child_tgid, syscall_nr: -1, ..ThreadState::default() };
    if THREADS.insert(child_tid, state, 0).is_err() {
        count_drop(drop_index::THREADS_MAP_FULL);
        return 0;
    }
    set_tracked(child_tid, true);
    0
}

/// sched_process_exit(struct task_struct *p, bool group_dead); runs in the exiting thread.
/// The THREADS entry stays, marked exited, until userspace has read its last totals.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(_ctx: BtfTracePointContext) -> u32 {
    let (tid, tgid) = current_ids();
    if !is_tracked(tid) {
        return 0;
    }
    set_tracked(tid, false);
    if let Some(state) = THREADS.get_ptr_mut(tid) {
        // SAFETY: a map value pointer, valid for this program run.
        unsafe { (*state).exited = 1 };
    }
    emit(Event {
        kind: event_kind::THREAD_EXIT,
        tid,
        tgid,
        timestamp_ns: now_ns(),
        ..Event::default()
    });
    0
}
