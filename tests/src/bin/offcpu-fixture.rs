//! A process with known off-CPU behaviour, for the probe tests. Each workload runs in threads
//! with its own name (so its thread group is known) and measures its own ground truth.
//!
//! What a thread measures includes the delay between its wakeup and running again; the observer
//! counts that delay as `runqueue`, not as the wait. The machine is kept quiet during the
//! blocking workloads so that delay stays small.
//!
//! Protocol: prints `ready`, waits for a line on stdin, runs the workload, prints one JSON line of
//! ground truth (nanoseconds per thread group and reason), then waits for stdin to close and exits.
//!
//! Args: `[--comm NAME] [--prefix P] [--child]`. `--comm` renames the main thread (the process
//! comm); `--prefix` prefixes thread names; `--child` also spawns a child process running the
//! sleeper workload under the prefix `child-`.

use std::{
    io::{BufRead as _, Write as _},
    sync::{Arc, Condvar, Mutex},
    thread,
    time::{Duration, Instant},
};

const SLEEPS: u32 = 20;
const SLEEP_EACH: Duration = Duration::from_millis(50);
const LOCK_ROUNDS: u32 = 8;
const HOLD_EACH: Duration = Duration::from_millis(100);
const TIMED_WAITS: u32 = 10;
const TIMED_WAIT_EACH: Duration = Duration::from_millis(50);
const WOKEN_WAITS: u32 = 10;
/// The woken waiter's timeout: far longer than the signaller takes to wake it.
const WOKEN_TIMEOUT: Duration = Duration::from_secs(2);
const SIGNAL_AFTER: Duration = Duration::from_millis(40);
const SPIN_FOR: Duration = Duration::from_millis(800);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg_after = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    if let Some(comm) = arg_after("--comm") {
        set_thread_name(&comm);
    }
    let prefix = arg_after("--prefix").unwrap_or_default();
    let with_child = args.iter().any(|a| a == "--child");

    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");

    let child = with_child.then(|| {
        std::process::Command::new(&args[0])
            .args(["--prefix", "child-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child")
    });
    let child = child.map(|mut c| {
        let mut stdin = c.stdin.take().expect("child stdin");
        let mut out = std::io::BufReader::new(c.stdout.take().expect("child stdout"));
        let mut ready = String::new();
        out.read_line(&mut ready).expect("child ready");
        writeln!(stdin, "go").expect("child go");
        (c, stdin, out)
    });

    let sleeper = spawn(&prefix, "sleeper-1", sleeper);
    let timed = spawn(&prefix, "timed-1", timed_waiter);
    let handoff = Arc::new(Handoff::default());
    let woken = {
        let handoff = handoff.clone();
        spawn(&prefix, "woken-1", move || woken_waiter(&handoff))
    };
    let signaller = {
        let handoff = handoff.clone();
        spawn(&prefix, "signaller-1", move || signaller(&handoff))
    };
    let lock = Arc::new(Mutex::new(()));
    let holder = {
        let lock = lock.clone();
        spawn(&prefix, "holder-1", move || holder(&lock))
    };
    let waiter = {
        let lock = lock.clone();
        spawn(&prefix, "waiter-1", move || waiter(&lock))
    };
    let sleep_ns = sleeper.join().expect("sleeper");
    let timed_ns = timed.join().expect("timed");
    let woken_ns = woken.join().expect("woken");
    let _ = signaller.join().expect("signaller");
    let _ = holder.join().expect("holder");
    let futex_ns = waiter.join().expect("waiter");
    // The spinner runs alone, after the blocking workloads: on a 2-core machine, spinning beside
    // them would stretch their wakeup-to-run delays and blur what the fixture itself measures.
    let spin_ns = spawn(&prefix, "spinner-1", spinner).join().expect("spinner");
    let child_sleep_ns = child.map_or(0, |(mut c, stdin, mut out)| {
        let mut truth = String::new();
        out.read_line(&mut truth).expect("child truth");
        drop(stdin);
        let _ = c.wait();
        field(&truth, "sleep_ns")
    });
    println!(
        "{{\"prefix\":\"{prefix}\",\"sleep_ns\":{sleep_ns},\"futex_ns\":{futex_ns},\"futex_timed_ns\":{timed_ns},\"futex_woken_ns\":{woken_ns},\"spin_ns\":{spin_ns},\"child_sleep_ns\":{child_sleep_ns}}}"
    );
    // Stay alive (threads gone) until the test has scraped, then exit when stdin closes.
    let mut rest = String::new();
    let _ = std::io::stdin().lock().read_line(&mut rest);
}

