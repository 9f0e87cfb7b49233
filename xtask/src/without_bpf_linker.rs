//! Proof that the pure crates need no kernel toolchain: their tests run with every PATH directory
//! that holds bpf-linker removed, in a target directory of their own (so the stand-in eBPF object
//! that gateway-observer's build.rs embeds there never reaches the real build).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::util::{self, output};

/// The crates that build and test without bpf-linker; gateway-observer's kernel programs are an
/// empty stand-in there, so only its unprivileged tests (the lib and `top_render`) run.
const PURE: &[&str] = &["-p", "gateway-observer-common", "-p", "gateway-observer-http", "-p", "gateway-observer"];

pub fn test_pure_crates() -> anyhow::Result<()> {
    // The toolchain's own directory replaces the rustup proxies (which live beside bpf-linker in
    // ~/.cargo/bin), so cargo and rustc still resolve.
    let sysroot = output("rustc", &["--print", "sysroot"]).context("rustc --print sysroot failed")?;
    let toolchain_bin = Path::new(sysroot.trim()).join("bin");
    let path = path_without_bpf_linker(&toolchain_bin)?;
    eprintln!("test: the pure crates without bpf-linker on PATH (target/without-bpf-linker)");
    let mut args = vec!["test"];
    args.extend(PURE);
    args.extend(["--lib", "--test", "top_render"]);
    let status = Command::new(toolchain_bin.join("cargo"))
        .args(&args)
        .current_dir(util::workspace_root())
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", util::target_dir().join("without-bpf-linker"))
        .env("RUSTC", toolchain_bin.join("rustc"))
        .env_remove("CARGO")
        .env_remove("RUSTUP_TOOLCHAIN")
        .status()
        .context("failed to run cargo test without bpf-linker")?;
    if !status.success() {
        bail!("the pure crates' tests failed without bpf-linker on PATH ({status})");
    }
    Ok(())
}

/// PATH with the toolchain's bin first and no directory that holds bpf-linker.
pub(crate) fn path_without_bpf_linker(toolchain_bin: &Path) -> anyhow::Result<OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(toolchain_bin.to_path_buf())
        .chain(std::env::split_paths(&path))
        .filter(|dir: &PathBuf| !dir.join("bpf-linker").exists());
    std::env::join_paths(dirs).context("PATH holds a directory that cannot be joined")
}
