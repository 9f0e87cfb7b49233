//! `cargo xtask fuzz [TARGET] [--seconds N]`: runs the cargo-fuzz targets (nightly toolchain) for a
//! bounded time each, starting from their committed seed corpora. Two projects: the HTTP parser's
//! (`gateway-observer-http/fuzz`: `http_connection`, `h2_session`, `hpack_decoder`, seeds written
//! by the http::replay, http::h2::fixtures and http::h2::hpack tests) and
//! the daemon's (`gateway-observer/fuzz`: the socket records fed to the request tracker, /proc
//! text, perf maps and /proc/PID/maps, ELF files, hsperfdata files, the config, the daemon's
//! answers as `top` reads them). What the fuzzer finds — new corpus entries, crash artifacts, the
//! build — goes under `target/fuzz/`, so the committed corpora change only on purpose.
//!
//! The builds run with bpf-linker off PATH: the daemon's build.rs then embeds an empty stand-in
//! eBPF object (nothing fuzzed loads it) instead of building the kernel programs with the fuzzer's
//! flags.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{util, without_bpf_linker};

/// The cargo-fuzz projects, by directory under the workspace root; their targets are what
/// `cargo fuzz list` says.
const PROJECTS: &[&str] = &["gateway-observer-http/fuzz", "gateway-observer/fuzz"];
/// `cargo xtask test` fuzzes each target this long unless `FUZZ_SECONDS` says otherwise: ten
/// targets, about 100 s in all, plus the build.
const DEFAULT_SECONDS: u64 = 10;

/// Every fuzz target (or one) for a bounded time each
///
/// The cargo-fuzz targets of gateway-observer-http/fuzz and gateway-observer/fuzz, built with
/// nightly, from their committed seed corpora; what the fuzzer finds (new inputs, crashing
/// inputs, the build) goes under `target/fuzz/`.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Only this target (`cargo fuzz list` in gateway-observer-http/fuzz and
    /// gateway-observer/fuzz names them); every target when absent.
    target: Option<String>,
    /// Seconds per target; 0: until it finds something [default: FUZZ_SECONDS, else 10].
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let seconds = match options.seconds {
        Some(seconds) => seconds,
        None => seconds_from_env()?,
    };
    fuzz(seconds, options.target.as_deref())
}

/// `FUZZ_SECONDS` (per target), or 10.
pub fn seconds_from_env() -> anyhow::Result<u64> {
    match std::env::var("FUZZ_SECONDS") {
        Ok(s) => s.parse().with_context(|| format!("FUZZ_SECONDS={s}: not a number of seconds")),
        Err(_) => Ok(DEFAULT_SECONDS),
    }
}

