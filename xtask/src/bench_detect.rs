//! `cargo xtask bench detect`: the detection matrix, runtime × fault → detected after, alerts
//! while healthy, resolved after, against issue 13's goals. Every test of the runtime and
//! incident suites (ignored ones included) runs as its own process under the machine's
//! end-to-end lock, once per round; each reports what it measured in `SUMMARY {json}` lines
//! (`tests::summary`). A failing or hung test is a failed row, not the end of the bench. Each
//! run's output is kept in `target/bench-detect/`.

mod matrix;
mod output;
mod supervise;

pub(crate) use supervise::lock as e2e_lock;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::args;
use crate::util::{cargo, output as command_output, target_dir, workspace_root};

/// The suites with a fault to detect: the runtimes', the incidents' and the single-kind ones.
const SUITES: &[&str] = &[
    "runtime_jvm",
    "runtime_tomcat",
    "runtime_node",
    "runtime_python",
    "runtime_go",
    "incident_event_loop_blocked",
    "incident_pool_saturated",
    "incident_upstream_no_response",
    "request_queueing",
    "event_loop_busy",
];

/// Every runtime and incident scenario: detected after, false alerts, resolved after (as root)
///
/// Every test of the runtime and incident suites, ignored ones included, each as its own process
/// group under the machine's end-to-end lock, once per round; one Markdown table against issue
/// 13's goals. Each run's output is kept in `target/bench-detect/`.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Rounds: every test runs once in each.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = args::number_in(1_usize..))]
    rounds: usize,
    /// Only the tests whose `suite::test` holds this.
    #[arg(long, value_name = "SUBSTRING")]
    filter: Option<String>,
    /// Seconds a test may take; then its whole process group is ended.
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 300, value_parser = args::number_in(1_u64..))]
    timeout_s: u64,
}

/// One test of one suite's binary.
struct Test {
    binary: PathBuf,
    /// `suite::name`, as the table and the filter name it.
    id: String,
    name: String,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench detect loads eBPF programs: run it as root");
    }
    // The binaries the tests start (the daemon, reference-gateway, fixtures), then the suites.
    cargo(&["build", "-p", "gateway-observer", "-p", "reference-gateway", "-p", "tests", "--bins"])?;
    let tests = select(list_tests(&build_suites()?)?, options.filter.as_deref());
    if tests.is_empty() {
        bail!("no test matches the filter {:?}", options.filter);
    }
    let logs = target_dir().join("bench-detect");
    std::fs::create_dir_all(&logs).with_context(|| format!("create {}", logs.display()))?;
    eprintln!("bench detect: {} tests × {} rounds, logs in {}", tests.len(), options.rounds, logs.display());
    let timeout = Duration::from_secs(options.timeout_s);
    supervise::catch_interrupts();
    let mut runs = Vec::new();
    'rounds: for round in 1..=options.rounds {
        for test in &tests {
            if supervise::interrupted() {
                break 'rounds;
            }
            let log = logs.join(format!("{}-round{round}.log", test.id.replace("::", "-")));
            eprint!("[round {round}/{}] {} ... ", options.rounds, test.id);
            let finished = supervise::run(&test.binary, &test.name, &workspace_root().join("tests"), &log, timeout)?;
            if let supervise::Ending::Interrupted = finished.ending {
                eprintln!("interrupted");
                break 'rounds;
            }
            let elapsed = finished.elapsed;
            let run = judge(test, finished);
            report_progress(&run, elapsed, &log);
            runs.push(run);
        }
    }
    if runs.is_empty() {
        bail!("interrupted before any test finished");
    }
    let date = command_output("date", &["-u", "+%Y-%m-%d"]).unwrap_or_default();
    println!(
        "\nDetection matrix, {} ({} round{}, `cargo xtask bench detect`):\n",
        date.trim(),
        options.rounds,
        if options.rounds == 1 { "" } else { "s" }
    );
    print!("{}", matrix::render(&matrix::rows(&runs)));
    if supervise::interrupted() {
        bail!("interrupted: the matrix above covers the runs that finished");
    }
    Ok(())
}

/// A finished run as a matrix entry: failed on a non-zero exit (its first panic line says why)
/// or a timeout.
fn judge(test: &Test, finished: supervise::Finished) -> matrix::Run {
    let output = output::parse(&finished.stderr);
    let failure = match finished.ending {
        supervise::Ending::Exited(status) if status.success() => None,
        supervise::Ending::Exited(status) => {
            Some(output.panic.clone().unwrap_or_else(|| format!("exited with {status}, no panic line")))
        }
        supervise::Ending::TimedOut(after) => Some(format!("timed out after {} s", after.as_secs())),
        supervise::Ending::Interrupted => Some("interrupted".into()),
    };
    matrix::Run { test: test.id.clone(), failure, output }
}

