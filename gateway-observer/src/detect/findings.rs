//! Detector results as alert findings: the subject, a one-line summary, and the evidence object
//! that `/api/v1/alerts` and Alertmanager show.

use serde_json::json;

use super::{
    busy::BusyLoop,
    event_loop::{BlockedLoop, EventLoopConfig},
    jvm_pause::{JvmPauseConfig, PausedJvm},
    pool::SaturatedPool,
};
use crate::detect::finding::{AlertKind, Finding};

pub fn event_loop_blocked(found: &BlockedLoop, config: &EventLoopConfig) -> Finding {
    let evidence = json!({
        "reason": crate::reason::reason_label(found.reason),
        "thread": found.thread.name,
        "tid": found.thread.tid,
        "window_seconds": found.window.as_secs_f64(),
        "blocked_seconds": found.blocked_ns as f64 / 1e9,
        "blocked_share": found.share,
        "blocked_seconds_by_reason": found.by_reason.iter()
            .map(|(reason, ns)| (reason.to_string(), json!(*ns as f64 / 1e9)))
            .collect::<serde_json::Map<_, _>>(),
        "blocks_over_event_threshold": found.blocks.count,
        "blocks_over_single_threshold": found.blocks.over_single_threshold,
        "single_block_threshold_seconds": config.single_block.as_secs_f64(),
        "longest_block_seconds": found.blocks.longest_ns as f64 / 1e9,
        "syscall": found.blocks.syscall,
        "futex_word": found.blocks.futex_uaddr.map(crate::opaque::futex_word),
    });
    Finding {
        kind: AlertKind::EventLoopBlocked,
        pid: found.thread.tgid,
        comm: found.thread.comm.clone(),
        subject: found.thread.name.clone(),
        summary: found.summary(config),
        evidence,
        active: found.active,
        held_for: std::time::Duration::ZERO,
    }
}

pub fn event_loop_busy(found: &BusyLoop, config: &EventLoopConfig) -> Finding {
    Finding {
        kind: AlertKind::EventLoopBusy,
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.thread.clone(),
        summary: found.summary(config),
        evidence: json!({
            "thread": found.thread,
            "tid": found.tid,
            "long_iterations": found.iterations,
            "longest_on_cpu_seconds": found.longest_on_cpu_ns as f64 / 1e9,
            "ongoing": found.ongoing,
            "on_cpu_seconds_in_long_iterations": found.total_on_cpu_ns as f64 / 1e9,
            "busy_iteration_threshold_seconds": config.busy_iteration.as_secs_f64(),
            "window_seconds": found.window.as_secs_f64(),
        }),
        active: found.active,
        held_for: std::time::Duration::from_nanos(found.ongoing_on_cpu_ns),
    }
}

pub fn pool_saturated(found: &SaturatedPool) -> Finding {
    let evidence = json!({
        "thread_group": found.group,
        "threads": found.threads,
        "created_in_window": found.created_in_window,
        "window_seconds": found.window.as_secs_f64(),
        "busy_share": found.busy_share,
        "blocked_share": found.blocked_share,
        "runqueue_share": found.runqueue_share,
        "idle_share": found.idle_share,
        "blocked_seconds_by_reason": found.blocked_by_reason.iter()
            .map(|(reason, secs)| (reason.to_string(), json!(secs)))
            .collect::<serde_json::Map<_, _>>(),
        "hot_futexes": found.hot_futexes.iter()
            .map(|(addr, waiters)| json!({"word": crate::opaque::futex_word(*addr), "waiters": waiters}))
            .collect::<Vec<_>>(),
        "cpu_cores": found.cpu_cores,
        "waiting_requests": found.waiting_requests,
        "held_requests": found.held_requests,
        "queued_requests": found.queued_requests,
        "refusals": null,
    });
    Finding {
        kind: AlertKind::PoolSaturated,
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.group.clone(),
        summary: found.summary(),
        evidence,
        active: found.active,
        held_for: found.saturated_for,
    }
}

pub fn jvm_pause(found: &PausedJvm, config: &JvmPauseConfig) -> Finding {
    let secs = |ns: u64| ns as f64 / 1e9;
    let evidence = json!({
        "source": "hsperfdata",
        "threshold_seconds": config.threshold.as_secs_f64(),
        "window_seconds": found.window.as_secs_f64(),
        "long_pauses": found.long_pauses,
        "longest_pause_seconds": secs(found.longest_ns),
        "stopped_seconds": secs(found.stopped_ns),
        "stopped_share": found.stopped_ns as f64 / found.window.as_nanos().max(1) as f64,
        "safepoints": found.safepoints,
        "collections": found.collections.iter()
            .map(|c| json!({"collector": c.collector, "count": c.count, "seconds": secs(c.ns)}))
            .collect::<Vec<_>>(),
        "last_gc_cause": found.last_cause,
        "kernel": {
            "vm_thread_releases": found.kernel.releases,
            "most_threads_released_together": found.kernel.most_threads_released,
        },
    });
    Finding {
        kind: AlertKind::JvmPause,
        pid: found.pid,
        comm: found.comm.clone(),
        subject: found.comm.clone(),
        summary: found.summary(config),
        evidence,
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
        assert_eq!(f.evidence["reason"], "futex_timed");
        assert_eq!(f.evidence["futex_word"], crate::opaque::futex_word(0x7f00_1234), "no raw address");
        assert_eq!(f.evidence["blocked_share"], 0.71);
        assert!(f.summary.contains("71%"), "{}", f.summary);
    }
}
