//! `cargo xtask lint`: what CI holds every change to. rustfmt's check on the workspace and on the
//! fuzz crates (each its own workspace), clippy with warnings denied on the host crates and, with
//! nightly for bpfel-unknown-none, on the kernel crate (which never builds for the host), and the
//! daemon crate's layer check ([`crate::layers`]).

use anyhow::Context as _;

use crate::util::{self, cargo};

pub fn run() -> anyhow::Result<()> {
    crate::layers::check(&util::workspace_root().join("gateway-observer/src"))?;
    cargo(&["fmt", "--all", "--check"]).context("formatting differs: run `cargo fmt --all`")?;
    for project in ["gateway-observer-http/fuzz", "gateway-observer/fuzz"] {
        let fuzz_manifest = util::workspace_root().join(project).join("Cargo.toml");
        let fuzz_manifest = fuzz_manifest.to_str().context("workspace path is not UTF-8")?;
        cargo(&["fmt", "--manifest-path", fuzz_manifest, "--check"])
            .with_context(|| format!("the fuzz targets' formatting differs: run `cargo fmt` in {project}"))?;
    }
    cargo(&["clippy", "--workspace", "--exclude", "gateway-observer-ebpf", "--all-targets", "--", "-D", "warnings"])
        .context("clippy found warnings in the host crates")?;
    clippy_kernel_crate()
}

/// The kernel crate is checked as it is built: nightly, bpfel-unknown-none, core from source.
fn clippy_kernel_crate() -> anyhow::Result<()> {
    let target_dir = util::target_dir().join("ebpf-clippy");
    let status = std::process::Command::new("cargo") // the rustup proxy: `+nightly` picks the toolchain
        .args(["+nightly", "clippy", "--target", "bpfel-unknown-none", "-Z", "build-std=core", "--target-dir"])
        .arg(&target_dir)
        .args(["--", "-D", "warnings"])
        .current_dir(util::workspace_root().join("gateway-observer-ebpf"))
        // Set by the stable `cargo xtask` run; they would override +nightly or point at stable.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .status()
        .context("failed to run cargo +nightly clippy")?;
    anyhow::ensure!(status.success(), "clippy found warnings in the kernel crate ({status})");
    Ok(())
}
