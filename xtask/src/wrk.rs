//! Runs `wrk` (closed loop: every connection sends its next request when the last one is
//! answered, so it measures the most the server gives) and reads its summary.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// A wrk run's shape: `wrk -t{threads} -c{connections} -d{seconds}s --latency`.
#[derive(Clone, Copy)]
pub(crate) struct WrkSpec {
    pub(crate) threads: usize,
    pub(crate) connections: usize,
    pub(crate) seconds: u64,
}

pub(crate) struct WrkResult {
    pub(crate) rps: f64,
    /// Responses completed in the run.
    pub(crate) requests: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// wrk's socket-error and non-2xx lines, each as `  [line]`; empty when there were none.
    pub(crate) errors: String,
}

pub(crate) fn run(spec: WrkSpec, port: u16) -> Result<WrkResult> {
    run_url(spec, &format!("http://127.0.0.1:{port}/"))
}

/// wrk against `url` (`https://` for TLS: wrk links OpenSSL).
pub(crate) fn run_url(spec: WrkSpec, url: &str) -> Result<WrkResult> {
    let out = Command::new("wrk")
        .args([
            format!("-t{}", spec.threads),
            format!("-c{}", spec.connections),
            format!("-d{}s", spec.seconds),
            "--latency".to_owned(),
            url.to_owned(),
        ])
        .output()
        .context("failed to run wrk (apt-get install -y wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("wrk exited with {}: {text}{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    parse(&text).with_context(|| format!("unexpected wrk output:\n{text}"))
}

fn parse(text: &str) -> Option<WrkResult> {
    let line_after = |prefix: &str| text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(str::trim));
    let rps = line_after("Requests/sec:")?.parse().ok()?;
    // "  123456 requests in 10.00s, 12.34MB read"
    let requests = text.lines().find_map(|l| l.trim().split_once(" requests in ")?.0.parse().ok())?;
    let errors = text
        .lines()
        .filter(|l| l.contains("Non-2xx") || l.contains("Socket errors"))
        .map(|l| format!("  [{}]", l.trim()))
        .collect();
    Some(WrkResult {
        rps,
        requests,
        p50_ms: duration_ms(line_after("50%")?)?,
        p99_ms: duration_ms(line_after("99%")?)?,
        errors,
    })
}

fn duration_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wrk_summary() {
        let text = "  Latency Distribution\n     50%  612.00us\n     99%    2.31ms\n  \
                    987654 requests in 10.00s, 1.2MB read\n  Socket errors: connect 0, read 1, write 0, timeout 0\n\
                    Requests/sec:  98765.43\n";
        let s = parse(text).unwrap();
        assert_eq!(s.rps, 98765.43);
        assert_eq!(s.requests, 987_654.0);
        assert!((s.p50_ms - 0.612).abs() < 1e-9);
        assert!((s.p99_ms - 2.31).abs() < 1e-9);
        assert_eq!(s.errors, "  [Socket errors: connect 0, read 1, write 0, timeout 0]");
        assert_eq!(duration_ms("1.50s"), Some(1500.0));
        assert!(parse("Requests/sec: 1\n").is_none(), "no percentiles, no result");
    }
}