fn field(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    json.split(&key).nth(1).and_then(|s| s.split([',', '}']).next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn spawn<F: FnOnce() -> u64 + Send + 'static>(prefix: &str, name: &str, f: F) -> thread::JoinHandle<u64> {
    thread::Builder::new().name(format!("{prefix}{name}")).spawn(f).expect("spawn thread")
}

fn set_thread_name(name: &str) {
    let name = std::ffi::CString::new(name).expect("no NUL in comm");
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes (longer is truncated).
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}

fn elapsed_ns(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// nanosleep: reason "sleep".
fn sleeper() -> u64 {
    (0..SLEEPS)
        .map(|_| {
            let start = Instant::now();
            thread::sleep(SLEEP_EACH);
            elapsed_ns(start)
        })
        .sum()
}

/// A condition variable nobody signals, waited on with a timeout: the first wait reads as
/// "futex_timed", and once it has timed out, the next ones as "futex_sleep".
fn timed_waiter() -> u64 {
    let pair = (Mutex::new(()), Condvar::new());
    let mut guard = pair.0.lock().expect("lock");
    let mut total = 0;
    for _ in 0..TIMED_WAITS {
        let start = Instant::now();
        guard = pair.1.wait_timeout(guard, TIMED_WAIT_EACH).expect("wait").0;
        total += elapsed_ns(start);
    }
    total
}

/// A worker waiting for work with a timeout, as a pool's keep-alive poll does: each wait is
/// ended by another thread handing it work, never by its timeout.
#[derive(Default)]
struct Handoff {
    /// (the waiter waits now, waits left)
    state: Mutex<(bool, u32)>,
    work: Condvar,
}

/// Timed waits each woken by the signaller well before their timeout: reason "futex_timed",
/// never "futex_sleep".
fn woken_waiter(handoff: &Handoff) -> u64 {
    let mut total = 0;
    let mut guard = handoff.state.lock().expect("lock");
    for _ in 0..WOKEN_WAITS {
        guard.0 = true;
        let start = Instant::now();
        while guard.0 {
            guard = handoff.work.wait_timeout(guard, WOKEN_TIMEOUT).expect("wait").0;
        }
        total += elapsed_ns(start);
        guard.1 += 1;
    }
    total
}

/// Wakes the woken waiter SIGNAL_AFTER into each of its waits.
fn signaller(handoff: &Handoff) -> u64 {
    loop {
        thread::sleep(SIGNAL_AFTER);
        let mut guard = handoff.state.lock().expect("lock");
        if guard.1 >= WOKEN_WAITS {
            return 0;
        }
        if guard.0 {
            guard.0 = false;
            handoff.work.notify_one();
        }
    }
}

/// Holds the lock for HOLD_EACH, then lets the waiter take it.
fn holder(lock: &Mutex<()>) -> u64 {
    for _ in 0..LOCK_ROUNDS {
        let guard = lock.lock().expect("lock");
        thread::sleep(HOLD_EACH);
        drop(guard);
        thread::sleep(Duration::from_millis(20));
    }
    0
}

/// Blocks on the lock the holder has: reason "futex" (untimed). Starts just after the holder.
fn waiter(lock: &Mutex<()>) -> u64 {
    thread::sleep(Duration::from_millis(10));
    let mut total = 0;
    for _ in 0..LOCK_ROUNDS {
        let start = Instant::now();
        let guard = lock.lock().expect("lock");
        total += elapsed_ns(start);
        drop(guard);
        // Sleep past the holder's own pause so it takes the lock first again.
        thread::sleep(Duration::from_millis(40));
    }
    total
}

/// On CPU the whole time: no off-CPU wait except preemption.
fn spinner() -> u64 {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < SPIN_FOR {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    elapsed_ns(start)
}