fn report_progress(run: &matrix::Run, elapsed: Duration, log: &Path) {
    let measured: Vec<String> = run
        .output
        .measured
        .iter()
        .map(|m| match (&m.scenario.kind, m.detected_s) {
            (Some(kind), Some(detected)) => format!("{kind} detected {detected:.2} s"),
            _ => "quiet".to_owned(),
        })
        .collect();
    match &run.failure {
        None => eprintln!("ok in {:.0} s ({})", elapsed.as_secs_f64(), measured.join(", ")),
        Some(why) => eprintln!("FAILED in {:.0} s: {why}\n    log: {}", elapsed.as_secs_f64(), log.display()),
    }
    for line in &run.output.unreadable {
        eprintln!("    unreadable summary: {line}");
    }
}

/// Builds the suites' test binaries once; their paths by suite name, from cargo's JSON messages.
fn build_suites() -> anyhow::Result<Vec<(String, PathBuf)>> {
    let cargo_bin = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo_bin);
    command.args(["test", "-p", "tests", "--no-run", "--message-format=json-render-diagnostics"]);
    for suite in SUITES {
        command.args(["--test", suite]);
    }
    let out = command
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("run {cargo_bin} test --no-run"))?;
    if !out.status.success() {
        bail!("building the test suites failed: {}", out.status);
    }
    let binaries = suite_binaries(&String::from_utf8_lossy(&out.stdout));
    if let Some(missing) = SUITES.iter().find(|s| !binaries.iter().any(|(name, _)| name == *s)) {
        bail!("cargo built no test binary for {missing}");
    }
    Ok(binaries)
}

/// (target name, executable) of every integration-test artifact in cargo's JSON messages.
fn suite_binaries(messages: &str) -> Vec<(String, PathBuf)> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["kind"][0] == "test")
        .filter_map(|m| Some((m["target"]["name"].as_str()?.to_owned(), PathBuf::from(m["executable"].as_str()?))))
        .collect()
}

/// Every test of each suite, in the order of `SUITES`, as the binary lists them.
fn list_tests(binaries: &[(String, PathBuf)]) -> anyhow::Result<Vec<Test>> {
    let mut tests = Vec::new();
    for suite in SUITES {
        let (_, binary) = binaries.iter().find(|(name, _)| name == suite).context("built above")?;
        let listing = Command::new(binary)
            .args(["--list", "--include-ignored"])
            .output()
            .with_context(|| format!("list the tests of {}", binary.display()))?;
        for name in listed_tests(&String::from_utf8_lossy(&listing.stdout)) {
            tests.push(Test { binary: binary.clone(), id: format!("{suite}::{name}"), name });
        }
    }
    Ok(tests)
}

/// The names in libtest's `--list` output (`NAME: test` lines).
fn listed_tests(listing: &str) -> Vec<String> {
    listing.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_owned).collect()
}

fn select(tests: Vec<Test>, filter: Option<&str>) -> Vec<Test> {
    tests.into_iter().filter(|t| filter.is_none_or(|f| t.id.contains(f))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bench, tests::bench};

    #[test]
    fn defaults_are_the_readmes() {
        // README.md, "Detection matrix": `--rounds 1`, `--filter SUBSTRING`, `--timeout 300`.
        let Bench::Detect(o) = bench(&["detect"]) else { panic!("not bench detect") };
        assert_eq!((o.rounds, o.filter, o.timeout_s), (1, None, 300));
        let given = ["detect", "--rounds", "3", "--filter", "runtime_jvm::", "--timeout", "60"];
        let Bench::Detect(o) = bench(&given) else { panic!("not bench detect") };
        assert_eq!((o.rounds, o.filter.as_deref(), o.timeout_s), (3, Some("runtime_jvm::"), 60));
    }

    #[test]
    fn test_binaries_come_from_cargo_messages() {
        let messages = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"tests"},"executable":null}
{"reason":"compiler-artifact","target":{"kind":["test"],"name":"runtime_go"},"executable":"/t/debug/deps/runtime_go-abc"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            suite_binaries(messages),
            [("runtime_go".to_owned(), PathBuf::from("/t/debug/deps/runtime_go-abc"))]
        );
    }

    #[test]
    fn listed_tests_are_the_test_lines() {
        let listing = "go_a: test\ngo_b: test\n\n2 tests, 0 benchmarks\n";
        assert_eq!(listed_tests(listing), ["go_a", "go_b"]);
    }
}
