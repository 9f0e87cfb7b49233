//! Which syscall each target thread is in, so an off-CPU span can be given its reason, and the
//! duration of futex waits. One raw syscall hook serves every syscall: a per-syscall tracepoint
//! would run the same kernel path and could not tell "other syscalls" apart.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use gateway_observer_common::{ThreadState, drop_index, syscall_class};

use crate::{
    maps::{SYSCALL_CLASS, btf_field, config, count_drop, current_ids, hist_add, now_ns, thread_state},
    offcpu::close_offcpu_span,
};

/// futex operations that wait (FUTEX_WAIT, LOCK_PI, WAIT_BITSET, WAIT_REQUEUE_PI, LOCK_PI2),
/// after masking FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME.
const FUTEX_CMD_MASK: u64 = 0x7f;
const fn futex_op_waits(op: u64) -> bool {
    matches!(op & FUTEX_CMD_MASK, 0 | 6 | 9 | 11 | 13)
}

/// sys_enter(struct pt_regs *regs, long id)
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    close_missed_span(state, tid);
    let regs: *const u8 = ctx.arg(0);
    let nr: i64 = ctx.arg(1);
    let class = if (0..gateway_observer_common::MAX_SYSCALL_NR as i64).contains(&nr) {
        SYSCALL_CLASS.get(nr as u32).copied().unwrap_or(syscall_class::NONE)
    } else {
        syscall_class::NONE
    };
    let cfg = config();
    state.syscall_nr = nr as i32;
    state.syscall_class = class;
    state.syscall_enter_ns = now_ns();
    state.syscall_arg0 = 0;
    state.futex_timed = 0;
    state.futex_is_wait = 0;
    match class {
        syscall_class::FUTEX => {
            state.syscall_arg0 = btf_field::<u64>(regs, cfg.regs_arg0_offset);
            let op = btf_field::<u64>(regs, cfg.regs_arg1_offset);
            let timeout = btf_field::<u64>(regs, cfg.regs_arg3_offset);
            state.futex_is_wait = futex_op_waits(op) as u8;
            state.futex_timed = (timeout != 0) as u8;
        }
        syscall_class::FUTEX_WAIT2 => {
            state.syscall_arg0 = btf_field::<u64>(regs, cfg.regs_arg0_offset);
            let timeout = btf_field::<u64>(regs, cfg.regs_arg4_offset);
            state.futex_is_wait = 1;
            state.futex_timed = (timeout != 0) as u8;
        }
        syscall_class::FUTEX_WAITV => {
            let timeout = btf_field::<u64>(regs, cfg.regs_arg3_offset);
            state.futex_is_wait = 1;
            state.futex_timed = (timeout != 0) as u8;
        }
        _ => {}
    }
    0
}

/// sys_exit(struct pt_regs *regs, long ret)
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(_ctx: BtfTracePointContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    close_missed_span(state, tid);
    if state.futex_is_wait != 0 && state.syscall_enter_ns != 0 {
        let elapsed = now_ns().saturating_sub(state.syscall_enter_ns);
        hist_add(&mut state.futex_hist, elapsed);
        state.futex_wait_ns += elapsed;
    }
    state.syscall_nr = -1;
    state.syscall_class = syscall_class::NONE;
    state.futex_is_wait = 0;
    state.futex_timed = 0;
    0
}

/// A thread in a syscall is on CPU: an off-CPU span still open means its switch-in was missed.
#[inline(always)]
fn close_missed_span(state: &mut ThreadState, tid: u32) {
    if state.offcpu_start_ns != 0 {
        count_drop(drop_index::MISSED_SWITCH_IN);
        close_offcpu_span(state, tid, now_ns());
    }
}
