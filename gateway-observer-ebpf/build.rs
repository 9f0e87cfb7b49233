use which::which;

/// Rebuild the kernel programs when bpf-linker changes (a new LLVM changes the output). Without
/// bpf-linker there is nothing to watch: gateway-observer's build script then embeds an empty
/// stand-in object, and this crate is only compiled as the host-side build dependency.
fn main() {
    if let Some(path) = which("bpf-linker").ok().and_then(|p| p.to_str().map(str::to_owned)) {
        println!("cargo:rerun-if-changed={path}");
    }
}
