//! `cargo xtask setup | build | lint | test | test-kernels | package | fuzz | bench
//! probes|gateway|overhead|parser|records|detect|churn|jvm-dump | demo`: the project's own commands. Each installs what it needs first, so a fresh machine goes from
//! clone to green with `cargo xtask test`. The arguments are parsed by clap: `Cli` here, each
//! command's options next to the code that uses them.

mod args;
mod bench_churn;
mod bench_detect;
mod bench_gateway;
mod bench_jvm_dump;
mod bench_overhead;
mod bench_parser;
mod bench_probes;
mod bpf_progs;
mod demo;
mod fuzz;
mod h2load;
mod layers;
mod lint;
mod loadgen;
mod package;
mod procstat;
mod setup;
mod test_kernels;
mod util;
mod without_bpf_linker;
mod wrk;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// The project's own commands. Each installs what it needs first, so a fresh machine goes from
/// clone to green with `cargo xtask test`.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Install what is missing, and only that
    ///
    /// Nightly's rust-src, bpf-linker built against nightly's own LLVM, cargo-fuzz, rustfmt and
    /// clippy, the Debian packages the tests and benchmarks use. Every other command runs it first.
    Setup,
    /// Build every host package, all targets.
    Build,
    /// What CI holds every change to: rustfmt's check and clippy with warnings denied
    ///
    /// rustfmt's check on the workspace and the fuzz crates, clippy on the host crates and, with
    /// nightly for bpfel-unknown-none, on the kernel crate.
    Lint,
    Test(TestArgs),
    TestKernels(test_kernels::Options),
    Package(package::Options),
    Fuzz(fuzz::Options),
    Demo(demo::Options),
    /// The benchmarks (README.md, "Benchmarks").
    Bench {
        #[command(subcommand)]
        bench: Bench,
    },
}

#[derive(Subcommand, Debug)]
enum Bench {
    Probes(bench_probes::Options),
    Gateway(bench_gateway::Options),
    Overhead(bench_overhead::Options),
    /// The HTTP/1.x parser's CPU cost per segment
    ///
    /// In process and unprivileged: gateway-observer-http/examples/parser_bench.rs, built with the
    /// release profile.
    Parser,
    /// The daemon's CPU per proxied request on the socket ring
    ///
    /// In process and unprivileged: four data records per request decoded and fed to the request
    /// tracker (gateway-observer/examples/records_bench.rs, release profile).
    Records,
    Detect(bench_detect::Options),
    Churn(bench_churn::Options),
    JvmDump(bench_jvm_dump::Options),
}

/// Every test, as CI runs them (as root)
///
/// The pure crates' tests with bpf-linker out of reach (skipped when any argument is given), then
/// every test of the host packages, privileged suites included, then every fuzz target for
/// `FUZZ_SECONDS` each (default 10; 0 skips them).
#[derive(clap::Args, Debug)]
struct TestArgs {
    /// Passed to that `cargo test` as they are: a test name filter, its own flags, `--` and the
    /// test binaries' flags.
    #[arg(allow_hyphen_values = true, value_name = "CARGO_TEST_ARGS")]
    cargo_test: Vec<String>,
    /// Passed to `cargo test` after a `--`: the test binaries' flags (`cargo xtask test --
    /// --include-ignored`).
    #[arg(last = true, value_name = "TEST_BINARY_ARGS")]
    test_binary: Vec<String>,
}

impl TestArgs {
    /// The arguments for `cargo test`, as they were given: clap takes a leading `--` for its own
    /// separator and keeps what follows apart.
    fn cargo_test_args(&self) -> Vec<&str> {
        let mut args: Vec<&str> = self.cargo_test.iter().map(String::as_str).collect();
        if !self.test_binary.is_empty() {
            args.push("--");
            args.extend(self.test_binary.iter().map(String::as_str));
        }
        args
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Setup => setup::run(),
        Command::Build => {
            setup::run()?;
            build()
        }
        Command::Lint => {
            setup::run()?;
            lint::run()
        }
        Command::Test(args) => {
            setup::run()?;
            test(&args.cargo_test_args())
        }
        Command::TestKernels(options) => {
            setup::run()?;
            test_kernels::run(&options)
        }
        Command::Package(options) => {
            setup::run()?;
            package::run(&options)
        }
        Command::Fuzz(options) => {
            setup::run()?;
            fuzz::run(&options)
        }
        Command::Demo(options) => {
            demo::require_root()?;
            setup::run()?;
            demo::run(&options)
        }
        Command::Bench { bench } => {
            setup::run()?;
            match bench {
                Bench::Probes(options) => bench_probes::run(&options),
                Bench::Gateway(options) => bench_gateway::run(&options),
                Bench::Overhead(options) => bench_overhead::run(&options),
                Bench::Parser => bench_parser::run(),
                Bench::Records => bench_parser::records(),
                Bench::Detect(options) => bench_detect::run(&options),
                Bench::Churn(options) => bench_churn::run(&options),
                Bench::JvmDump(options) => bench_jvm_dump::run(&options),
            }
        }
    }
}

/// Every host package but the kernel crate (which only builds for the BPF target).
const HOST_PACKAGES: &[&str] = &["--workspace", "--exclude", "gateway-observer-ebpf"];

pub(crate) fn build() -> anyhow::Result<()> {
    let mut args = vec!["build", "--all-targets"];
    args.extend(HOST_PACKAGES);
    util::cargo(&args).context("build failed")
}

