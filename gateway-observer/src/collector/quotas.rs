//! Renewing each target's budgets of thread slots and connections once a tick (`probes::quotas`):
//! what it holds now is counted, the kernel's entry is written again, and a target whose quota
//! has just run out is named in the log. The congested socket ring is shared out equally among
//! the targets (`ring_share`).

use std::collections::HashMap;

use super::Collector;
use crate::{
    probes::quotas::{held_per_process, newly_exhausted},
    probes::{BPF_EXIST, ProbeError},
};

impl Collector {
    /// `threads_held`: live thread slots per process, counted this tick.
    pub(super) fn renew_budgets(&mut self, threads_held: &HashMap<u32, usize>) -> Result<(), ProbeError> {
        let quotas = self.probes.quotas();
        let connections_held = held_per_process(self.requests.connection_owners());
        let budgets: HashMap<u32, _> = self
            .target_parents
            .iter()
            .map(|(&tgid, &parent)| {
                let held = |of: &HashMap<u32, usize>| of.get(&tgid).copied().unwrap_or(0);
                (tgid, quotas.target_info(parent, held(threads_held), held(&connections_held)))
            })
            .collect();
        for (&tgid, info) in &budgets {
            self.probes.set_target(tgid, *info, BPF_EXIST)?;
        }
        for (tgid, kind) in newly_exhausted(&budgets, &self.budgets) {
            let quota = if kind == "threads" { quotas.threads } else { quotas.connections };
            tracing::warn!(
                pid = tgid,
                process = %crate::host::procfs::comm(tgid).unwrap_or_default(),
                quota,
                "a target holds its whole quota of {kind}: more are not followed (max_{kind}_per_target)"
            );
        }
        let share = gateway_observer_common::ring_share::records_per_target(budgets.len());
        if Some(share) != self.ring_share {
            self.probes.set_ring_share(share)?;
            self.ring_share = Some(share);
        }
        self.budgets = budgets;
        Ok(())
    }
}
