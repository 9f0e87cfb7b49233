//! Names of off-CPU reasons as they appear in metrics and alerts.

use gateway_observer_common::reason;

/// Label value for a `reason::*` code.
pub fn reason_label(code: u32) -> &'static str {
    match code {
        reason::FUTEX => "futex",
        reason::FUTEX_TIMED => "futex_timed",
        reason::FUTEX_SLEEP => "futex_sleep",
        reason::POLL_OTHER => "poll_other",
        reason::SLEEP => "sleep",
        reason::POLL => "poll",
        reason::SOCKET => "socket",
        reason::IO => "io",
        reason::OTHER_SYSCALL => "other_syscall",
        reason::DISK => "disk",
        reason::RUNQUEUE => "runqueue",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_label() {
        let labels: std::collections::BTreeSet<_> = (0..reason::COUNT).map(reason_label).collect();
        assert_eq!(labels.len(), reason::COUNT as usize);
    }
}
