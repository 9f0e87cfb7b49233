//! Parsing Prometheus text into samples the tests can query.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)),
        None => (series, BTreeMap::new()),
    };
    Some(Sample { name: name.to_owned(), labels, value })
}

/// Label values here never hold `",` so a simple split is enough for our own output.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.to_owned(), v.trim_end_matches('"').to_owned()))
        })
        .collect()
}

/// Sum of the samples of `name` whose labels include every `(key, value)` in `filter`.
pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && filter.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// (sum, count) of `gateway_observer_http_socket_queue_seconds` for `process`: how long its
/// requests waited unread in their sockets, in all, and how many waits were recorded.
pub fn socket_queue_totals(observer: &crate::observer::Observer, process: &str) -> (f64, f64) {
    let samples = parse(&observer.metrics());
    let series = |suffix: &str| {
        sum(&samples, &format!("gateway_observer_http_socket_queue_seconds_{suffix}"), &[("process", process)])
    };
    (series("sum"), series("count"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_and_sums() {
        let text = "# HELP x y\nx_total{a=\"1\",b=\"two words\"} 2.5\nx_total{a=\"2\",b=\"z\"} 1\nplain 7\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].labels["b"], "two words");
        assert_eq!(sum(&samples, "x_total", &[]), 3.5);
        assert_eq!(sum(&samples, "x_total", &[("a", "2")]), 1.0);
        assert_eq!(sum(&samples, "plain", &[]), 7.0);
    }
}