/// Runs every target (or only `only`) for `seconds` each; a crash does not stop the others, and
/// the error names each target that failed and where its crashing input is.
pub fn fuzz(seconds: u64, only: Option<&str>) -> anyhow::Result<()> {
    let tools = Tools::find()?;
    let work = util::target_dir().join("fuzz");
    let mut ran = 0;
    let mut failed = Vec::new();
    for project in PROJECTS {
        let dir = util::workspace_root().join(project);
        let targets: Vec<String> =
            tools.list(&dir)?.into_iter().filter(|t| only.is_none_or(|only| only == t)).collect();
        if targets.is_empty() {
            continue;
        }
        tools.cargo_fuzz(&dir, &work, &["build"]).with_context(|| format!("building the fuzz targets of {project}"))?;
        for target in targets {
            ran += 1;
            let seeds = dir.join("corpus").join(&target);
            let corpus = work.join("corpus").join(&target);
            let artifacts = work.join("artifacts").join(&target);
            for dir in [&corpus, &artifacts] {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            }
            eprintln!(
                "fuzz: {target} for {seconds} s (corpus {}, crashes in {})",
                corpus.display(),
                artifacts.display()
            );
            // The first corpus directory receives new inputs; the committed seeds are only read.
            let mut args = vec!["run".into(), target.clone()];
            args.extend([&corpus, &seeds].map(|d| d.display().to_string()));
            args.extend([
                "--".into(),
                format!("-max_total_time={seconds}"),
                format!("-artifact_prefix={}/", artifacts.display()),
                "-print_final_stats=1".into(),
            ]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(err) = tools.cargo_fuzz(&dir, &work, &args) {
                eprintln!("fuzz: {target} failed: {err:#}");
                failed.push(format!("{target} (crashing input in {})", artifacts.display()));
            }
        }
    }
    if ran == 0 {
        bail!("no fuzz target named {}", only.unwrap_or_default());
    }
    if !failed.is_empty() {
        bail!("fuzzing failed: {}; replay one with {}/TARGET FILE", failed.join(", "), tools.binaries(&work).display());
    }
    Ok(())
}

/// cargo-fuzz, run with nightly's cargo first on a PATH that holds no bpf-linker. It is run
/// directly, not as `cargo fuzz`: cargo puts `~/.cargo/bin`, where bpf-linker lives, first on the
/// PATH of its subcommands.
struct Tools {
    cargo_fuzz: PathBuf,
    nightly_bin: PathBuf,
    path: std::ffi::OsString,
}

impl Tools {
    fn find() -> anyhow::Result<Self> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let cargo_fuzz = std::env::split_paths(&path)
            .map(|dir| dir.join("cargo-fuzz"))
            .find(|bin| bin.is_file())
            .context("cargo-fuzz is not on PATH (cargo xtask setup installs it)")?;
        let sysroot = Command::new("rustc")
            .args(["+nightly", "--print", "sysroot"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("RUSTC")
            .output()
            .context("failed to run rustc +nightly --print sysroot")?;
        anyhow::ensure!(sysroot.status.success(), "no nightly toolchain (cargo xtask setup installs it)");
        let nightly_bin = Path::new(String::from_utf8_lossy(&sysroot.stdout).trim()).join("bin");
        let path = without_bpf_linker::path_without_bpf_linker(&nightly_bin)?;
        Ok(Self { cargo_fuzz, nightly_bin, path })
    }

    fn command(&self, dir: &Path) -> Command {
        let mut command = Command::new(&self.cargo_fuzz);
        command
            .arg("fuzz")
            .current_dir(dir)
            .env("PATH", &self.path)
            .env("RUSTC", self.nightly_bin.join("rustc"))
            // Set by the stable `cargo xtask` run; they would point at stable.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO");
        command
    }

    /// Where the built targets are: cargo-fuzz builds for the host's triple, named.
    fn binaries(&self, work: &Path) -> PathBuf {
        let host = util::output("rustc", &["-vV"])
            .and_then(|v| v.lines().find_map(|l| l.strip_prefix("host: ")).map(str::to_owned))
            .unwrap_or_else(|| "HOST-TRIPLE".into());
        work.join("build").join(host).join("release")
    }

    /// The project's targets.
    fn list(&self, dir: &Path) -> anyhow::Result<Vec<String>> {
        let out = self.command(dir).arg("list").output().context("failed to run cargo fuzz list")?;
        anyhow::ensure!(out.status.success(), "cargo fuzz list failed in {}", dir.display());
        Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect())
    }

    /// `cargo fuzz SUBCOMMAND` with the flags every run shares.
    fn cargo_fuzz(&self, dir: &Path, work: &Path, args: &[&str]) -> anyhow::Result<()> {
        let (subcommand, rest) = args.split_first().context("no cargo fuzz subcommand")?;
        let status = self
            .command(dir)
            .arg(subcommand)
            .args(["--sanitizer", "none", "--debug-assertions", "--target-dir"])
            .arg(work.join("build"))
            .args(rest)
            .status()
            .context("failed to run cargo fuzz")?;
        anyhow::ensure!(status.success(), "cargo fuzz {subcommand} failed ({status})");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Command, tests::parse};

    use super::*;

    #[test]
    fn every_target_for_fuzz_seconds_or_10_by_default() {
        let Command::Fuzz(o) = parse(&["fuzz"]) else { panic!("not fuzz") };
        assert_eq!((o.target, o.seconds), (None, None));
        assert_eq!(DEFAULT_SECONDS, 10);
    }

    #[test]
    fn one_target_and_its_seconds_in_either_order() {
        for args in [["fuzz", "socket_records", "--seconds", "0"], ["fuzz", "--seconds", "0", "socket_records"]] {
            let Command::Fuzz(o) = parse(&args) else { panic!("not fuzz") };
            assert_eq!((o.target.as_deref(), o.seconds), (Some("socket_records"), Some(0)));
        }
        let Command::Fuzz(o) = parse(&["fuzz", "--seconds", "300"]) else { panic!("not fuzz") };
        assert_eq!((o.target, o.seconds), (None, Some(300)));
    }
}
