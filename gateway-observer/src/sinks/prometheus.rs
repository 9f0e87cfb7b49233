//! Prometheus text exposition (format 0.0.4), written by hand because our counters and histograms
//! come ready-made from kernel maps: there is nothing to `inc()`, only values to print.

use std::fmt::Write as _;

/// Builds one exposition. Each metric family is declared once (HELP/TYPE), then its samples.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

/// A log2 histogram as the kernel keeps it: `buckets[b]` counts values in [2^(b-1), 2^b) ns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log2Histogram {
    pub buckets: Vec<u64>,
    pub sum_ns: u64,
}

impl Log2Histogram {
    pub fn add(&mut self, bucket: usize, count: u64) {
        if self.buckets.len() <= bucket {
            self.buckets.resize(bucket + 1, 0);
        }
        self.buckets[bucket] += count;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Values below 2^bucket ns: every bucket up to and including `bucket`.
    fn cumulative_below(&self, bucket: usize) -> u64 {
        self.buckets.iter().take(bucket + 1).sum()
    }
}

/// Upper bounds printed for log2 histograms: 2^10 ns (1 µs) to 2^36 ns (69 s), one every ×4,
/// so a histogram is 14 buckets plus +Inf, enough for µs lock waits and minute-long stalls.
const PRINTED_BUCKETS: std::ops::RangeInclusive<usize> = 10..=36;

impl Exposition {
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
        self
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.text.push_str(name);
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {}", format_value(value));
        self
    }

    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], hist: &Log2Histogram) -> &mut Self {
        for bucket in PRINTED_BUCKETS.step_by(2) {
            let le = format_value((1u64 << bucket) as f64 / 1e9);
            let _ = write!(self.text, "{name}_bucket");
            write_labels(&mut self.text, labels, Some(&le));
            let _ = writeln!(self.text, " {}", hist.cumulative_below(bucket));
        }
        let _ = write!(self.text, "{name}_bucket");
        write_labels(&mut self.text, labels, Some("+Inf"));
        let _ = writeln!(self.text, " {}", hist.count());
        let _ = write!(self.text, "{name}_sum");
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {}", format_value(hist.sum_ns as f64 / 1e9));
        let _ = write!(self.text, "{name}_count");
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {}", hist.count());
        self
    }

    pub fn finish(self) -> String {
        self.text
    }
}

fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (key, value) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(key);
        out.push_str("=\"");
        escape_label_value(out, value);
        out.push('"');
    }
    out.push('}');
}

/// Label values escape backslash, double quote and newline (thread names can hold anything).
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_with_escaped_labels() {
        let mut e = Exposition::default();
        e.family("x_total", "counter", "Things.").sample("x_total", &[("thread", "a\"b\\c\nd")], 1.5);
        assert_eq!(
            e.finish(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{thread=\"a\\\"b\\\\c\\nd\"} 1.5\n"
        );
    }

    #[test]
    fn log2_histogram_is_cumulative_with_exact_sum() {
        let mut h = Log2Histogram::default();
        h.add(11, 3); // [1.024 µs, 2.048 µs)
        h.add(20, 2); // [0.52 ms, 1.05 ms)
        h.sum_ns = 3 * 1500 + 2 * 700_000;
        let mut e = Exposition::default();
        e.histogram("lat_seconds", &[("process", "java")], &h);
        let text = e.finish();
        assert!(text.contains("lat_seconds_bucket{process=\"java\",le=\"0.000001024\"} 0\n"), "{text}");
        assert!(text.contains("lat_seconds_bucket{process=\"java\",le=\"0.000004096\"} 3\n"), "{text}");
        assert!(text.contains("lat_seconds_bucket{process=\"java\",le=\"0.001048576\"} 5\n"), "{text}");
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
    }
}