/// `cargo xtask test` (`TestArgs`); `extra` goes to that `cargo test`.
fn test(extra: &[&str]) -> anyhow::Result<()> {
    if extra.is_empty() {
        without_bpf_linker::test_pure_crates()?;
    }
    build()?;
    let mut args = vec!["test"];
    args.extend(HOST_PACKAGES);
    args.extend(extra);
    util::cargo(&args).context("tests failed")?;
    match fuzz::seconds_from_env()? {
        0 => Ok(()),
        seconds => fuzz::fuzz(seconds, None),
    }
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    fn try_parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cargo xtask").chain(args.iter().copied()))
    }

    /// `cargo xtask ARGS`, parsed; a refusal panics with clap's message.
    pub(crate) fn parse(args: &[&str]) -> Command {
        match try_parse(args) {
            Ok(cli) => cli.command,
            Err(err) => panic!("cargo xtask {}: {err}", args.join(" ")),
        }
    }

    /// `cargo xtask bench ARGS`, parsed.
    pub(crate) fn bench(args: &[&str]) -> Bench {
        match parse(&[&["bench"], args].concat()) {
            Command::Bench { bench } => bench,
            other => panic!("not a bench: {other:?}"),
        }
    }

    fn words(form: &str) -> Vec<&str> {
        form.split_whitespace().collect()
    }

    #[test]
    fn the_definition_is_consistent() {
        // clap's own checks (names, positionals, value parsers against defaults).
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn every_form_ci_and_the_docs_use_parses() {
        // .ci/run, README.md, reference-gateway/README.md, ARCHITECTURE.md and the fuzz crates'
        // manifests (`grep -rn 'cargo xtask'`), with N and NAME filled in.
        for form in [
            "setup",
            "build",
            "lint",
            "test",
            "test http::replay",
            "test-kernels",
            "test-kernels --kernel 6.1",
            "test-kernels --kernel 6.12",
            "package",
            "package --check",
            "fuzz",
            "fuzz --seconds 300",
            "fuzz socket_records --seconds 0",
            "demo",
            "demo --phase-seconds 5",
            "demo --keep",
            "demo --phase-seconds 5 --keep",
            "bench probes",
            "bench probes --seconds 3",
            "bench gateway",
            "bench gateway --rounds 5 --duration 10 --connections 64 --workers 2",
            "bench overhead",
            "bench overhead --pairs 2 --duration 8 --gateway nginx",
            "bench overhead --pairs 1 --duration 5 --gateway nginx --rate 0",
            "bench parser",
            "bench records",
            "bench detect",
            "bench detect --rounds 3 --filter runtime_jvm:: --timeout 300",
            "bench churn",
            "bench churn --restarts 100 --threads 2000 --connections 10000 --burst-seconds 5 --settle 75",
            "bench jvm-dump",
            "bench jvm-dump --threads 200,1024 --repeats 9 --depth 40",
        ] {
            parse(&words(form));
        }
        assert!(matches!(parse(&["setup"]), Command::Setup));
        assert!(matches!(parse(&["build"]), Command::Build));
        assert!(matches!(parse(&["lint"]), Command::Lint));
        assert!(matches!(bench(&["parser"]), Bench::Parser));
    }

    #[test]
    fn test_passes_its_arguments_to_cargo_test_as_given() {
        for form in [
            "",
            "http::replay",
            "-- --include-ignored",
            "runtime_jvm -- --nocapture",
            "-p tests --release rate_limiter",
            "--test churn -- --exact a -- b",
        ] {
            let Command::Test(args) = parse(&[&["test"], &words(form)[..]].concat()) else {
                panic!("test {form}: not the test command")
            };
            assert_eq!(args.cargo_test_args(), words(form), "test {form}");
        }
    }

    #[test]
    fn the_hand_written_parsers_refusals_stay_refused() {
        for form in [
            "",
            "nope",
            "bench",
            "bench nope",
            "bench parser extra",
            "package extra",
            "package --check extra",
            "test-kernels --kernel",
            "test-kernels --kernel 5.10",
            "fuzz one two",
            "fuzz --nope",
            "fuzz --seconds",
            "fuzz --seconds soon",
            "demo --phase-seconds 2",
            "demo --phase-seconds 601",
            "demo --nope",
            "bench gateway --rounds 0",
            "bench gateway --duration 0",
            "bench gateway --connections 0",
            "bench gateway --workers 0",
            "bench overhead --duration 2",
            "bench overhead --pairs 0",
            "bench overhead --workers 0",
            "bench overhead --wrk-threads 0",
            "bench overhead --gateway apache",
            "bench overhead --rate=-1",
            "bench detect --rounds 0",
            "bench detect --timeout 0",
            "bench detect --nope",
            "bench churn --settle 14",
            "bench churn --threads 10001",
            "bench churn --connections 30001",
            "bench churn --nope",
            "bench jvm-dump --threads 0",
            "bench jvm-dump --repeats 0",
        ] {
            assert!(try_parse(&words(form)).is_err(), "cargo xtask {form} parsed");
        }
    }

    #[test]
    fn help_is_asked_for_not_refused() {
        for form in ["--help", "bench --help", "test --help", "fuzz -h", "demo --help", "bench gateway --help"] {
            let kind = try_parse(&words(form)).map(|_| ()).expect_err(form).kind();
            assert_eq!(kind, ErrorKind::DisplayHelp, "cargo xtask {form}");
        }
    }
}
