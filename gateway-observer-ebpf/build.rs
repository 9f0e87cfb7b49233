use which::which;

/// Rebuild the kernel programs when bpf-linker changes (a new LLVM changes the output).
fn main() {
    let bpf_linker = which("bpf-linker")
        .expect("bpf-linker not found on PATH: run `cargo xtask setup`, which builds it against nightly's LLVM");
    println!("cargo:rerun-if-changed={}", bpf_linker.to_str().expect("bpf-linker path is UTF-8"));
}
