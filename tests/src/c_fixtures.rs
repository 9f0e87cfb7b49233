//! The C fixtures of `tests/fixtures/c/`, built with the system's C compiler against a TLS library
//! the test names, into `target/c-fixtures/`, once per test binary run.

use std::{
    path::PathBuf,
    process::Command,
    sync::{Mutex, OnceLock, PoisonError},
};

use crate::runtimes::{fixture_dir, target_dir};

/// BoringSSL from Debian's `android-libboringssl-dev`: its headers and its `libssl.so.0`, loaded
/// from its own directory.
pub const BORINGSSL: &[&str] = &[
    "-I/usr/include/android",
    "-L/usr/lib/x86_64-linux-gnu/android",
    "-Wl,-rpath,/usr/lib/x86_64-linux-gnu/android",
    "-lssl",
    "-lcrypto",
];

/// OpenSSL's `libssl.a` and `libcrypto.a` (Debian's `libssl-dev`) linked into the executable,
/// which exports none of their calls: they are named in its `.symtab` only.
pub const STATIC_OPENSSL: &[&str] = &["-Wl,-Bstatic", "-lssl", "-lcrypto", "-Wl,-Bdynamic"];

/// `tests/fixtures/c/SOURCE` built into `target/c-fixtures/NAME` with `libraries` (linker and
/// include flags); NAME is also the process's name, so at most 15 characters.
pub fn c_binary(source: &str, name: &str, libraries: &[&str]) -> PathBuf {
    assert!(name.len() <= 15, "{name}: a process name is cut at 15 characters");
    static BUILT: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    let dir = target_dir().join("c-fixtures");
    let out = dir.join(name);
    if built.contains(&out) {
        return out;
    }
    std::fs::create_dir_all(&dir).expect("create target/c-fixtures");
    let result = Command::new("cc")
        .args(["-O2", "-D_GNU_SOURCE", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(fixture_dir().join("c").join(source))
        .args(libraries)
        .arg("-lpthread")
        .output()
        .unwrap_or_else(|e| panic!("run cc (apt-get install gcc): {e}"));
    assert!(result.status.success(), "cc {source} into {name}: {}", String::from_utf8_lossy(&result.stderr));
    built.push(out.clone());
    out
}
