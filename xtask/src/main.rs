//! `cargo xtask setup | build | lint | test | test-kernels | package | bench
//! probes|gateway|overhead|parser|detect|churn | demo`: the project's own commands. Each installs what it needs first, so a fresh machine goes from
//! clone to green with `cargo xtask test`.

mod bench_churn;
mod bench_detect;
mod bench_gateway;
mod bench_overhead;
mod bench_parser;
mod bench_probes;
mod bpf_progs;
mod demo;
mod fuzz;
mod lint;
mod loadgen;
mod package;
mod procstat;
mod setup;
mod test_kernels;
mod util;
mod without_bpf_linker;
mod wrk;

use anyhow::{Context as _, bail};

const USAGE: &str = "usage: cargo xtask <setup | build | lint | test | test-kernels [--kernel 6.1|6.12] | package [--check] | fuzz [TARGET] [--seconds N] | bench probes [--seconds N] | bench gateway [--rounds N] | bench overhead [--pairs N] [--duration S] [--gateway reference|nginx|both] [--rate R] | bench parser | bench detect [--rounds N] [--filter SUBSTR] [--timeout S] | bench churn [--restarts N] [--threads N] [--connections N] [--burst-seconds S] [--settle S] | demo [--phase-seconds N] [--keep]>";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    match args.first().map(String::as_str) {
        Some("setup") => setup::run(),
        Some("build") => {
            setup::run()?;
            build()
        }
        Some("lint") => {
            setup::run()?;
            lint::run()
        }
        Some("test") => {
            setup::run()?;
            test(rest)
        }
        Some("test-kernels") => {
            setup::run()?;
            test_kernels::run(rest)
        }
        Some("package") => {
            setup::run()?;
            package::run(rest)
        }
        Some("fuzz") => {
            setup::run()?;
            fuzz::run(rest)
        }
        Some("demo") => {
            demo::require_root()?;
            setup::run()?;
            demo::run(rest)
        }
        Some("bench") => {
            setup::run()?;
            match rest.first().map(String::as_str) {
                Some("probes") => bench_probes::run(&rest[1..]),
                Some("gateway") => bench_gateway::run(&rest[1..]),
                Some("overhead") => bench_overhead::run(&rest[1..]),
                Some("parser") => bench_parser::run(&rest[1..]),
                Some("detect") => bench_detect::run(&rest[1..]),
                Some("churn") => bench_churn::run(&rest[1..]),
                _ => bail!("{USAGE}"),
            }
        }
        _ => bail!("{USAGE}"),
    }
}

/// Every host package but the kernel crate (which only builds for the BPF target).
const HOST_PACKAGES: &[&str] = &["--workspace", "--exclude", "gateway-observer-ebpf"];

fn build() -> anyhow::Result<()> {
    let mut args = vec!["build", "--all-targets"];
    args.extend(HOST_PACKAGES);
    util::cargo(&args).context("build failed")
}

/// Runs the pure crates' tests with bpf-linker out of reach (skipped when a filter is given), then builds the binaries the
/// end-to-end tests start and runs every test of the host packages (privileged suites included).
/// Extra arguments go to that `cargo test` (e.g. a test name filter). Then fuzzes the HTTP parser
/// and the daemon's parsers for `FUZZ_SECONDS` each (default 10 per target; 0 skips it).
fn test(extra: &[String]) -> anyhow::Result<()> {
    if extra.is_empty() {
        without_bpf_linker::test_pure_crates()?;
    }
    build()?;
    let mut args = vec!["test"];
    args.extend(HOST_PACKAGES);
    args.extend(extra.iter().map(String::as_str));
    util::cargo(&args).context("tests failed")?;
    match fuzz::seconds_from_env()? {
        0 => Ok(()),
        seconds => fuzz::fuzz(seconds, None),
    }
}
