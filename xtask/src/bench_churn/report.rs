//! The churn bench's table: per phase, what it did, how long its aftermath took to settle, and
//! each goal's figure and verdict.

use std::time::Duration;

use super::Options;
use super::measure::{Baseline, Measurement};

pub(crate) struct Report {
    pub(crate) baseline: Baseline,
    phases: Vec<(String, String, Measurement)>,
    pub(crate) total: Duration,
}

impl Report {
    pub(crate) fn new(baseline: Baseline) -> Report {
        Report { baseline, phases: Vec::new(), total: Duration::ZERO }
    }

    pub(crate) fn add(&mut self, phase: &str, note: String, measurement: Measurement) {
        self.phases.push((phase.to_owned(), note, measurement));
    }

    pub(crate) fn all_met(&self) -> bool {
        self.phases.iter().all(|(_, _, m)| m.clean(&self.baseline))
    }

    pub(crate) fn print(&self, date: &str, opts: &Options) {
        println!(
            "\nChurn and soak, {date} (`cargo xtask bench churn --restarts {} --threads {} --connections {} \
             --burst-seconds {}`; {:.0} s with the lock held):",
            opts.restarts,
            opts.threads,
            opts.connections,
            opts.burst_seconds,
            self.total.as_secs_f64()
        );
        println!("baseline: {}\n", self.baseline.describe());
        let rows: Vec<[String; 4]> = self
            .phases
            .iter()
            .flat_map(|(phase, note, m)| {
                let settled = if m.clean(&self.baseline) {
                    format!("settled in {:.0} s", m.after.as_secs_f64())
                } else {
                    format!("not settled after {:.0} s", m.after.as_secs_f64())
                };
                let head = [phase.clone(), format!("{note}; {settled}"), String::new(), String::new()];
                std::iter::once(head).chain(m.verdicts(&self.baseline).into_iter().map(|(goal, figure, met)| {
                    [String::new(), goal, figure, if met { "ok".to_owned() } else { "NOT MET".to_owned() }]
                }))
            })
            .collect();
        let width = |i: usize| rows.iter().filter(|r| !r[2].is_empty()).map(|r| r[i].len()).max().unwrap_or(0);
        let (w0, w1, w2) = (width(0).max(2), width(1), width(2));
        for row in &rows {
            if row[2].is_empty() {
                println!("{}: {}", row[0], row[1]);
            } else {
                println!("  {:<w0$} {:<w1$}  {:<w2$}  {}", row[0], row[1], row[2], row[3]);
            }
        }
    }
}
