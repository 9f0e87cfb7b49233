//! `cargo xtask test-kernels [--kernel 6.1|6.12]`: the daemon on the kernels production gateway
//! hosts run (issue 15), each booted in QEMU from Debian's own package with a busybox initramfs.
//! In each guest: `gateway-observer check`; then `run` against static fixtures that measure their
//! own ground truth (nanosleep, timed futex waits that time out and ones that are woken, ±10 %;
//! keep-alive HTTP requests, exact) and one incident (an event loop that blocks: EventLoopBlocked
//! within 5 s, nothing while it is healthy). Beside them, the host's own kernel runs check only.
//! Prints check's output per kernel and a matrix kernel × capability → ok / degraded / failed, and
//! fails on anything but what the kernel is expected to lack (`expect.rs`: before 6.5, the socket
//! queue wait).
//!
//! Everything lives in `target/kernels/`: the .deb and vmlinuz per kernel (downloaded once), the
//! fixtures, the initramfs, and each guest's console log.

mod alert_log;
mod check_cells;
mod check_output;
mod expect;
mod fixtures;
mod host;
mod incident_cell;
mod initramfs;
mod kernels;
mod ktls_cell;
mod matrix;
mod results;
mod run_cells;
mod table;
mod vm;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::builder::PossibleValuesParser;

use crate::util::target_dir;

/// Every VM together must stay within 5 minutes; each gets half, which a healthy guest (about
/// 35 s under TCG, 13 of them the blocked loop's incident) is far from needing.
const VM_DEADLINE: Duration = Duration::from_secs(150);
const BUDGET: Duration = Duration::from_secs(300);

/// The daemon on Debian's 6.1 and 6.12 kernels, each booted in QEMU
///
/// In each guest: `check`, off-CPU time and requests against fixtures that measure themselves, and
/// one blocked event loop; the host's own kernel runs `check` only. Prints a matrix kernel ×
/// capability, and fails on anything but what a kernel is expected to lack.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Only this kernel series.
    #[arg(long, value_parser = PossibleValuesParser::new(kernels::SERIES.iter().copied()))]
    kernel: Option<String>,
}

impl Options {
    /// The series to boot, in `kernels::SERIES`' order.
    fn series(&self) -> Vec<&'static str> {
        kernels::SERIES
            .iter()
            .copied()
            .filter(|series| self.kernel.as_deref().is_none_or(|only| only == *series))
            .collect()
    }
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let series = options.series();
    let dir = target_dir().join("kernels");
    // The build `cargo xtask test` made, so CI does not build the daemon again with other features.
    crate::build().context("building the daemon failed")?;
    let daemon = target_dir().join("debug/gateway-observer");
    let fixtures = fixtures::build(&dir.join("fixtures"))?;
    let kernels = series.iter().map(|series| kernels::fetch(series, &dir)).collect::<anyhow::Result<Vec<_>>>()?;
    let initrd = initramfs::build(&daemon, &fixtures, &kernels, &dir)?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;

    let started = Instant::now();
    let mut columns = Vec::new();
    for kernel in &kernels {
        let log = logs.join(format!("{}.console.log", kernel.release()));
        let (boot, guest) = boot_guest(kernel, &initrd, &log)?;
        println!("\n== gateway-observer check on {} ==", kernel.release());
        check_output::print_folded(&guest.check, &log.display().to_string());
        println!("-- gateway-observer run: its startup lines --");
        for line in guest.run.stderr.iter().filter(|l| startup_line(l)) {
            println!("{line}");
        }
        columns.push(matrix::judge(kernel.release(), &boot, &guest));
    }
    let elapsed = started.elapsed();
    if let Some(host) = host::check(&daemon)? {
        let log = logs.join("host.check.log");
        std::fs::write(&log, host.lines.join("\n")).with_context(|| format!("cannot write {}", log.display()))?;
        println!("\n== gateway-observer check on {} (host) ==", host.kernel);
        check_output::print_folded(&host.lines, &log.display().to_string());
        columns.push(matrix::judge_host(&host.kernel, &host.lines));
    }

    println!("\n== kernels × capabilities ==");
    table::print(&columns);
    println!(
        "\nVMs: {:.0} s in all (budget {} s); console logs in {}",
        elapsed.as_secs_f64(),
        BUDGET.as_secs(),
        logs.display()
    );
    let failed: Vec<String> = columns
        .iter()
        .flat_map(|c| {
            c.cells.iter().filter(|(_, cell)| cell.unexpected_failure()).map(|(name, _)| format!("{} {name}", c.kernel))
        })
        .collect();
    if !failed.is_empty() {
        bail!("test-kernels: failed: {}", failed.join("; "));
    }
    if elapsed > BUDGET {
        bail!("test-kernels: the VMs took {:.0} s, over the {} s budget", elapsed.as_secs_f64(), BUDGET.as_secs());
    }
    Ok(())
}

/// What the daemon says of its hooks as it starts: the source of socket bytes, what it runs
/// without.
fn startup_line(line: &str) -> bool {
    line.starts_with("gateway-observer: socket bytes from") || line.starts_with("gateway-observer: degraded:")
}

/// Boots the kernel once, and once more if it died before `/init` ran: TCG boots sometimes do,
/// and that says nothing about the daemon. The failed boot's console is kept beside the log.
fn boot_guest(kernel: &kernels::Kernel, initrd: &Path, log: &Path) -> anyhow::Result<(vm::Boot, results::Guest)> {
    let first = boot_once(kernel, initrd, log)?;
    if first.1.kernel.is_some() || first.0.timed_out {
        return Ok(first);
    }
    let kept = log.with_extension("failed-boot.log");
    eprintln!("test-kernels: the guest died before /init ran ({}); booting it again", kept.display());
    std::fs::rename(log, &kept).with_context(|| format!("cannot keep {}", log.display()))?;
    boot_once(kernel, initrd, log)
}

fn boot_once(kernel: &kernels::Kernel, initrd: &Path, log: &Path) -> anyhow::Result<(vm::Boot, results::Guest)> {
    eprintln!("test-kernels: booting {} (deadline {} s)", kernel.release(), VM_DEADLINE.as_secs());
    let boot = vm::boot(&kernel.vmlinuz, initrd, log, VM_DEADLINE)?;
    eprintln!("test-kernels: {} ended after {:.0} s", kernel.release(), boot.elapsed.as_secs_f64());
    let guest = results::parse(&boot.console);
    Ok((boot, guest))
}

#[cfg(test)]
mod tests {
    use crate::{Command, tests::parse};

    #[test]
    fn every_series_unless_one_is_named() {
        for (args, series) in
            [(&[][..], &["6.1", "6.12"][..]), (&["--kernel", "6.1"], &["6.1"]), (&["--kernel", "6.12"], &["6.12"])]
        {
            let Command::TestKernels(options) = parse(&[&["test-kernels"], args].concat()) else {
                panic!("not test-kernels")
            };
            assert_eq!(options.series(), series, "{args:?}");
        }
    }
}
