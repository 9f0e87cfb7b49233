use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

/// Builds the kernel programs (gateway-observer-ebpf) for bpfel-unknown-none with the nightly
/// toolchain and bpf-linker; the object lands in OUT_DIR and is embedded by `include_bytes_aligned!`.
///
/// Without bpf-linker on PATH it writes an empty stand-in object instead, as aya's own
/// integration tests do, so the pure parts of the crate (decoding, state, detectors, the terminal
/// view) build and test on a machine without the kernel toolchain. The daemon refuses to start on
/// such a build with an error that says so (`probes::loader`).
fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").context("OUT_DIR not set")?);
    println!("cargo:rerun-if-env-changed=PATH");
    let Some(linker_dirs) = bpf_linker_absent() else {
        return build_kernel_programs();
    };
    println!(
        "cargo:warning=bpf-linker not found on PATH: the kernel programs are an empty stand-in; \
         `cargo xtask setup` installs bpf-linker"
    );
    // Rebuild when bpf-linker appears in one of the PATH directories.
    for dir in linker_dirs {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    std::fs::write(out_dir.join("gateway-observer"), b"").context("cannot write the stand-in eBPF object")
}

/// None when bpf-linker is on PATH; otherwise the PATH directories that were searched.
fn bpf_linker_absent() -> Option<Vec<PathBuf>> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).filter(|d| d.is_dir()).collect();
    if dirs.iter().any(|d| d.join("bpf-linker").is_file()) { None } else { Some(dirs) }
}

fn build_kernel_programs() -> anyhow::Result<()> {
    let root = workspace_root()?;
    let ebpf_dir = root.join("gateway-observer-ebpf");
    let ebpf_dir = ebpf_dir.to_str().ok_or_else(|| anyhow!("workspace path is not UTF-8"))?;
    aya_build::build_ebpf(
        [Package { name: "gateway-observer-ebpf", root_dir: ebpf_dir, ..Default::default() }],
        Toolchain::default(),
    )
    .context("building the eBPF programs failed; `cargo xtask setup` installs nightly rust-src and bpf-linker")
}

/// The workspace root: this crate's parent directory.
fn workspace_root() -> anyhow::Result<PathBuf> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?;
    Path::new(&manifest_dir).parent().map(Path::to_path_buf).ok_or_else(|| anyhow!("{manifest_dir} has no parent"))
}
