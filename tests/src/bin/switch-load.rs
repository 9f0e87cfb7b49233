//! A context-switch-heavy load for `cargo xtask bench probes`: pairs of threads hand a token back
//! and forth through a Mutex and Condvar (two futex waits and wakes per round trip), for a fixed
//! time. Prints the round trips made. Args: `SECONDS [PAIRS]`.

use std::{
    sync::{Arc, Condvar, Mutex},
    thread,
    time::{Duration, Instant},
};

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let pairs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..pairs)
        .flat_map(|pair| {
            let token = Arc::new((Mutex::new(0u8), Condvar::new()));
            (0..2u8).map(move |side| {
                let token = token.clone();
                thread::Builder::new()
                    .name(format!("pingpong-{pair}-{side}"))
                    .spawn(move || ping_pong(&token, side, deadline))
                    .expect("spawn")
            })
        })
        .collect();
    let rounds: u64 = handles.into_iter().map(|h| h.join().expect("join")).sum();
    println!("{rounds}");
}

/// Waits for its turn, passes the turn to the other side; stops at the deadline (bounded).
fn ping_pong(token: &(Mutex<u8>, Condvar), side: u8, deadline: Instant) -> u64 {
    let (turn, bell) = token;
    let mut rounds = 0;
    let mut guard = turn.lock().expect("lock");
    while Instant::now() < deadline {
        while *guard != side {
            let (g, timeout) = bell.wait_timeout(guard, Duration::from_millis(50)).expect("wait");
            guard = g;
            if timeout.timed_out() && Instant::now() >= deadline {
                return rounds;
            }
        }
        *guard = 1 - side;
        rounds += 1;
        bell.notify_one();
    }
    bell.notify_all();
    rounds
}
