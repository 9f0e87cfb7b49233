//! One QEMU boot with a hard deadline: the serial console goes to a log file, and QEMU is killed
//! when the deadline passes, on an error, when this process unwinds, and by the kernel when this
//! process dies (a CI timeout's SIGKILL), so no VM outlives a run.
//!
//! TCG, not KVM: a nested KVM guest hangs early in boot on this machine family. Single-threaded
//! TCG: it uses one host core for both vCPUs (the machine is shared), and with a thread per vCPU
//! an early boot sometimes died of an int3 oops while the kernel patched its own text.

use std::{
    fs::File,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

pub struct Boot {
    /// Everything the serial console printed.
    pub console: String,
    pub elapsed: Duration,
    /// The deadline passed and QEMU was killed.
    pub timed_out: bool,
}

/// Kills QEMU when dropped, whatever path leaves `boot`.
struct Vm(Child);

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Boots `vmlinuz` with `initrd` and waits for the guest to power off, at most `deadline`.
pub fn boot(vmlinuz: &Path, initrd: &Path, log: &Path, deadline: Duration) -> anyhow::Result<Boot> {
    let console = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let errors = console.try_clone().context("cannot share the console log")?;
    let started = Instant::now();
    let mut qemu = Command::new("qemu-system-x86_64");
    crate::util::end_with_parent(&mut qemu, libc::SIGKILL);
    let child = qemu
        .args(["-accel", "tcg,thread=single", "-m", "2048", "-smp", "2", "-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        // quiet: kernel messages would interleave with the result lines (the guest also lowers
        // the console level); panic=-1 with -no-reboot: a panic ends QEMU at once.
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .stdin(Stdio::null())
        .stdout(console)
        .stderr(errors)
        .spawn()
        .context("failed to start qemu-system-x86_64 (cargo xtask setup installs qemu-system-x86)")?;
    let mut vm = Vm(child);
    let timed_out = loop {
        if vm.0.try_wait().context("cannot wait for QEMU")?.is_some() {
            break false;
        }
        if started.elapsed() >= deadline {
            break true;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(vm);
    let elapsed = started.elapsed();
    let bytes = std::fs::read(log).with_context(|| format!("cannot read {}", log.display()))?;
    Ok(Boot { console: String::from_utf8_lossy(&bytes).into_owned(), elapsed, timed_out })
}
