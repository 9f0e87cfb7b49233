//! A target that takes more than its share, for the quota test. Args: `NAME THREADS PORT
//! CONNECTIONS`. Names itself NAME (its process label), prints `ready`, waits for a line, then
//! starts THREADS threads that wait and opens CONNECTIONS TCP connections to 127.0.0.1:PORT,
//! prints `spawned <threads> <connections>`, and holds them all until stdin closes.

use std::{
    io::BufRead as _,
    net::TcpStream,
    sync::{Arc, Barrier},
};

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "thread-hog".into());
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let port: u16 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let connections: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let cname = std::ffi::CString::new(name).expect("name without NUL");
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes (longer is cut).
    unsafe { libc::prctl(libc::PR_SET_NAME, cname.as_ptr()) };
    println!("ready");
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).expect("stdin");
    // Every thread waits on the barrier the main thread joins once stdin closes.
    let release = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let release = Arc::clone(&release);
            std::thread::Builder::new()
                .name(format!("hog-{i}"))
                .stack_size(64 * 1024)
                .spawn(move || {
                    release.wait();
                })
                .expect("spawn")
        })
        .collect();
    let held: Vec<TcpStream> = (0..connections).filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    println!("spawned {} {}", handles.len(), held.len());
    while stdin.read_line(&mut line).is_ok_and(|n| n > 0) {}
    release.wait();
    for handle in handles {
        handle.join().expect("join");
    }
}
