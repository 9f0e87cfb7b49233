//! Many threads that mostly sleep, for `cargo xtask bench overhead`: the daemon's cost of
//! following a large, idle-ish thread population (each nap is one switch out and one wakeup).
//! Args: `THREADS MILLIS SECONDS`; prints `ready` once every thread is running, exits at the end.

use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let nap = Duration::from_millis(args.next().and_then(|s| s.parse().ok()).unwrap_or(100));
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("nap-{i}"))
                .stack_size(64 * 1024) // 2,000 default 2 MiB stacks would be 4 GiB of address space
                .spawn(move || {
                    while Instant::now() < deadline {
                        std::thread::sleep(nap);
                    }
                })
                .expect("spawn")
        })
        .collect();
    println!("ready");
    for h in handles {
        h.join().expect("join");
    }
}
