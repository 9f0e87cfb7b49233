use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

/// Builds the kernel programs (gateway-observer-ebpf) for bpfel-unknown-none with the nightly
/// toolchain and bpf-linker; the object lands in OUT_DIR and is embedded by `include_bytes_aligned!`.
fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata_root()?;
    let ebpf_dir = format!("{metadata}/gateway-observer-ebpf");
    aya_build::build_ebpf(
        [Package { name: "gateway-observer-ebpf", root_dir: &ebpf_dir, ..Default::default() }],
        Toolchain::default(),
    )
    .context("building the eBPF programs failed; `cargo xtask setup` installs nightly rust-src and bpf-linker")
}

/// The workspace root: this crate's parent directory.
fn cargo_metadata_root() -> anyhow::Result<String> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?;
    let root = std::path::Path::new(&manifest_dir).parent().ok_or_else(|| anyhow!("{manifest_dir} has no parent"))?;
    root.to_str().map(str::to_owned).ok_or_else(|| anyhow!("workspace path is not UTF-8"))
}
