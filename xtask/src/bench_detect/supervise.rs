//! Runs one end-to-end test as its own process group, under the lock every privileged run on
//! this machine takes, with a deadline; and ends the whole group — the test and whatever it
//! started — when the deadline passes or the bench is interrupted (Ctrl-C, SIGTERM, SIGHUP).
//! The test is in a group of its own so a terminal's Ctrl-C reaches only the bench, which then
//! ends it: killed by the signal, the test itself would leave its daemon and fixtures behind.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Read, Write as _},
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::Path,
    process::{Command, ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// The lock the privileged suites of this machine share (see `cargo xtask test`'s callers).
const E2E_LOCK: &str = "/tmp/gateway-observer-e2e.lock";
/// How long a test group has to end on SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// From now on Ctrl-C, SIGTERM and SIGHUP only set a flag that `run` and the caller check.
pub fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

pub enum Ending {
    Exited(ExitStatus),
    TimedOut(Duration),
    Interrupted,
}

pub struct Finished {
    pub ending: Ending,
    /// The test's stderr (where the suites report); stdout goes only to the log.
    pub stderr: String,
    pub elapsed: Duration,
}

/// `binary test --exact --include-ignored --test-threads=1 --nocapture` with CI=true (a skipped
/// privileged test fails), in `dir`, both outputs also written to `log`.
pub fn run(binary: &Path, test: &str, dir: &Path, log: &Path, timeout: Duration) -> anyhow::Result<Finished> {
    let _lock = lock()?;
    let log = Arc::new(Mutex::new(File::create(log).with_context(|| format!("create {}", log.display()))?));
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args([test, "--exact", "--include-ignored", "--test-threads=1", "--nocapture"])
        .env("CI", "true")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("run {} {test}", binary.display()))?;
    let group = child.id() as libc::pid_t;
    let stdout = tee(child.stdout.take().context("test stdout")?, log.clone());
    let stderr = tee(child.stderr.take().context("test stderr")?, log);
    let ending = loop {
        if let Some(status) = child.try_wait().context("wait for the test")? {
            break Ending::Exited(status);
        }
        if interrupted() {
            break Ending::Interrupted;
        }
        if started.elapsed() >= timeout {
            break Ending::TimedOut(timeout);
        }
        thread::sleep(Duration::from_millis(100));
    };
    // Also after a clean exit: nothing the test started may outlive it.
    end_group(group);
    let _ = child.wait();
    let elapsed = started.elapsed();
    // A process that left the group could hold the pipes open: read what came, do not wait on it.
    let _ = stdout.recv_timeout(TERM_GRACE);
    let stderr = stderr.recv_timeout(TERM_GRACE).unwrap_or_default();
    Ok(Finished { ending, stderr, elapsed })
}

/// Copies `pipe` to `log` line by line as it comes (so a long test can be followed), and sends
/// the whole text once the pipe closes.
fn tee(pipe: impl Read + Send + 'static, log: Arc<Mutex<File>>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut text = String::new();
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            if let Ok(mut log) = log.lock() {
                let _ = log.write_all(&line);
            }
            text.push_str(&String::from_utf8_lossy(&line));
            line.clear();
        }
        let _ = tx.send(text);
    });
    rx
}

/// SIGTERM to every process of the group, SIGKILL to those left after `TERM_GRACE`.
fn end_group(group: libc::pid_t) {
    // SAFETY: signals to a process group this bench created; kill has no memory effects.
    let signal = |sig| unsafe { libc::kill(-group, sig) };
    if signal(libc::SIGTERM) != 0 {
        return; // no process left in the group
    }
    let deadline = Instant::now() + TERM_GRACE;
    // The test itself stays a zombie (and in the group) until reaped: reap it while waiting.
    // SAFETY: waitpid on our own child with WNOHANG.
    let reap = || unsafe { libc::waitpid(group, std::ptr::null_mut(), libc::WNOHANG) };
    while Instant::now() < deadline {
        reap();
        if signal(0) != 0 {
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
    signal(libc::SIGKILL);
}

/// The machine's end-to-end lock, held until the returned file is dropped; waits for it, but
/// gives up when the bench is interrupted.
pub fn lock() -> anyhow::Result<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(E2E_LOCK)
        .with_context(|| format!("open {E2E_LOCK}"))?;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        if interrupted() {
            bail!("interrupted while waiting for {E2E_LOCK}");
        }
        thread::sleep(Duration::from_millis(200));
    }
}
