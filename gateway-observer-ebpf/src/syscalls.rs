//! Which syscall each target thread is in, so an off-CPU span can be given its reason. One raw syscall hook serves every syscall: a per-syscall tracepoint
//! would run the same kernel path and could not tell "other syscalls" apart.

use aya_ebpf::{
    macros::btf_tracepoint,
    programs::{BtfTracePointContext, tracing::StackIdContext as _},
};

/// `bpf_get_stackid` flag: the user-space stack.
const BPF_F_USER_STACK: u64 = 1 << 8;
const ETIMEDOUT: i64 = 110;
use gateway_observer_common::{Event, ThreadState, data_shape, drop_index, event_kind, futex_op_waits, syscall_class};

use crate::{
    maps::{STACKS, SYSCALL_CLASS, btf_field, config, count_drop, current_ids, emit, hist_add, now_ns, thread_state},
    offcpu::close_offcpu_span,
    sockets::{enter_data_syscall, exit_data_syscall},
};

/// sys_enter(struct pt_regs *regs, long id)
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    close_missed_span(state, tid);
    let regs: *const u8 = ctx.arg(0);
    let nr: i64 = ctx.arg(1);
    let packed = if (0..gateway_observer_common::MAX_SYSCALL_NR as i64).contains(&nr) {
        SYSCALL_CLASS.get(nr as u32).copied().unwrap_or(syscall_class::NONE)
    } else {
        syscall_class::NONE
    };
    let class = packed & syscall_class::CLASS_MASK;
    enter_data_syscall(state, packed >> syscall_class::SHAPE_SHIFT, regs);
    let cfg = config();
    if syscall_class::polls(class) && state.iter_start_ns != 0 {
        end_iteration(state, tid, cfg.busy_iteration_ns);
    }
    state.syscall_nr = nr as i32;
    state.syscall_class = class;
    // Only a blocking call matters, and of futex ops only waits block; their timeout argument
    // tells a timed wait (Thread.sleep, parkNanos, a timed get) from a lock or condition wait.
    let (uaddr, timeout) = match class {
        syscall_class::FUTEX => {
            let uaddr = btf_field::<u64>(regs, cfg.regs_arg0_offset);
            let waits = futex_op_waits(btf_field::<u64>(regs, cfg.regs_arg1_offset));
            (uaddr, if waits { btf_field::<u64>(regs, cfg.regs_arg3_offset) } else { 0 })
        }
        syscall_class::FUTEX_WAIT2 => {
            (btf_field::<u64>(regs, cfg.regs_arg0_offset), btf_field::<u64>(regs, cfg.regs_arg4_offset))
        }
        syscall_class::FUTEX_WAITV => (0, btf_field::<u64>(regs, cfg.regs_arg3_offset)),
        syscall_class::EPOLL => {
            let epfd = btf_field::<u64>(regs, cfg.regs_arg0_offset);
            vote_home_epoll(state, epfd as u32);
            (epfd, 0)
        }
        _ => (0, 0),
    };
    state.syscall_arg0 = uaddr;
    state.futex_timed = (timeout != 0) as u8;
    0
}

/// sys_exit(struct pt_regs *regs, long ret)
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    close_missed_span(state, tid);
    if state.stack_wanted != 0 {
        // The thread is current and still in the syscall it blocked in: its user stack is the
        // blocking call's caller. Only after long blocks, so the cost stays off the hot path.
        state.stack_wanted = 0;
        if let Ok(id) = ctx.get_stackid(&STACKS, BPF_F_USER_STACK) {
            emit(Event {
                kind: event_kind::BLOCK_STACK,
                tid,
                tgid: state.tgid,
                reason: id as u32,
                timestamp_ns: now_ns(),
                ..Event::default()
            });
        }
    }
    let ret: i64 = ctx.arg(1);
    if state.data_shape != data_shape::NONE {
        exit_data_syscall(state, tid, ret);
    }
    if state.futex_timed != 0 {
        // How this timed wait ended tells how the thread's next one is counted (FUTEX_SLEEP),
        // and, counted, how its thread group's timed waits end.
        if ret == -ETIMEDOUT {
            state.futex_sleep_uaddr = state.syscall_arg0;
        } else if ret == 0 && state.futex_sleep_uaddr == state.syscall_arg0 {
            state.futex_sleep_uaddr = 0;
        }
        let waited = state.futex_timed_pending_ns;
        if ret == -ETIMEDOUT {
            state.futex_timeout_ns += waited;
        } else if ret == 0 {
            state.futex_woken_ns += waited;
        }
    }
    state.futex_timed_pending_ns = 0;
    if syscall_class::polls(state.syscall_class) {
        // Back from waiting for events: an event-loop iteration starts.
        state.iter_start_ns = now_ns();
        state.iter_offcpu_base_ns = offcpu_total(state);
    }
    state.syscall_nr = -1;
    state.syscall_class = syscall_class::NONE;
    state.futex_timed = 0;
    0
}

/// One vote of the thread's epoll waits for its home set (Boyer-Moore majority): a loop's own
/// set, waited on at every iteration, stays home through a nested loop's few waits.
#[inline(always)]
fn vote_home_epoll(state: &mut ThreadState, epfd: u32) {
    if state.home_epoll_votes == 0 {
        state.home_epoll_fd = epfd;
    }
    if state.home_epoll_fd == epfd {
        state.home_epoll_votes = state.home_epoll_votes.saturating_add(1).min(HOME_EPOLL_MAX_VOTES);
    } else {
        state.home_epoll_votes -= 1;
    }
}

/// A cap on the votes, so a loop that moves to a new epoll set (a runtime restarting its loop)
/// has it as home after as many waits.
const HOME_EPOLL_MAX_VOTES: u32 = 64;

/// A thread in a syscall is on CPU: an off-CPU span still open means its switch-in was missed.
#[inline(always)]
fn close_missed_span(state: &mut ThreadState, tid: u32) {
    if state.offcpu_start_ns != 0 {
        count_drop(drop_index::MISSED_SWITCH_IN);
        close_offcpu_span(state, tid, now_ns());
    }
}

/// All off-CPU time, run-queue waits included: an iteration's on-CPU time is its length less
/// this, so a loop that only waited for a CPU on a crowded host is not reported as busy.
#[inline(always)]
fn offcpu_total(state: &ThreadState) -> u64 {
    state.offcpu_ns.iter().fold(0u64, |sum, ns| sum.wrapping_add(*ns))
}

/// The thread polls again: the iteration since its last poll is over. Its busy part is its
/// length less the time it spent off the CPU meanwhile; a long one goes to userspace.
#[inline(always)]
fn end_iteration(state: &mut ThreadState, tid: u32, busy_ns: u64) {
    let now = now_ns();
    let iteration = now.saturating_sub(state.iter_start_ns);
    let offcpu = offcpu_total(state).wrapping_sub(state.iter_offcpu_base_ns);
    let on_cpu = iteration.saturating_sub(offcpu);
    state.iter_start_ns = 0;
    hist_add(&mut state.iter_hist, on_cpu);
    state.iter_on_cpu_ns = state.iter_on_cpu_ns.wrapping_add(on_cpu);
    if on_cpu >= busy_ns {
        emit(Event {
            kind: event_kind::LONG_ITERATION,
            tid,
            tgid: state.tgid,
            wait_ns: on_cpu,
            runqueue_ns: iteration,
            timestamp_ns: now,
            ..Event::default()
        });
    }
}
