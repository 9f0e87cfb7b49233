//! The one table `bench overhead` prints: ratios first, then costs, then the figures they come
//! from; each row the median of its samples with their spread (min–max), then a verdict per goal.

use crate::bench_gateway::median;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Unit {
    Ratio,
    Ns,
    /// Stored as a fraction of one core, shown in %.
    CoreShare,
    Mib,
    Rps,
    Ms,
}

/// Which sample statistic a goal judges: the median, or (for a ceiling that must always hold,
/// like memory) the largest sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Stat {
    Median,
    Max,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

#[derive(Clone, Debug)]
pub(super) struct Goal {
    pub(super) text: String,
    pub(super) bound: Bound,
    pub(super) of: Stat,
}

impl Goal {
    pub(super) fn at_most(text: impl Into<String>, limit: f64) -> Goal {
        Goal { text: text.into(), bound: Bound::AtMost(limit), of: Stat::Median }
    }

    pub(super) fn at_least(text: impl Into<String>, floor: f64) -> Goal {
        Goal { text: text.into(), bound: Bound::AtLeast(floor), of: Stat::Median }
    }

    pub(super) fn on_max(self) -> Goal {
        Goal { of: Stat::Max, ..self }
    }

    /// None when there is nothing to judge (no samples, or a figure that could not be taken).
    fn met_by(&self, values: &[f64]) -> Option<(bool, f64)> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        let figure = match self.of {
            Stat::Median => median(finite),
            Stat::Max => finite.into_iter().reduce(f64::max)?,
        };
        if figure.is_nan() {
            return None;
        }
        Some((
            match self.bound {
                Bound::AtMost(limit) => figure <= limit,
                Bound::AtLeast(floor) => figure >= floor,
            },
            figure,
        ))
    }
}

struct Row {
    label: String,
    values: Vec<f64>,
    unit: Unit,
    goal: Option<Goal>,
}

#[derive(Default)]
pub(super) struct Report {
    ratios: Vec<Row>,
    costs: Vec<Row>,
    figures: Vec<Row>,
    notes: Vec<String>,
    pairs: usize,
    /// The daemon's peak RSS at the end of every phase it ran in.
    rss_mib: Vec<f64>,
}

const GOAL_RSS_MIB: f64 = 64.0;

impl Report {
    pub(super) fn ratio(&mut self, label: impl Into<String>, values: Vec<f64>, goal: Option<Goal>) {
        self.ratios.push(Row { label: label.into(), values, unit: Unit::Ratio, goal });
    }

    pub(super) fn cost(&mut self, label: impl Into<String>, values: Vec<f64>, unit: Unit, goal: Option<Goal>) {
        self.costs.push(Row { label: label.into(), values, unit, goal });
    }

    pub(super) fn figure(&mut self, label: impl Into<String>, values: Vec<f64>, unit: Unit) {
        self.figures.push(Row { label: label.into(), values, unit, goal: None });
    }

    pub(super) fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    pub(super) fn rss(&mut self, samples: impl IntoIterator<Item = f64>) {
        self.rss_mib.extend(samples);
    }

    pub(super) fn note_pairs(&mut self, pairs: usize) {
        self.pairs = pairs;
    }

    pub(super) fn print(mut self, date: &str) {
        let rss = std::mem::take(&mut self.rss_mib);
        let goal = Goal::at_most(format!("<= {GOAL_RSS_MIB} MiB"), GOAL_RSS_MIB).on_max();
        self.cost("daemon peak RSS (VmHWM), every phase", rss, Unit::Mib, Some(goal));
        println!("\n== bench overhead, {date} ==");
        println!("{:48} {:>12} {:>21} {:>4}   goal", "measure", "median", "min–max", "n");
        for (heading, rows) in [("ratios", &self.ratios), ("costs", &self.costs), ("figures", &self.figures)] {
            println!("-- {heading}");
            for row in rows {
                println!("{}", table_line(row));
            }
        }
        for note in &self.notes {
            println!("note: {note}");
        }
        println!("\nverdicts:");
        let enough = self.pairs >= 10;
        println!(
            "  {:7} median of >= 10 adjacent off/on pairs ({} pairs)",
            if enough { "met" } else { "MISSED" },
            self.pairs
        );
        for row in self.ratios.iter().chain(&self.costs) {
            let Some(goal) = &row.goal else { continue };
            let (verdict, figure) = match goal.met_by(&row.values) {
                Some((true, f)) => ("met", format_value(f, row.unit)),
                Some((false, f)) => ("MISSED", format_value(f, row.unit)),
                None => ("NO DATA", "-".to_owned()),
            };
            let of = if goal.of == Stat::Max { "max" } else { "median" };
            println!("  {verdict:7} {}: {} ({of} {figure})", row.label, goal.text);
        }
    }
}

