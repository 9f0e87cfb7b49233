//! Runs `h2load` (Debian's `nghttp2-client`) as `wrk` is run for HTTP/1.1: a closed loop for a
//! fixed time, every connection keeping `streams` requests open at once, and reads its summary
//! and per-request log into the same result.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::wrk::{WrkResult, WrkSpec};

/// h2load against an h2c `url` (prior knowledge) for `spec.seconds`, `streams` at a time per
/// connection; `log` is where its per-request log goes (read, then removed).
pub(crate) fn run_url(spec: WrkSpec, url: &str, streams: u32, log: &Path) -> Result<WrkResult> {
    let out = Command::new("h2load")
        .args([
            format!("-t{}", spec.threads),
            format!("-c{}", spec.connections),
            format!("-m{streams}"),
            format!("-D{}", spec.seconds),
            format!("--log-file={}", log.display()),
            url.to_owned(),
        ])
        .output()
        .context("failed to run h2load (cargo xtask setup installs nghttp2-client)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("h2load exited with {}: {text}{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let log_text = std::fs::read_to_string(log).with_context(|| format!("h2load wrote no log at {}", log.display()))?;
    let _ = std::fs::remove_file(log);
    parse(&text, &log_text).with_context(|| format!("unexpected h2load output:\n{text}"))
}

/// The summary's "finished in 5.00s, 65432.10 req/s, ..." and "requests: ... succeeded, ...
/// failed, ..." lines, and the log's third column (µs until the response's end) for p50 and p99.
fn parse(text: &str, log: &str) -> Option<WrkResult> {
    let finished = text.lines().find_map(|l| l.strip_prefix("finished in "))?;
    let rps = finished.split(',').nth(1)?.trim().strip_suffix(" req/s")?.parse().ok()?;
    let requests_line = text.lines().find(|l| l.starts_with("requests:"))?;
    let field = |name: &str| -> Option<f64> {
        requests_line.split(',').find_map(|f| f.trim().strip_suffix(name)?.trim().rsplit(' ').next()?.parse().ok())
    };
    let (succeeded, failed) = (field("succeeded")?, field("failed")?);
    let mut micros: Vec<u64> = log.lines().filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok()).collect();
    if micros.is_empty() {
        return None;
    }
    micros.sort_unstable();
    let at = |quantile: f64| micros[((micros.len() - 1) as f64 * quantile) as usize] as f64 / 1000.0;
    let errors = if failed > 0.0 { format!("  [{failed} requests failed]") } else { String::new() };
    Some(WrkResult { rps, requests: succeeded, p50_ms: at(0.50), p99_ms: at(0.99), errors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_h2load_summary_and_log() {
        let text = "finished in 5.00s, 65432.10 req/s, 7.51MB/s\n\
                    requests: 327160 total, 327200 started, 327160 done, 327150 succeeded, 10 failed, 10 errored, 0 timeout\n";
        let log: String = (1..=100).map(|us| format!("1733480000000000\t200\t{}\n", us * 10)).collect();
        let r = parse(text, &log).unwrap();
        assert_eq!((r.rps, r.requests), (65432.10, 327_150.0));
        assert!((r.p50_ms - 0.50).abs() < 1e-9, "{}", r.p50_ms);
        assert!((r.p99_ms - 0.99).abs() < 1e-9, "{}", r.p99_ms);
        assert_eq!(r.errors, "  [10 requests failed]");
        assert!(parse(text, "").is_none(), "no log, no percentiles");
        assert!(parse("requests: 1 total\n", &log).is_none(), "no summary, no result");
    }
}
