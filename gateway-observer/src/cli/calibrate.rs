//! `gateway-observer calibrate`: the cost of an empty program on sched_switch and sys_enter,
//! measured with the kernel's BPF stats while whatever load is running runs. It gives
//! `cargo xtask bench probes` the floor to read our programs' cost against.

use std::time::Duration;

use anyhow::Context as _;

use crate::probes::{BASELINE_PROGRAMS, ProbeSettings, Probes};

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Prints one line per program: `name runs run_ns`.
pub fn calibrate(duration: Duration) -> anyhow::Result<()> {
    let mut probes = Probes::load(ProbeSettings::default()).context("failed to load the eBPF object")?;
    for (program, tracepoint) in BASELINE_PROGRAMS {
        probes.attach(program, tracepoint).with_context(|| format!("failed to attach {program}"))?;
    }
    let stats_were = std::fs::read_to_string(STATS_SYSCTL).context("cannot read bpf_stats_enabled")?;
    std::fs::write(STATS_SYSCTL, "1").context("cannot enable kernel.bpf_stats_enabled")?;
    let before = probes.stats_of(BASELINE_PROGRAMS);
    std::thread::sleep(duration);
    let after = probes.stats_of(BASELINE_PROGRAMS);
    let _ = std::fs::write(STATS_SYSCTL, stats_were.trim());
    for ((name, t0, r0), (_, t1, r1)) in before.iter().zip(&after) {
        let line = format!("{name} {} {}", r1 - r0, (*t1 - *t0).as_nanos());
        if !super::output::line(&line).context("cannot write to stdout")? {
            break; // the reader went away
        }
    }
    Ok(())
}
