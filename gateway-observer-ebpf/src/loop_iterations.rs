//! Event-loop iterations: from a loop thread's return from waiting for events to its next wait,
//! split at each socket transfer. Without a hook on the poll syscalls, a wait is seen when the
//! thread sleeps in one (`sched_switch`), and a loop that finds events ready and never sleeps
//! (a gateway at full load) is seen moving bytes: each transfer ends one iteration and starts the
//! next, so only work that holds the CPU between two transfers or waits (a long callback) counts
//! as a long iteration.

use gateway_observer_common::{Event, ThreadState, event_kind};

use crate::maps::{config, emit, hist_add};

/// A thread with an iteration open moved bytes on a socket at `now`: the iteration ends here and
/// another begins. (Callers pass the time they already read: a clock read costs tens of ns.)
#[inline(always)]
pub fn transfer_boundary(state: &mut ThreadState, tid: u32, now: u64) {
    if state.iter_start_ns != 0 {
        end_iteration(state, tid, now);
        iteration_starts(state, now);
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
pub fn iteration_starts(state: &mut ThreadState, now: u64) {
    state.iter_start_ns = now;
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
pub fn end_iteration(state: &mut ThreadState, tid: u32, now: u64) {
    if state.iter_start_ns == 0 {
        return;
    }
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
