//! Per-target quotas of thread slots and followed connections. The kernel takes from each
//! target's budget as it gives the target room (`TargetInfo`); every tick the budgets are set
//! again from what each target holds, so a budget spent on threads or connections that are gone
//! comes back, and a race in the kernel costs at most one tick of overshoot.

use std::collections::HashMap;

use gateway_observer_common::TargetInfo;

/// How much one target may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub threads: u32,
    pub connections: u32,
}

impl Quotas {
    /// A target's entry for TARGETS: its quotas less what it holds (zero or below: nothing more).
    pub fn target_info(&self, parent_tgid: u32, threads: usize, connections: usize) -> TargetInfo {
        let left = |quota: u32, held: usize| i64::from(quota) - i64::try_from(held).unwrap_or(i64::MAX);
        TargetInfo {
            parent_tgid,
            _pad: 0,
            thread_budget: left(self.threads, threads),
            socket_budget: left(self.connections, connections),
            ring_epoch: 0,
            ring_used: 0,
        }
    }
}

/// How many of `owners` each process is: thread slots or connections held per tgid.
pub fn held_per_process(owners: impl IntoIterator<Item = u32>) -> HashMap<u32, usize> {
    let mut held = HashMap::new();
    for tgid in owners {
        *held.entry(tgid).or_insert(0) += 1;
    }
    held
}

/// Targets whose quota ran out since `before` (for one warning each, not one per tick).
pub fn newly_exhausted<'a>(
    now: &'a HashMap<u32, TargetInfo>,
    before: &'a HashMap<u32, TargetInfo>,
) -> impl Iterator<Item = (u32, &'static str)> + 'a {
    let spent = |info: &TargetInfo| [(info.thread_budget <= 0, "threads"), (info.socket_budget <= 0, "connections")];
    now.iter().flat_map(move |(tgid, info)| {
        let was = before.get(tgid).map(spent).unwrap_or([(false, "threads"), (false, "connections")]);
        spent(info)
            .into_iter()
            .zip(was)
            .filter(|((now, _), (was, _))| *now && !*was)
            .map(|((_, kind), _)| (*tgid, kind))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTAS: Quotas = Quotas { threads: 100, connections: 10 };

    #[test]
    fn budgets_are_the_quota_less_what_is_held() {
        let info = QUOTAS.target_info(7, 30, 12);
        assert_eq!((info.parent_tgid, info.thread_budget, info.socket_budget), (7, 70, -2));
        let fresh = QUOTAS.target_info(0, 0, 0);
        assert_eq!((fresh.thread_budget, fresh.socket_budget), (100, 10));
    }

    #[test]
    fn holdings_are_counted_per_process() {
        let held = held_per_process([5, 5, 9, 5]);
        assert_eq!((held[&5], held[&9], held.get(&1)), (3, 1, None));
    }

    #[test]
    fn a_quota_running_out_is_told_once() {
        let before = HashMap::from([(5, QUOTAS.target_info(0, 99, 0)), (6, QUOTAS.target_info(0, 100, 0))]);
        let now = HashMap::from([(5, QUOTAS.target_info(0, 100, 10)), (6, QUOTAS.target_info(0, 120, 0))]);
        let mut told: Vec<(u32, &str)> = newly_exhausted(&now, &before).collect();
        told.sort();
        assert_eq!(told, [(5, "connections"), (5, "threads")], "6 had run out already");
        assert_eq!(newly_exhausted(&now, &now).count(), 0);
    }
}
