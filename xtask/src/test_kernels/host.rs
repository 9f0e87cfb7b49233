//! This machine's own kernel, as a column beside the guests': `gateway-observer check` only. No
//! daemon run: the host is shared with other tests, which the daemon attaching to its scheduler
//! for a minute would disturb, and `cargo xtask test` runs the daemon here anyway.

use std::{path::Path, process::Command};

use anyhow::Context as _;

use crate::util::output;

pub struct HostCheck {
    /// `uname -r`.
    pub kernel: String,
    /// check's stdout and stderr, line by line.
    pub lines: Vec<String>,
}

/// Runs check on the host; None when not root (check would only say so), which CI (`CI=true`)
/// does not accept, as it accepts no skipped privileged test.
pub fn check(daemon: &Path) -> anyhow::Result<Option<HostCheck>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::ensure!(std::env::var("CI").as_deref() != Ok("true"), "test-kernels: CI runs it as root");
        eprintln!("test-kernels: not root, so no check on the host's own kernel");
        return Ok(None);
    }
    let kernel = output("uname", &["-r"]).context("uname -r failed")?.trim().to_owned();
    let out = Command::new(daemon).arg("check").output().context("failed to run gateway-observer check")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok(Some(HostCheck { kernel, lines: text.lines().map(str::to_owned).collect() }))
}
