//! `cargo xtask setup`: installs what is missing, and only that, so a second run takes well under
//! 5 s. Pieces: nightly's rust-src (to build core for bpfel-unknown-none), bpf-linker 0.13 built
//! against nightly's own libLLVM (no system LLVM needed), cargo-fuzz (the HTTP parser's fuzz
//! target), and the Debian packages the tests use.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::util::{self, output};

const BPF_LINKER_VERSION: &str = "0.13.0";
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// bpf-linker's rpath points here, so it must outlive the build: not a temp dir.
const LLVM_PREFIX: &str = "/opt/gateway-observer/llvm";
/// Debian packages the build needs: libssl-dev and pkg-config (the reference gateway links the
/// system's OpenSSL through the `openssl` crate). Those the tests and benchmarks run: real Redis, nginx, wrk load, h2load (HTTP/2
/// load, in nghttp2-client), runqlat
/// (libbpf-tools: `bench overhead` compares our scheduler hooks with it), bpftool (`bench churn`
/// counts the daemon's map entries with it), nftables and
/// iproute2 for network faults in namespaces, openssl (certificates), curl, and gcc, binutils and
/// android-libboringssl-dev (a C HTTPS server built on BoringSSL and on a static libssl.a) for the
/// TLS tests,
/// tmux for the terminal view, Alertmanager for the alert push, Prometheus for promtool (checks
/// and unit tests of deploy/'s alert rules), and the runtimes of gateways this project did not write (Netty and
/// netty-tcnative's OpenSSL engine, Guava, embedded Tomcat for the JDK 17
/// that is already there; Go, with golang.org/x/net for its h2c server and grpc-go for its gRPC
/// server; Python's grpcio, gRPC's C core; Node.js), for `test-kernels` QEMU, a static busybox and cpio
/// (the guest's initramfs), and for `package` dpkg-dev (dpkg-shlibdeps computes the libc6
/// dependency) and man-db (its check asks `man -w` for the installed page), and apparmor
/// (`apparmor_parser` compiles deploy/'s profile in the deploy tests; nothing is loaded).
const DEBIAN_PACKAGES: &[&str] = &[
    "libssl-dev",
    "pkg-config",
    "redis-server",
    "nginx",
    "wrk",
    "nghttp2-client",
    "openssl",
    "curl",
    "gcc",
    "binutils",
    "android-libboringssl-dev",
    "libbpf-tools",
    "bpftool",
    "nftables",
    "iproute2",
    "tmux",
    "prometheus-alertmanager",
    "prometheus",
    "libnetty-java",
    "libnetty-tcnative-java",
    "libnetty-tcnative-jni",
    "libguava-java",
    "libtomcat10-embed-java",
    "libjakarta-annotation-api-java",
    "golang-go",
    "golang-golang-x-net-dev",
    "golang-google-grpc-dev",
    "python3-grpcio",
    "nodejs",
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "xz-utils",
    "dpkg-dev",
    "man-db",
    "apparmor",
];

pub fn run() -> anyhow::Result<()> {
    nightly()?;
    rust_src()?;
    lint_components()?;
    bpf_linker()?;
    cargo_fuzz()?;
    debian_packages()
}

fn nightly() -> anyhow::Result<()> {
    if output("rustc", &["+nightly", "--version"]).is_some() {
        return Ok(());
    }
    eprintln!("setup: installing the nightly toolchain (kernel programs need -Z build-std)");
    util::run_retried("rustup", &["toolchain", "install", "nightly", "--profile", "minimal"])
        .context("the nightly toolchain is missing; install it by hand: rustup toolchain install nightly")
}

/// `cargo xtask lint` runs rustfmt and clippy on stable, and clippy on nightly for the kernel crate.
fn lint_components() -> anyhow::Result<()> {
    for (toolchain, component, check) in [
        ("stable", "rustfmt", ["+stable", "fmt", "--version"]),
        ("stable", "clippy", ["+stable", "clippy", "--version"]),
        ("nightly", "clippy", ["+nightly", "clippy", "--version"]),
    ] {
        if output("cargo", &check).is_some() {
            continue;
        }
        eprintln!("setup: adding {component} to {toolchain}");
        util::run_retried("rustup", &["component", "add", component, "--toolchain", toolchain]).with_context(|| {
            format!(
                "{component} is missing; install it by hand: rustup component add {component} --toolchain {toolchain}"
            )
        })?;
    }
    Ok(())
}

fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    let sysroot = output("rustc", &["+nightly", "--print", "sysroot"]).context("rustc +nightly failed")?;
    Ok(PathBuf::from(sysroot.trim()))
}

fn rust_src() -> anyhow::Result<()> {
    if nightly_sysroot()?.join("lib/rustlib/src/rust/library/core").exists() {
        return Ok(());
    }
    eprintln!("setup: adding rust-src to nightly");
    util::run_retried("rustup", &["component", "add", "rust-src", "--toolchain", "nightly"])
        .context("rust-src is missing; install it by hand: rustup component add rust-src --toolchain nightly")
}

fn bpf_linker() -> anyhow::Result<()> {
    let llvm_lib = link_nightly_llvm()?;
    let installed = output("bpf-linker", &["--version"]).is_some_and(|v| v.contains(BPF_LINKER_VERSION));
    if installed {
        return Ok(());
    }
    eprintln!("setup: building bpf-linker {BPF_LINKER_VERSION} against {} (about a minute)", llvm_lib.display());
    let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        // --force: a bpf-linker that exists but cannot run (its libLLVM moved) must be replaced.
        .args(["install", "--force", "bpf-linker", "--version", BPF_LINKER_VERSION])
        .args(["--no-default-features", "--features", "llvm-22"])
        .env("LLVM_PREFIX", LLVM_PREFIX)
        .status()
        .context("failed to run cargo install bpf-linker")?;
    if !status.success() {
        bail!(
            "building bpf-linker failed ({status}); by hand: LLVM_PREFIX={LLVM_PREFIX} cargo install bpf-linker \
             --version {BPF_LINKER_VERSION} --no-default-features --features llvm-22"
        );
    }
    Ok(())
}

/// Any installed cargo-fuzz will do; a missing one is built (it runs under nightly, present by now).
fn cargo_fuzz() -> anyhow::Result<()> {
    if output("cargo", &["fuzz", "--version"]).is_some() {
        return Ok(());
    }
    eprintln!("setup: building cargo-fuzz {CARGO_FUZZ_VERSION} (about a minute)");
    let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["install", "--locked", "cargo-fuzz", "--version", CARGO_FUZZ_VERSION])
        .status()
        .context("failed to run cargo install cargo-fuzz")?;
    if !status.success() {
        bail!(
            "building cargo-fuzz failed ({status}); by hand: cargo install --locked cargo-fuzz --version {CARGO_FUZZ_VERSION}"
        );
    }
    Ok(())
}

/// `LLVM_PREFIX/lib/libLLVM.so` and `LLVM_PREFIX/lib/<soname>` → nightly's own libLLVM,
/// re-pointed when nightly changes. The first is what the build links against; the second is the
/// name the linked binary asks the loader for (its NEEDED soname), found through its RUNPATH.
fn link_nightly_llvm() -> anyhow::Result<PathBuf> {
    let lib_dir = nightly_sysroot()?.join("lib");
    let llvm = std::fs::read_dir(&lib_dir)
        .with_context(|| format!("cannot list {}", lib_dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libLLVM.so.")))
        .with_context(|| format!("no libLLVM.so.* in {}: is nightly complete?", lib_dir.display()))?;
    let prefix_lib = Path::new(LLVM_PREFIX).join("lib");
    std::fs::create_dir_all(&prefix_lib)
        .with_context(|| format!("cannot create {} (run setup as root)", prefix_lib.display()))?;
    let soname = llvm.file_name().map(PathBuf::from).unwrap_or_default();
    for name in [PathBuf::from("libLLVM.so"), soname] {
        let link = prefix_lib.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(llvm.as_path()) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&llvm, &link)
            .with_context(|| format!("cannot link {} to {}", link.display(), llvm.display()))?;
    }
    Ok(llvm)
}

fn debian_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .copied()
        .filter(|pkg| {
            !output("dpkg-query", &["-W", "-f=${Status}", pkg]).is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing Debian packages: {}", missing.join(" "));
    let hint = format!("install them by hand: apt-get update && apt-get install -y {}", missing.join(" "));
    util::run_retried("apt-get", &["update", "-q"]).with_context(|| format!("apt-get update failed; {hint}"))?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&missing);
    util::run_retried("apt-get", &args).with_context(|| format!("apt-get install failed; {hint}"))
}
