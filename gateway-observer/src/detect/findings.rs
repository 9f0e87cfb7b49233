//! Detector results as alert findings: the subject, a one-line summary, and the evidence object
//! that `/api/v1/alerts` and Alertmanager show.

use super::{
    busy::BusyLoop,
    event_loop::{BlockedLoop, EventLoopConfig},
    evidence::{self, Evidence},
    jvm_pause::{JvmPauseConfig, PausedJvm},
    pool::SaturatedPool,
};
use crate::detect::finding::Finding;

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

pub fn event_loop_blocked(found: &BlockedLoop, config: &EventLoopConfig) -> Finding {
    let evidence = evidence::EventLoopBlocked {
        reason: crate::reason::reason_label(found.reason).into(),
        thread: found.thread.name.clone(),
        tid: found.thread.tid,
        window_seconds: found.window.as_secs_f64(),
        blocked_seconds: secs(found.blocked_ns),
        blocked_share: found.share,
        blocked_seconds_by_reason: found.by_reason.iter().map(|(reason, ns)| ((*reason).into(), secs(*ns))).collect(),
        blocks_over_event_threshold: found.blocks.count,
        blocks_over_single_threshold: found.blocks.over_single_threshold,
        single_block_threshold_seconds: config.single_block.as_secs_f64(),
        longest_block_seconds: secs(found.blocks.longest_ns),
        syscall: found.blocks.syscall.map(Into::into),
        futex_word: found.blocks.futex_uaddr.map(crate::opaque::futex_word),
        stack: None,
        stack_source: None,
        java_stack: None,
        java_stack_unavailable: None,
        requests: None,
        refusals: None,
    };
    Finding {
        pid: found.thread.tgid,
        comm: found.thread.comm.clone(),
        subject: found.thread.name.clone(),
        summary: found.summary(config),
        evidence: Evidence::EventLoopBlocked(evidence),
        active: found.active,
        held_for: std::time::Duration::ZERO,
    }
}

pub fn event_loop_busy(found: &BusyLoop, config: &EventLoopConfig) -> Finding {
    let evidence = evidence::EventLoopBusy {
        thread: found.thread.clone(),
        tid: found.tid,
        long_iterations: found.iterations,
        longest_on_cpu_seconds: secs(found.longest_on_cpu_ns),
        ongoing: found.ongoing,
        on_cpu_seconds_in_long_iterations: secs(found.total_on_cpu_ns),
        busy_iteration_threshold_seconds: config.busy_iteration.as_secs_f64(),
        window_seconds: found.window.as_secs_f64(),
        requests: None,
        refusals: None,
    };
    Finding {
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.thread.clone(),
        summary: found.summary(config),
        evidence: Evidence::EventLoopBusy(evidence),
        active: found.active,
        held_for: std::time::Duration::from_nanos(found.ongoing_on_cpu_ns),
    }
}

pub fn pool_saturated(found: &SaturatedPool) -> Finding {
    let hot_futexes = found
        .hot_futexes
        .iter()
        .map(|(addr, waiters)| evidence::HotFutex { word: crate::opaque::futex_word(*addr), waiters: *waiters });
    let evidence = evidence::PoolSaturated {
        thread_group: found.group.clone(),
        threads: found.threads,
        created_in_window: found.created_in_window,
        window_seconds: found.window.as_secs_f64(),
        busy_share: found.busy_share,
        blocked_share: found.blocked_share,
        runqueue_share: found.runqueue_share,
        idle_share: found.idle_share,
        blocked_seconds_by_reason: found.blocked_by_reason.iter().map(|(reason, s)| ((*reason).into(), *s)).collect(),
        hot_futexes: hot_futexes.collect(),
        cpu_cores: found.cpu_cores,
        waiting_requests: found.waiting_requests,
        held_requests: found.held_requests,
        queued_requests: found.queued_requests,
        refusals: None,
        waiting_at: None,
        java_stack_unavailable: None,
        requests: None,
    };
    Finding {
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.group.clone(),
        summary: found.summary(),
        evidence: Evidence::PoolSaturated(evidence),
        active: found.active,
        held_for: found.saturated_for,
    }
}

pub fn jvm_pause(found: &PausedJvm, config: &JvmPauseConfig) -> Finding {
    let collections = found.collections.iter().map(|c| evidence::GcCollections {
        collector: c.collector.clone(),
        count: c.count,
        seconds: secs(c.ns),
    });
    let evidence = evidence::JvmPause {
        source: "hsperfdata".into(),
        threshold_seconds: config.threshold.as_secs_f64(),
        window_seconds: found.window.as_secs_f64(),
        long_pauses: found.long_pauses,
        longest_pause_seconds: secs(found.longest_ns),
        stopped_seconds: secs(found.stopped_ns),
        stopped_share: found.stopped_ns as f64 / found.window.as_nanos().max(1) as f64,
        safepoints: found.safepoints,
        collections: collections.collect(),
        last_gc_cause: found.last_cause.clone(),
        kernel: evidence::PauseReleases {
            vm_thread_releases: found.kernel.releases,
            most_threads_released_together: found.kernel.most_threads_released,
        },
        requests: None,
        refusals: None,
    };
    Finding {
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.comm.clone(),
        summary: found.summary(config),
        evidence: Evidence::JvmPause(evidence),
        active: found.active,
        held_for: std::time::Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_names_the_thread_reason_and_futex() {
        let found = crate::detect::evidence_golden::blocked(Some("futex"), Some(0x7f00_1234));
        let f = event_loop_blocked(&found, &EventLoopConfig::default());
        assert_eq!(f.id(), "EventLoopBlocked/10/reactor-http-nio-2");
        let Evidence::EventLoopBlocked(evidence) = &f.evidence else { panic!("{f:?}") };
        assert_eq!(evidence.reason, "futex_timed");
        assert_eq!(evidence.futex_word, Some(crate::opaque::futex_word(0x7f00_1234)), "no raw address");
        assert_eq!(evidence.blocked_share, 0.71);
        assert!(f.summary.contains("71%"), "{}", f.summary);
    }
}
