//! The guest's fixtures, small C programs in `guest/` built with `gcc -static`: a bare initramfs
//! has no libc for them, and each measures its own ground truth.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::util::{self, workspace_root};

/// Source name in `guest/` → binary name in the guest (its comm: the daemon's target).
const FIXTURES: &[(&str, &str)] = &[
    ("nap.c", "kt-nap"),
    ("futex.c", "kt-futex"),
    ("wake.c", "kt-wake"),
    ("loop.c", "kt-loop"),
    ("httpd.c", "kt-httpd"),
    ("httpc.c", "kt-httpc"),
    ("get.c", "kt-get"),
];

/// Where the guest's sources are: the fixtures, their header and the `/init` script.
pub fn guest_dir() -> PathBuf {
    workspace_root().join("xtask/src/test_kernels/guest")
}

/// Builds every fixture into `out`; returns the binaries.
pub fn build(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut binaries = Vec::new();
    for (source, name) in FIXTURES {
        let source = guest_dir().join(source);
        let binary = out.join(name);
        let (source_arg, binary_arg) = (path_str(&source)?, path_str(&binary)?);
        util::run("gcc", &["-static", "-pthread", "-O2", "-Wall", "-Wextra", "-Werror", "-o", binary_arg, source_arg])
            .with_context(|| format!("building the fixture {name} failed (gcc and libc6-dev are needed)"))?;
        binaries.push(binary);
    }
    Ok(binaries)
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str().with_context(|| format!("{} is not UTF-8", path.display()))
}
