//! Prometheus text exposition (format 0.0.4), encoded by the `prometheus-client` crate through
//! its collector API: our counters and histograms come ready-made from kernel maps and state, so
//! there is nothing to `inc()`. Each scrape gathers values into the families declared in
//! [`super::families`] (the one place a metric's name, type, help and labels are written) and the
//! library writes them: `_total`, escaping, number formats, cumulative buckets.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
    registry::Registry,
};

/// One metric family: what Prometheus shows for it. A counter's name has no `_total`: the
/// encoder adds it.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Label names, in the order samples give their values.
    pub labels: &'static [&'static str],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        }
    }
}

/// One scrape's values, family by family, in the order they were declared.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Gathered>,
}

#[derive(Debug)]
struct Gathered {
    family: &'static Family,
    samples: Vec<Sample>,
}

#[derive(Debug)]
struct Sample {
    labels: Vec<(&'static str, String)>,
    value: Value,
}

#[derive(Debug)]
enum Value {
    Number(f64),
    /// Per-bucket counts (not cumulative) by upper bound, as the encoder takes them.
    Buckets {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
}

pub use crate::state::histogram::Log2Histogram;

/// Upper bounds printed for log2 histograms: 2^10 ns (1 µs) to 2^36 ns (69 s), one every ×4,
/// so a histogram is 14 buckets plus +Inf, enough for µs lock waits and minute-long stalls.
const PRINTED_BUCKETS: std::ops::RangeInclusive<usize> = 10..=36;

impl Exposition {
    /// Declares a family: it is shown (HELP and TYPE) even with no samples.
    pub fn family(&mut self, family: &'static Family) -> &mut Self {
        self.families.push(Gathered { family, samples: Vec::new() });
        self
    }

    pub fn sample(&mut self, family: &'static Family, labels: &[(&'static str, &str)], value: f64) -> &mut Self {
        self.push(family, labels, Value::Number(value));
        self
    }

    pub fn histogram(
        &mut self,
        family: &'static Family,
        labels: &[(&'static str, &str)],
        hist: &Log2Histogram,
    ) -> &mut Self {
        let mut below = 0;
        let buckets = PRINTED_BUCKETS
            .step_by(2)
            .map(|bucket| {
                let cumulative = hist.cumulative_below(bucket);
                let in_bucket = cumulative - below;
                below = cumulative;
                ((1u64 << bucket) as f64 / 1e9, in_bucket)
            })
            .collect();
        let value = Value::Buckets { sum: hist.sum_ns as f64 / 1e9, count: hist.count(), buckets };
        self.push(family, labels, value);
        self
    }

    fn push(&mut self, family: &'static Family, labels: &[(&'static str, &str)], value: Value) {
        debug_assert!(
            labels.iter().map(|(key, _)| *key).eq(family.labels.iter().copied()),
            "{}: labels {labels:?}, declared {:?}",
            family.name,
            family.labels
        );
        debug_assert_eq!(matches!(value, Value::Buckets { .. }), family.kind == Kind::Histogram, "{}", family.name);
        let labels = labels.iter().map(|(key, value)| (*key, (*value).to_owned())).collect();
        let sample = Sample { labels, value };
        match self.families.iter_mut().rev().find(|gathered| std::ptr::eq(gathered.family, family)) {
            Some(gathered) => gathered.samples.push(sample),
            None => self.families.push(Gathered { family, samples: vec![sample] }),
        }
    }

    pub fn finish(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape(self.families)));
        let mut text = String::new();
        // Writing to a String cannot fail; a family the encoder refuses would be our bug.
        if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
            tracing::error!(%error, "metrics could not be encoded");
        }
        text
    }
}

/// One scrape handed to the encoder.
#[derive(Debug)]
struct Scrape(Vec<Gathered>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for gathered in &self.0 {
            let family = gathered.family;
            let mut metric = encoder.encode_descriptor(family.name, family.help, None, family.kind.metric_type())?;
            for sample in &gathered.samples {
                let mut series = metric.encode_family(&sample.labels)?;
                match &sample.value {
                    Value::Number(value) if family.kind == Kind::Counter => {
                        series.encode_counter::<NoLabelSet, _, f64>(value, None)?;
                    }
                    Value::Number(value) => series.encode_gauge(value)?,
                    Value::Buckets { sum, count, buckets } => {
                        series.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static THINGS: Family = Family { name: "x", kind: Kind::Counter, help: "Things.", labels: &["thread"] };
    static LATENCY: Family =
        Family { name: "lat_seconds", kind: Kind::Histogram, help: "Latency.", labels: &["process"] };
    static EMPTY: Family = Family { name: "none", kind: Kind::Gauge, help: "Nothing yet.", labels: &[] };
    static LEVEL: Family = Family { name: "level", kind: Kind::Gauge, help: "A level.", labels: &[] };

    #[test]
    fn counter_with_escaped_labels() {
        let mut e = Exposition::default();
        e.family(&THINGS).sample(&THINGS, &[("thread", "a\"b\\c\nd")], 1.5);
        assert_eq!(
            e.finish(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{thread=\"a\\\"b\\\\c\\nd\"} 1.5\n"
        );
    }

    #[test]
    fn families_without_samples_or_labels_are_shown() {
        let mut e = Exposition::default();
        e.family(&EMPTY).family(&LEVEL).sample(&LEVEL, &[], 3.0);
        let text = e.finish();
        assert!(text.contains("# TYPE none gauge\n"), "{text}");
        assert!(text.contains("\nlevel 3"), "{text}");
    }

    #[test]
    fn log2_histogram_is_cumulative_with_exact_sum() {
        let mut h = Log2Histogram::default();
        h.add(11, 3); // [1.024 µs, 2.048 µs)
        h.add(20, 2); // [0.52 ms, 1.05 ms)
        h.sum_ns = 3 * 1500 + 2 * 700_000;
        let mut e = Exposition::default();
        e.family(&LATENCY).histogram(&LATENCY, &[("process", "java")], &h);
        let text = e.finish();
        let count_at = |le: f64| -> u64 {
            text.lines()
                .find(|l| {
                    l.strip_prefix("lat_seconds_bucket{process=\"java\",le=\"")
                        .and_then(|rest| rest.split('"').next())
                        .and_then(|v| v.parse::<f64>().ok())
                        .is_some_and(|v| (v - le).abs() < 1e-15)
                })
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no bucket le={le}: {text}"))
        };
        assert_eq!(count_at(0.000001024), 0);
        assert_eq!(count_at(0.000004096), 3);
        assert_eq!(count_at(0.001048576), 5);
        assert!(text.contains("lat_seconds_bucket{process=\"java\",le=\"+Inf\"} 5\n"), "{text}");
        assert!(text.contains("lat_seconds_sum{process=\"java\"} 0.0014045\n"), "{text}");
        assert!(text.contains("lat_seconds_count{process=\"java\"} 5\n"), "{text}");
        // Buckets never decrease.
        let counts: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("lat_seconds_bucket"))
            .map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("count"))
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
        assert_eq!(counts.len(), 15, "14 bounds and +Inf");
    }
}