fn table_line(row: &Row) -> String {
    let finite: Vec<f64> = row.values.iter().copied().filter(|v| !v.is_nan()).collect();
    let med = format_value(median(finite.clone()), row.unit);
    let spread = match (finite.iter().copied().reduce(f64::min), finite.iter().copied().reduce(f64::max)) {
        (Some(lo), Some(hi)) => {
            let lo = format_value(lo, row.unit);
            let hi = format_value(hi, row.unit);
            // The unit once, after the upper bound.
            let lo = lo.split_once(' ').map_or(lo.as_str(), |(number, _)| number).to_owned();
            format!("{lo}–{hi}")
        }
        _ => "-".to_owned(),
    };
    let goal = row.goal.as_ref().map_or(String::new(), |g| g.text.clone());
    format!("{:48} {med:>12} {spread:>21} {:>4}   {goal}", row.label, finite.len()).trim_end().to_owned()
}

fn format_value(v: f64, unit: Unit) -> String {
    if v.is_nan() {
        return "-".to_owned();
    }
    match unit {
        Unit::Ratio => format!("{v:.3}"),
        Unit::Ns => format!("{v:.1} ns"),
        Unit::CoreShare => format!("{:.2} %", v * 100.0),
        Unit::Mib => format!("{v:.1} MiB"),
        Unit::Rps => format!("{v:.0}"),
        Unit::Ms => format!("{v:.3} ms"),
    }
}

/// Per-pair on/off ratios of one figure.
pub(super) fn ratios<T>(pairs: &[(T, T)], figure: impl Fn(&T) -> f64) -> Vec<f64> {
    pairs.iter().map(|(off, on)| figure(on) / figure(off)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_judge_the_median_or_the_max() {
        let values = [0.95, 0.99, 0.98];
        assert_eq!(Goal::at_least("keeps 97 %", 0.97).met_by(&values), Some((true, 0.98)));
        assert_eq!(Goal::at_most("p99 <= 1.10", 0.97).met_by(&values), Some((false, 0.98)));
        assert_eq!(Goal::at_most("rss", 0.985).on_max().met_by(&values), Some((false, 0.99)));
        assert_eq!(Goal::at_most("x", 1.0).met_by(&[]), None, "no samples, no verdict");
        assert_eq!(Goal::at_most("x", 1.0).on_max().met_by(&[]), None);
        assert_eq!(Goal::at_most("x", 1.0).met_by(&[f64::NAN, 0.5]), Some((true, 0.5)), "a missing figure is skipped");
    }

    #[test]
    fn a_row_shows_median_spread_and_count_of_finite_samples() {
        let row = Row {
            label: "nginx req/s on/off".into(),
            values: vec![0.9, f64::NAN, 1.1, 1.0],
            unit: Unit::Ratio,
            goal: None,
        };
        let line = table_line(&row);
        assert!(line.contains("1.000"), "{line}");
        assert!(line.contains("0.900–1.100"), "{line}");
        assert!(line.trim_end().ends_with('3'), "{line}");
        assert_eq!(format_value(0.0123, Unit::CoreShare), "1.23 %");
        let ns = Row { label: "x".into(), values: vec![12.0, 15.5], unit: Unit::Ns, goal: None };
        assert!(table_line(&ns).contains("12.0–15.5 ns"), "{}", table_line(&ns));
    }

    #[test]
    fn ratios_are_on_over_off_per_pair() {
        assert_eq!(ratios(&[(2.0, 1.0), (4.0, 4.0)], |x| *x), vec![0.5, 1.0]);
    }
}
