//! Event-loop iterations: an iteration runs from a thread's return from waiting for events to
//! its next wait. By default hooked on the kernel's wait functions (fentry/fexit on
//! `do_epoll_wait`, `do_sys_poll`, `core_sys_select`), so only threads that poll pay; the
//! fallback `sys_enter`/`sys_exit` call the same helpers.

use aya_ebpf::{
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use gateway_observer_common::{Event, ThreadState, event_kind};

use crate::{
    maps::{config, current_ids, emit, hist_add, now_ns, thread_state},
    waits::stack_if_wanted,
};

/// do_epoll_wait(int epfd, struct epoll_event __user *events, int maxevents, struct timespec64 *to)
#[fentry(function = "do_epoll_wait")]
pub fn do_epoll_wait_enter(ctx: FEntryContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    let epfd: i32 = ctx.arg(0);
    vote_home_epoll(state, epfd as u32);
    end_iteration(state, tid);
    0
}

#[fexit(function = "do_epoll_wait")]
pub fn do_epoll_wait_exit(ctx: FExitContext) -> u32 {
    poll_returned(&ctx);
    0
}

/// do_sys_poll(struct pollfd __user *ufds, unsigned int nfds, struct timespec64 *end_time)
#[fentry(function = "do_sys_poll")]
pub fn do_sys_poll_enter(_ctx: FEntryContext) -> u32 {
    poll_called();
    0
}

#[fexit(function = "do_sys_poll")]
pub fn do_sys_poll_exit(ctx: FExitContext) -> u32 {
    poll_returned(&ctx);
    0
}

/// core_sys_select(int n, fd_set __user *inp, ..., struct timespec64 *end_time)
#[fentry(function = "core_sys_select")]
pub fn core_sys_select_enter(_ctx: FEntryContext) -> u32 {
    poll_called();
    0
}

#[fexit(function = "core_sys_select")]
pub fn core_sys_select_exit(ctx: FExitContext) -> u32 {
    poll_returned(&ctx);
    0
}

#[inline(always)]
fn poll_called() {
    let (tid, _) = current_ids();
    if let Some(state) = thread_state(tid) {
        end_iteration(state, tid);
    }
}

#[inline(always)]
fn poll_returned(ctx: &FExitContext) {
    let (tid, _) = current_ids();
    if let Some(state) = thread_state(tid) {
        stack_if_wanted(ctx, state, tid);
        iteration_starts(state);
    }
}

/// One vote of the thread's epoll waits for its home set (Boyer-Moore majority): a loop's own
/// set, waited on at every iteration, stays home through a nested loop's few waits.
#[inline(always)]
pub fn vote_home_epoll(state: &mut ThreadState, epfd: u32) {
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

/// Back from waiting for events: an event-loop iteration starts.
#[inline(always)]
pub fn iteration_starts(state: &mut ThreadState) {
    state.iter_start_ns = now_ns();
    state.iter_offcpu_base_ns = offcpu_total(state);
}

/// All off-CPU time, run-queue waits included: an iteration's on-CPU time is its length less
/// this, so a loop that only waited for a CPU on a crowded host is not reported as busy.
#[inline(always)]
fn offcpu_total(state: &ThreadState) -> u64 {
    state.offcpu_ns.iter().fold(0u64, |sum, ns| sum.wrapping_add(*ns))
}

/// The thread polls again: the iteration since its last poll, if one was open, is over. Its busy
/// part is its length less the time it spent off the CPU meanwhile; a long one goes to userspace.
#[inline(always)]
pub fn end_iteration(state: &mut ThreadState, tid: u32) {
    if state.iter_start_ns == 0 {
        return;
    }
    let now = now_ns();
    let iteration = now.saturating_sub(state.iter_start_ns);
    let offcpu = offcpu_total(state).wrapping_sub(state.iter_offcpu_base_ns);
    let on_cpu = iteration.saturating_sub(offcpu);
    state.iter_start_ns = 0;
    hist_add(&mut state.iter_hist, on_cpu);
    state.iter_on_cpu_ns = state.iter_on_cpu_ns.wrapping_add(on_cpu);
    if on_cpu >= config().busy_iteration_ns {
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
