//! An event loop that sometimes stays on CPU: thread `loop-1` waits in epoll_wait (20 ms timeout)
//! and every tenth iteration spins for SPIN_MS without returning to it. Protocol as
//! offcpu-fixture: prints `ready`, waits for a line, runs for SECONDS, prints
//! `done <spins> <cpu_ns>` (the CPU time the thread spent in its spins, by its own clock), waits
//! for stdin to close. Args: `SECONDS SPIN_MS`.

use std::{
    io::BufRead as _,
    time::{Duration, Instant},
};

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(6);
    let spin_ms: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(250);
    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");
    let handle = std::thread::Builder::new()
        .name("loop-1".into())
        .spawn(move || event_loop(Duration::from_secs(seconds), Duration::from_millis(spin_ms)))
        .expect("spawn");
    let (spins, cpu_ns) = handle.join().expect("join");
    println!("done {spins} {cpu_ns}");
    let mut rest = String::new();
    let _ = std::io::stdin().lock().read_line(&mut rest);
}

/// The calling thread's CPU time.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn event_loop(run_for: Duration, spin: Duration) -> (u32, u64) {
    // SAFETY: plain syscalls on fds this function owns; the event buffer outlives each call.
    unsafe {
        let ep = libc::epoll_create1(0);
        assert!(ep >= 0, "epoll_create1");
        let mut fds = [0i32; 2];
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0, "pipe");
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
        assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fds[0], &mut ev), 0, "epoll_ctl");
        let end = Instant::now() + run_for;
        let mut spins = 0;
        let mut spin_cpu_ns = 0;
        let mut iteration = 0u64;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        while Instant::now() < end {
            libc::epoll_wait(ep, events.as_mut_ptr(), 4, 20);
            iteration += 1;
            if iteration.is_multiple_of(10) {
                let start = Instant::now();
                let cpu_start = thread_cpu_ns();
                let mut x = 0u64;
                while start.elapsed() < spin {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
                }
                spins += 1;
                spin_cpu_ns += thread_cpu_ns() - cpu_start;
            }
        }
        libc::close(fds[0]);
        libc::close(fds[1]);
        libc::close(ep);
        (spins, spin_cpu_ns)
    }
}
