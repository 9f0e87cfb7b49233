//! What the daemon itself costs, as every Prometheus exporter reports it (`process_*`): CPU,
//! memory, descriptors, start time. An SRE checks the observer's own cost on the host where it
//! runs without another tool; the heap split tells a leak (in use grows) from memory the
//! allocator keeps (free grows).

use std::{
    fs,
    time::{Duration, SystemTime},
};

use crate::host::procfs;

/// One reading of the daemon's own process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelfUsage {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub start_time_seconds: f64,
    /// Heap in use by live allocations and kept free by the allocator (glibc only).
    pub heap: Option<(u64, u64)>,
}

impl SelfUsage {
    /// Reads this process's usage; what cannot be read stays 0.
    pub fn read() -> Self {
        let pid = std::process::id();
        let page = page_size();
        let (virtual_pages, resident_pages) =
            fs::read_to_string("/proc/self/statm").ok().and_then(|text| parse_statm(&text)).unwrap_or_default();
        let open_fds = fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
        let age = procfs::process_age(pid).unwrap_or_default();
        let started = SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
        Self {
            cpu_seconds: procfs::cpu_seconds(pid).unwrap_or(0.0),
            resident_bytes: resident_pages.saturating_mul(page),
            virtual_bytes: virtual_pages.saturating_mul(page),
            open_fds,
            max_fds: max_fds(),
            start_time_seconds: started.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs_f64(),
            heap: crate::heap::usage(),
        }
    }
}

/// /proc/self/statm: (total program size, resident set), in pages.
pub fn parse_statm(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some((fields.next()?.ok()?, fields.next()?.ok()?))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

fn max_fds() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    limit.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_gives_size_and_resident_pages() {
        assert_eq!(parse_statm("12345 678 90 1 0 2000 0\n"), Some((12345, 678)));
        assert_eq!(parse_statm("garbage"), None);
        assert_eq!(parse_statm(""), None);
    }

    #[test]
    fn this_process_reads_as_running_with_memory_and_descriptors() {
        let usage = SelfUsage::read();
        assert!(usage.resident_bytes > 1 << 20, "{usage:?}");
        assert!(usage.virtual_bytes >= usage.resident_bytes, "{usage:?}");
        assert!(usage.open_fds >= 3 && usage.open_fds <= usage.max_fds, "{usage:?}");
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("after 1970").as_secs_f64();
        assert!(usage.start_time_seconds <= now && usage.start_time_seconds > now - 3600.0, "{usage:?}");
        let extra = vec![0u8; 8 << 20];
        let after = SelfUsage::read();
        if let Some((in_use, _)) = after.heap {
            // Other tests allocate and free meanwhile: only our 8 MiB is sure to be in use.
            assert!(in_use >= 8 << 20, "{in_use} bytes in use while 8 MiB are held");
        }
        assert!(std::hint::black_box(&extra).len() == 8 << 20);
    }
}
