//! Which syscall a target thread is in, so an off-CPU span can be given its reason.
//!
//! By default the syscall is read from the thread's own registers when it goes to sleep
//! (`note_syscall_from_regs`, called from `sched_switch`): no hook runs on the syscall path, so
//! no process on the host pays for one. `sys_enter`/`sys_exit` are the fallback for kernels where
//! the function hooks of `waits.rs`, `loop_iterations.rs` and `socket_data.rs` cannot attach: one
//! raw hook serves every syscall there, as a per-syscall tracepoint would cost the same.

use aya_ebpf::{helpers::generated::bpf_task_pt_regs, macros::btf_tracepoint, programs::BtfTracePointContext};
use gateway_observer_common::{ThreadState, drop_index, futex_op_waits, syscall_class};

use crate::{
    loop_iterations::{end_iteration, iteration_starts, vote_home_epoll},
    maps::{SYSCALL_CLASS, btf_field, config, count_drop, current_ids, now_ns, thread_state},
    offcpu::close_offcpu_span,
    socket_data::{enter_data_syscall, exit_data_syscall},
    waits::{take_stack, timed_wait_ended},
};

/// A target thread goes to sleep: which syscall it sleeps in, from the registers it entered the
/// kernel with (`orig_ax` holds the syscall number for as long as the syscall runs).
#[inline(always)]
pub fn note_syscall_from_regs(state: &mut ThreadState, task: *const u8) {
    // SAFETY: `task` is a BTF task_struct pointer handed to a tp_btf program; the helper returns
    // a pointer to that task's saved user registers, which the verifier types as pt_regs.
    let regs = unsafe { bpf_task_pt_regs(task as *mut _) } as *const u8;
    let nr: i64 = btf_field(regs, config().regs_syscall_nr_offset);
    note_syscall(state, nr, regs);
}

/// Notes syscall `nr` and the arguments the off-CPU reason needs; returns its `SYSCALL_CLASS`
/// entry (class and data shape).
#[inline(always)]
fn note_syscall(state: &mut ThreadState, nr: i64, regs: *const u8) -> u8 {
    let packed = if (0..gateway_observer_common::MAX_SYSCALL_NR as i64).contains(&nr) {
        SYSCALL_CLASS.get(nr as u32).copied().unwrap_or(syscall_class::NONE)
    } else {
        syscall_class::NONE
    };
    let class = packed & syscall_class::CLASS_MASK;
    let cfg = config();
    let arg0 = btf_field::<u64>(regs, cfg.regs_arg0_offset);
    // Only a blocking call matters, and of futex ops only waits block; their timeout argument
    // tells a timed wait (Thread.sleep, parkNanos, a timed get) from a lock or condition wait.
    let timeout = match class {
        syscall_class::FUTEX if futex_op_waits(btf_field::<u64>(regs, cfg.regs_arg1_offset)) => {
            btf_field::<u64>(regs, cfg.regs_arg3_offset)
        }
        syscall_class::FUTEX_WAIT2 => btf_field::<u64>(regs, cfg.regs_arg4_offset),
        syscall_class::FUTEX_WAITV => btf_field::<u64>(regs, cfg.regs_arg3_offset),
        _ => 0,
    };
    if state.stack_wanted != 0 && (state.syscall_nr as i64 != nr || state.syscall_arg0 != arg0) {
        // A stack is still wanted for a long block in a call no exit hook saw end: this new
        // call's stack would not be that one's.
        state.stack_wanted = 0;
    }
    state.syscall_nr = nr as i32;
    state.syscall_class = class;
    state.syscall_arg0 = arg0;
    state.futex_timed = (timeout != 0) as u8;
    packed
}

/// sys_enter(struct pt_regs *regs, long id): fallback path only.
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    close_missed_span(state, tid);
    let regs: *const u8 = ctx.arg(0);
    let packed = note_syscall(state, ctx.arg(1), regs);
    enter_data_syscall(state, packed >> syscall_class::SHAPE_SHIFT, regs);
    let class = packed & syscall_class::CLASS_MASK;
    if syscall_class::polls(class) {
        end_iteration(state, tid);
    }
    if class == syscall_class::EPOLL {
        vote_home_epoll(state, state.syscall_arg0 as u32);
    }
    0
}

/// sys_exit(struct pt_regs *regs, long ret): fallback path only.
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    close_missed_span(state, tid);
    if state.stack_wanted != 0 {
        // The thread is current and still in the syscall it blocked in: its user stack is the
        // blocking call's caller.
        take_stack(&ctx, state, tid);
    }
    let ret: i64 = ctx.arg(1);
    exit_data_syscall(state, tid, ret);
    if state.futex_timed != 0 {
        timed_wait_ended(state, state.syscall_arg0, ret);
    }
    state.futex_timed_pending_ns = 0;
    if syscall_class::polls(state.syscall_class) {
        iteration_starts(state);
    }
    state.syscall_nr = -1;
    state.syscall_class = syscall_class::NONE;
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
