//! Small process helpers shared by the xtask commands.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// Runs cargo (the one running xtask) in the workspace root, inheriting stdio.
pub fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(args)
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("failed to run {cargo} {}", args.join(" ")))?;
    if !status.success() {
        bail!("`cargo {}` failed: {status}", args.join(" "));
    }
    Ok(())
}

/// Runs a command, inheriting stdio; an error names the command.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("failed to run {program} {}", args.join(" ")))?;
    if !status.success() {
        bail!("`{program} {}` failed: {status}", args.join(" "));
    }
    Ok(())
}

/// Runs a download-and-install command up to three times, 10 s apart: a fresh CI machine's first
/// rustup download sometimes fails ("component download failed") and succeeds when asked again.
pub fn run_retried(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut attempt = 1;
    loop {
        match run(program, args) {
            Ok(()) => return Ok(()),
            Err(error) if attempt < 3 => {
                eprintln!("{error:#}; trying again in 10 s (attempt {} of 3)", attempt + 1);
                std::thread::sleep(std::time::Duration::from_secs(10));
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// A command's stdout, or None when it cannot run or fails.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Has the kernel send `signal` to the child `cmd` starts when the thread starting it exits:
/// a bench or VM run that is killed (not interrupted) then leaves no child behind, holding
/// ports or the flock fd it inherited.
pub fn end_with_parent(cmd: &mut std::process::Command, signal: libc::c_int) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
