//! `cargo xtask fuzz [--seconds N]`: runs the `http_connection` fuzz target (cargo-fuzz, nightly
//! toolchain) for a bounded time, starting from the committed seed corpus
//! (`gateway-observer-http/fuzz/corpus/http_connection/`, written by the http::replay tests). What the
//! fuzzer finds — new corpus entries, crash artifacts, the build — goes under `target/fuzz/`, so
//! the committed corpus changes only on purpose.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::util;

const TARGET: &str = "http_connection";
/// `cargo xtask test` fuzzes this long unless `FUZZ_SECONDS` says otherwise.
const DEFAULT_SECONDS: u64 = 30;

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let seconds = match args {
        [] => seconds_from_env()?,
        [flag, n] if flag == "--seconds" => {
            n.parse().with_context(|| format!("--seconds {n}: not a number of seconds"))?
        }
        _ => bail!("usage: cargo xtask fuzz [--seconds N]"),
    };
    fuzz(seconds)
}

/// `FUZZ_SECONDS`, or 30.
pub fn seconds_from_env() -> anyhow::Result<u64> {
    match std::env::var("FUZZ_SECONDS") {
        Ok(s) => s.parse().with_context(|| format!("FUZZ_SECONDS={s}: not a number of seconds")),
        Err(_) => Ok(DEFAULT_SECONDS),
    }
}

pub fn fuzz(seconds: u64) -> anyhow::Result<()> {
    let fuzz_dir = util::workspace_root().join("gateway-observer-http/fuzz");
    let seeds = fuzz_dir.join("corpus").join(TARGET);
    let work = util::target_dir().join("fuzz");
    let corpus = work.join("corpus").join(TARGET);
    let artifacts = work.join("artifacts").join(TARGET);
    for dir in [&corpus, &artifacts] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    eprintln!("fuzz: {TARGET} for {seconds} s (corpus {}, crashes in {})", corpus.display(), artifacts.display());
    // The first corpus directory receives new inputs; the committed seeds are only read.
    let status = Command::new("cargo") // the rustup proxy: `+nightly` picks the toolchain
        .arg("+nightly")
        .args(["fuzz", "run", "--sanitizer", "none", "--debug-assertions", "--target-dir"])
        .arg(work.join("build"))
        .arg(TARGET)
        .args([&corpus, &seeds])
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .current_dir(&fuzz_dir)
        // Set by the stable `cargo xtask` run; they would override +nightly or point at stable.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .status()
        .context("failed to run cargo +nightly fuzz (cargo xtask setup installs cargo-fuzz)")?;
    if !status.success() {
        bail!("fuzzing {TARGET} failed ({status}); the crashing input is in {}", artifacts.display());
    }
    Ok(())
}
