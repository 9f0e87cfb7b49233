//! Closes uprobe events off the collection thread. The kernel unregisters a uprobe at its last
//! close and waits there for RCU grace periods: about 100 ms an event on 6.18, 0.85 s for the 8
//! of one hooked process. Closed inline, an nginx reload that retires two workers stalled the
//! tick, the rings' drains and every HTTP answer for 1.7 s (and past a client's 5 s timeout on a
//! slower host).

use std::{
    os::fd::OwnedFd,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
        mpsc::{self, Sender},
    },
};

/// A thread that closes what it is handed, in order, started at the first hand-over.
#[derive(Default)]
pub struct DeferredClose {
    sender: Option<Sender<Vec<OwnedFd>>>,
    /// Descriptors handed over and not yet closed.
    pending: Arc<AtomicUsize>,
}

impl DeferredClose {
    /// Closes `fds` soon, on the closing thread (inline if that thread cannot be started or has
    /// gone).
    pub fn close(&mut self, fds: Vec<OwnedFd>) {
        if fds.is_empty() {
            return;
        }
        if self.sender.is_none() {
            self.sender = self.spawn();
        }
        let count = fds.len();
        self.pending.fetch_add(count, Ordering::Relaxed);
        let Some(sender) = &self.sender else {
            self.pending.fetch_sub(count, Ordering::Relaxed);
            return drop(fds);
        };
        if let Err(mpsc::SendError(fds)) = sender.send(fds) {
            self.pending.fetch_sub(count, Ordering::Relaxed);
            self.sender = None;
            drop(fds);
        }
    }

    /// Descriptors handed over and still open.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    fn spawn(&self) -> Option<Sender<Vec<OwnedFd>>> {
        let (sender, receiver) = mpsc::channel::<Vec<OwnedFd>>();
        let pending = Arc::clone(&self.pending);
        let spawned = std::thread::Builder::new().name("uprobe-close".into()).spawn(move || {
            for fds in receiver {
                let count = fds.len();
                drop(fds);
                pending.fetch_sub(count, Ordering::Relaxed);
            }
        });
        match spawned {
            Ok(_) => Some(sender),
            Err(error) => {
                tracing::warn!(%error, "uprobe events are closed on the collection thread: no thread for them");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd as _, FromRawFd as _};

    /// True once every writer of the pipe whose read end is `read` is closed (within 5 s).
    fn writers_closed(read: &OwnedFd) -> bool {
        let mut poll = libc::pollfd { fd: read.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a closed write end shows as POLLHUP on the read end.
        let ready = unsafe { libc::poll(&mut poll, 1, 5000) };
        ready == 1 && poll.revents & libc::POLLHUP != 0
    }

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut ends = [0; 2];
        // SAFETY: pipe2 fills two descriptors, which are then owned here alone.
        assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: as above: both just opened, owned nowhere else.
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) }
    }

    #[test]
    fn what_is_handed_over_is_closed_and_counted_down() {
        let mut closer = DeferredClose::default();
        let (reads, writes): (Vec<_>, Vec<_>) = (0..8).map(|_| pipe()).unzip();
        closer.close(writes);
        assert!(reads.iter().all(writers_closed), "every handed-over descriptor closed");
        let (read, write) = pipe();
        closer.close(vec![write]);
        assert!(writers_closed(&read), "the thread goes on closing");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while closer.pending() > 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(closer.pending(), 0);
    }
}
