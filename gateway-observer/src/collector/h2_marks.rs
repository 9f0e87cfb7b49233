//! HTTP/2 connections first seen mid-way, named to the kernel so that it walks their frame
//! headers past each transfer's head: it never saw their preface, and userspace tells HTTP/2
//! from their frames. The connection's next transfer takes its mark; a mark still out after
//! `MARK_LIFETIME` (the connection went quiet or closed) is taken back, and while none is out
//! the kernel's transfers skip the lookup.

use std::time::{Duration, Instant};

use gateway_observer_common::MAX_H2_MARKS;

use crate::probes::Probes;

/// How long a mark waits for its connection's next transfer.
const MARK_LIFETIME: Duration = Duration::from_secs(5);

/// The marks userspace wrote, with when.
#[derive(Debug, Default)]
pub struct H2Marks {
    out: Vec<(u64, Instant)>,
}

impl H2Marks {
    /// Names `sks` to the kernel (as many as `H2_MARKS` holds; the rest stay unwalked, as they
    /// were).
    pub fn tell(&mut self, probes: &mut Probes, mut sks: Vec<u64>, now: Instant) {
        sks.truncate((MAX_H2_MARKS as usize).saturating_sub(self.out.len()));
        if sks.is_empty() {
            return;
        }
        let refused = match probes.mark_h2(&sks) {
            Ok(refused) => refused,
            Err(err) => {
                tracing::debug!(error = %err, "cannot mark HTTP/2 connections first seen mid-way");
                return;
            }
        };
        self.out.extend(sks.into_iter().filter(|sk| !refused.contains(sk)).map(|sk| (sk, now)));
        if let Err(err) = probes.set_h2_marks_pending(true) {
            tracing::debug!(error = %err, "cannot flag HTTP/2 marks");
        }
    }

    /// Takes back the marks older than `MARK_LIFETIME`; once none is out, the kernel stops looking.
    pub fn expire(&mut self, probes: &mut Probes, now: Instant) {
        let (old, kept): (Vec<_>, Vec<_>) =
            self.out.drain(..).partition(|(_, at)| now.saturating_duration_since(*at) >= MARK_LIFETIME);
        self.out = kept;
        if old.is_empty() {
            return;
        }
        let old: Vec<u64> = old.into_iter().map(|(sk, _)| sk).collect();
        let result = probes
            .unmark_h2(&old)
            .and_then(|()| if self.out.is_empty() { probes.set_h2_marks_pending(false) } else { Ok(()) });
        if let Err(err) = result {
            tracing::debug!(error = %err, "cannot take back HTTP/2 marks");
        }
    }
}
