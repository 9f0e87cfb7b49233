//! The observer daemon for one phase: started on a target with its default settings (what a user
//! runs), stopped when dropped, and measured from outside: its CPU time from /proc and its
//! programs' kernel time from bpf_stats, at instants the phase chooses.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::bench_gateway::{Procs, free_port};
use crate::bpf_progs::{self, ProgStats};
use crate::demo::net::wait_http_200;
use crate::procstat;

const READY_WITHIN: Duration = Duration::from_secs(30);
/// After /ready: one collection (the default interval), so the target's threads are followed and
/// start-up work is over before anything is measured.
const SETTLE: Duration = Duration::from_millis(1100);

pub(super) struct Daemon {
    procs: Procs, // dropped with the daemon: SIGTERM, then wait
    pub(super) pid: u32,
}

/// The daemon's CPU time and its programs' counters at one instant.
pub(super) struct Snapshot {
    at: Instant,
    cpu_s: f64,
    progs: Vec<ProgStats>,
}

/// What the daemon cost between two snapshots.
pub(super) struct Cost {
    pub(super) wall_s: f64,
    pub(super) daemon_cpu_s: f64,
    pub(super) kernel_cpu_s: f64,
    /// (program, ns, runs), costliest first.
    pub(super) programs: Vec<(String, u64, u64)>,
}

impl Daemon {
    /// Starts `gateway-observer run --target pid=<target>` and waits until it is ready and settled.
    /// `label` names its log file in `dir`; the log's tail goes into any error.
    pub(super) fn start(observer: &Path, target: u32, dir: &Path, label: &str) -> Result<Daemon> {
        Self::start_with(observer, target, dir, label, &[])
    }

    /// [`Daemon::start`] with more options of `run` (`--tls-plaintext`).
    pub(super) fn start_with(observer: &Path, target: u32, dir: &Path, label: &str, args: &[&str]) -> Result<Daemon> {
        let port = free_port()?;
        let log_path = dir.join(format!("observer-{label}.log"));
        let log =
            std::fs::File::create(&log_path).with_context(|| format!("failed to create {}", log_path.display()))?;
        let mut procs = Procs::default();
        let pid = procs.spawn(
            "gateway-observer",
            Command::new(observer)
                .args(["run", "--target", &format!("pid={target}"), "--listen", &format!("127.0.0.1:{port}")])
                .args(args)
                .stdout(Stdio::null()) // alert lines
                .stderr(log),
        )?;
        wait_http_200("gateway-observer", port, "/ready", READY_WITHIN, || procs.check_alive()).with_context(|| {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            format!(
                "gateway-observer on pid {target} never got ready; log:\n{}",
                lines[lines.len().saturating_sub(20)..].join("\n")
            )
        })?;
        std::thread::sleep(SETTLE);
        Ok(Daemon { procs, pid })
    }

    pub(super) fn snapshot(&mut self) -> Result<Snapshot> {
        self.procs.check_alive()?;
        Ok(Snapshot {
            at: Instant::now(),
            cpu_s: procstat::cpu_seconds(self.pid)?,
            progs: bpf_progs::held_by(self.pid)?,
        })
    }

    pub(super) fn peak_rss_mib(&self) -> Result<f64> {
        procstat::peak_rss_mib(self.pid)
    }
}

impl Cost {
    pub(super) fn between(before: &Snapshot, after: &Snapshot) -> Cost {
        let (kernel_ns, _) = bpf_progs::total_delta(&before.progs, &after.progs);
        Cost {
            wall_s: (after.at - before.at).as_secs_f64(),
            daemon_cpu_s: after.cpu_s - before.cpu_s,
            kernel_cpu_s: kernel_ns as f64 / 1e9,
            programs: bpf_progs::per_program_delta(&before.progs, &after.progs),
        }
    }

    /// The daemon's share of one core.
    pub(super) fn daemon_share(&self) -> f64 {
        self.daemon_cpu_s / self.wall_s
    }
}

impl Snapshot {
    pub(super) fn progs(&self) -> &[ProgStats] {
        &self.progs
    }
}
