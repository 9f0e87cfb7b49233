//! Lines to stdout and stderr without `println!`/`eprintln!`, which panic when the stream is
//! closed: a pipe into `head` that exited, a journal that restarted under the daemon, a terminal
//! that hung up.

use std::io::{self, Write as _};

/// Writes `text` and a newline to stdout. `Ok(false)` when the reader has gone (EPIPE): the
/// caller ends quietly or stops writing there; other errors are the caller's.
pub fn line(text: &str) -> io::Result<bool> {
    let mut out = io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes a line to stderr, or nothing if it cannot: a message is never worth a crash.
pub fn report(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{args}");
}

/// `eprintln!` that never panics (see [`report`]).
#[macro_export]
macro_rules! report {
    ($($arg:tt)*) => { $crate::cli::output::report(format_args!($($arg)*)) };
}
