//! A process's CPU time and memory, from /proc.

use anyhow::{Context as _, Result};

/// utime + stime of a process (all its threads), in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let fields = stat_fields(pid)?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let field =
        |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).with_context(|| format!("bad /proc/{pid}/stat"));
    Ok((field(11)? + field(12)?) / ticks) // utime, stime: fields 14 and 15, counted from state (3)
}

/// utime + stime of a process and its children (nginx's master and workers), in seconds: the
/// processes found now, so a child that exited in between loses its time (bench gateways keep
/// their workers for the whole run).
pub(crate) fn family_cpu_seconds(pid: u32) -> Result<f64> {
    let mut total = cpu_seconds(pid)?;
    for entry in std::fs::read_dir("/proc").context("failed to list /proc")? {
        let Some(child) = entry.ok().and_then(|e| e.file_name().to_str()?.parse::<u32>().ok()) else { continue };
        // A process gone between the listing and the read is no child of ours to count.
        let Ok(fields) = stat_fields(child) else { continue };
        if fields.get(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(pid) {
            total += cpu_seconds(child).unwrap_or(0.0);
        }
    }
    Ok(total)
}

/// /proc/PID/stat after the command name (which may hold spaces): field 3 (state) first.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("failed to read /proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').with_context(|| format!("bad /proc/{pid}/stat"))?.1;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// The most resident memory the process has had (VmHWM), in MiB.
pub(crate) fn peak_rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("failed to read /proc/{pid}/status"))?;
    parse_kib(&status, "VmHWM:").map(|kib| kib / 1024.0).with_context(|| format!("no VmHWM in /proc/{pid}/status"))
}

fn parse_kib(status: &str, key: &str) -> Option<f64> {
    status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_a_command_with_spaces() {
        let fields = stat_fields(std::process::id()).unwrap();
        assert_eq!(fields[1].parse::<u32>().unwrap(), std::os::unix::process::parent_id());
        assert!(cpu_seconds(std::process::id()).unwrap() >= 0.0);
    }

    #[test]
    fn a_family_counts_its_children() {
        // A child that spins ~200 ms of CPU: its parent's family has at least that much more.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 5"])
            .spawn()
            .unwrap();
        let me = std::process::id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut family = 0.0;
        while std::time::Instant::now() < deadline {
            family = family_cpu_seconds(me).unwrap() - cpu_seconds(me).unwrap();
            if family >= 0.1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(family >= 0.1, "children's CPU {family} s");
    }

    #[test]
    fn reads_kib_fields() {
        assert_eq!(parse_kib("VmRSS:\t  2048 kB\nVmHWM:\t  65536 kB\n", "VmHWM:"), Some(65536.0));
        assert_eq!(parse_kib("VmRSS:\t  2048 kB\n", "VmHWM:"), None);
    }
}
