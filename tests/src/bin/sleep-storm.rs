//! Many short sleeps in one thread, `storm-1`, for the ring-buffer overflow test: each sleep
//! passes a low block threshold, so the kernel sends an event per sleep while the observer takes
//! the thread for an event loop. Protocol as offcpu-fixture: starts the thread, prints `ready`,
//! waits for a line, sleeps `COUNT` times for `MICROS` µs (args), prints `done <sleeps>
//! <total_ns>`, then waits for stdin to close.

use std::{
    io::BufRead as _,
    time::{Duration, Instant},
};

fn main() {
    let mut args = std::env::args().skip(1);
    let count: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(8000);
    let micros: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(300);
    // The thread exists before `ready`, so an observer can know it (as an event loop) first.
    let (go, went) = std::sync::mpsc::channel::<()>();
    let storm = std::thread::Builder::new()
        .name("storm-1".into())
        .spawn(move || {
            went.recv().expect("go");
            let mut total = Duration::ZERO;
            for _ in 0..count {
                let start = Instant::now();
                std::thread::sleep(Duration::from_micros(micros));
                total += start.elapsed();
            }
            total
        })
        .expect("spawn");
    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");
    go.send(()).expect("storm thread gone");
    let total = storm.join().expect("join");
    println!("done {count} {}", total.as_nanos());
    let mut rest = String::new();
    let _ = std::io::stdin().lock().read_line(&mut rest);
}
