//! The one end-to-end harness: the real daemon, the reference gateway, real nginx, Python, Redis
//! and test upstreams as child processes (each ended on drop, also when a test fails), network
//! namespaces, bounded client load, /metrics parsing and alert polling. Tests never sleep for
//! readiness: they poll with a deadline.
//!
//! The privileged suites in `tests/` load the real kernel programs; `reference-gateway`'s own
//! tests use the unprivileged parts.

pub mod alerts;
pub mod c_fixtures;
pub mod deploy;
pub mod firing_watch;
pub mod fixture;
pub mod h2c;
pub mod h2load;
pub mod http_client;
pub mod jvm;
pub mod jvm_scenario;
pub mod load;
pub mod metrics;
pub mod netns;
pub mod nginx;
pub mod observer;
pub mod pty;
pub mod python;
pub mod redis_server;
pub mod reference_gateway;
pub mod runtimes;
pub mod summary;
pub mod tls;
pub mod tmux;
pub mod upstream;
pub mod wrk;

use std::{
    path::PathBuf,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// True when the test may load probes. Without root it fails under CI (a skipped privileged test
/// is a failure there) and otherwise says why it skipped.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs root to load eBPF programs, and CI=true: a skipped privileged test is a failure"
    );
    eprintln!("SKIPPED {test}: needs root to load eBPF programs (run `sudo cargo xtask test`)");
    false
}

/// A workspace binary (`gateway-observer`, `reference-gateway`): $GATEWAY_OBSERVER_BIN for the
/// daemon if set, else the workspace's target/debug build (`cargo xtask test` builds both first;
/// cargo builds a package's own binaries before its integration tests).
pub fn binary(name: &str) -> PathBuf {
    if name == "gateway-observer"
        && let Some(path) = std::env::var_os("GATEWAY_OBSERVER_BIN")
    {
        return path.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let bin = target.join("debug").join(name);
    assert!(bin.exists(), "{} not built: run `cargo xtask test` (or cargo build -p {name})", bin.display());
    bin
}

/// Polls `probe` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `f` every 20 ms until it holds; panics naming `what` after `deadline`.
pub fn wait_until(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < end, "timed out after {deadline:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loopback port that was free a moment ago: free only until someone binds it. A server told
/// to listen there may find it taken (tests run in parallel, and other checkouts' tests on the
/// same host), and whoever took it answers in its place: wait for `listens_on` the child, not for
/// an answer on the port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// Whether process `pid` holds a TCP socket listening on `port` (in its own network namespace,
/// any address): the process, not another one, answers there. Read from
/// `/proc/PID/net/tcp{,6}` (the listening sockets' inodes) and `/proc/PID/fd` (the process's).
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(&"0A"), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue; // 0A: TCP_LISTEN
            };
            let local_port = local.rsplit(':').next().and_then(|hex| u16::from_str_radix(hex, 16).ok());
            if local_port == Some(port) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .any(|target| inodes.iter().any(|inode| target.as_os_str() == inode.as_str()))
}

/// A fresh directory for one test's files. Directories of earlier runs are kept for an hour (a
/// failed test's logs are there), then removed by the next run that makes one.
pub fn temp_dir(tag: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| remove_stale_temp_dirs(Duration::from_secs(3600)));
    let dir = std::env::temp_dir().join(format!(
        "refgw-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a test directory");
    dir
}

/// Removes `refgw-*` directories of processes that are gone, last changed over `age` ago.
fn remove_stale_temp_dirs(age: Duration) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("refgw-")) else { continue };
        // refgw-{tag}-{pid}-{seq}: the pid is the second field from the end.
        let pid = rest.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().unwrap_or_default() > age);
        if old && pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether `actual` is within `tolerance` (a fraction) of `expected`.
pub fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual - expected).abs() <= expected.abs() * tolerance
}

/// Asserts `got` is within ±20 % of `want`.
pub fn assert_about(what: &str, got: Duration, want: Duration) {
    let lo = want.mul_f64(0.8);
    let hi = want.mul_f64(1.2);
    assert!(got >= lo && got <= hi, "{what}: took {got:?}, expected {want:?} ±20 % ({lo:?}..{hi:?})");
}

/// The threads of a process as (tid, name).
pub fn threads(pid: u32) -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((tid, comm.trim().to_owned()))
        })
        .collect()
}

/// The syscall number a thread is blocked in (`/proc/PID/task/TID/syscall`), if any.
pub fn thread_syscall(pid: u32, tid: u32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Privileged tests run one at a time: each loads its own probes and measures timing, and
/// parallel daemons and workloads on a 2-core machine would disturb each other's ground truth.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The write end of a pipe whose reader is gone, as a child's stdout: every write there fails
/// with EPIPE, as after `| head` exits or a journal restarts.
pub fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::{FromRawFd as _, OwnedFd};
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two new descriptors into an array of two.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    // SAFETY: both descriptors are new and owned by nobody else.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    std::process::Stdio::from(writer)
}

#[cfg(test)]
mod temp_dir_tests {
    use super::*;

    fn aged(name: &str, age: Duration) -> PathBuf {
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("create");
        let then = std::time::SystemTime::now() - age;
        std::fs::File::open(&dir).and_then(|d| d.set_modified(then)).expect("age the directory");
        dir
    }

    #[test]
    fn stale_directories_of_gone_processes_are_removed_and_others_kept() {
        // pid 0 is never a process's; ours is alive.
        let gone_old = aged("refgw-sweep-0-0", Duration::from_secs(7200));
        let gone_new = aged("refgw-sweep-0-1", Duration::from_secs(60));
        let alive_old = aged(&format!("refgw-sweep-{}-2", std::process::id()), Duration::from_secs(7200));
        remove_stale_temp_dirs(Duration::from_secs(3600));
        let (removed, kept_new, kept_alive) = (!gone_old.exists(), gone_new.exists(), alive_old.exists());
        for dir in [&gone_new, &alive_old] {
            let _ = std::fs::remove_dir_all(dir);
        }
        assert!(removed, "an hour-old directory of a gone process is removed");
        assert!(kept_new, "a recent one is kept (a failed test's logs)");
        assert!(kept_alive, "a running test's directory is kept");
    }
}
