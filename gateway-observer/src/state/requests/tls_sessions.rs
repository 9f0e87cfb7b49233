//! Ties TLS plaintext the kernel could not place on a socket to its connection. A library that
//! moves its ciphertext through memory (Node.js feeds OpenSSL from buffers; libuv reads and writes
//! the socket outside any hooked call) gives plaintext keyed by its session (`SSL *`) only. A
//! read's plaintext comes right after the ciphertext it decrypts, read by the same thread on one
//! of the connections that began with a TLS record: it belongs there, and teaches the session its
//! connection. A write's plaintext goes to its session's connection (a server reads a request
//! before it writes). Both maps are bounded; a session's entry is overwritten at its next read
//! (an `SSL *` reused by a new session reads first), not looked for at each close.

use std::collections::HashMap;

use super::FastHash;

/// Threads and sessions remembered, at most each: past it the map starts again empty.
const MAX_ENTRIES: usize = 65_536;

#[derive(Default)]
pub struct TlsSessions {
    /// The TLS connection each thread last read ciphertext from, and when that ciphertext had
    /// arrived (handed to the first plaintext read after it).
    last_read: HashMap<u32, (u64, Option<u64>), FastHash>,
    /// (tgid, `SSL *`) → connection.
    sessions: HashMap<(u32, u64), u64, FastHash>,
}

impl TlsSessions {
    /// Thread `tid` read ciphertext from TLS connection `sk`.
    pub fn ciphertext_read(&mut self, tid: u32, sk: u64, queued_since_ns: Option<u64>) {
        if self.last_read.len() >= MAX_ENTRIES && !self.last_read.contains_key(&tid) {
            self.last_read.clear();
        }
        self.last_read.insert(tid, (sk, queued_since_ns));
    }

    /// The connection of session `ssl`'s plaintext, moved by thread `tid` of `tgid`, and for a
    /// read when its ciphertext had arrived.
    pub fn resolve(&mut self, tgid: u32, tid: u32, ssl: u64, read: bool) -> Option<(u64, Option<u64>)> {
        if !read {
            return self.sessions.get(&(tgid, ssl)).map(|&sk| (sk, None));
        }
        let (sk, queued) = self.last_read.get_mut(&tid)?;
        let found = (*sk, queued.take());
        if self.sessions.len() >= MAX_ENTRIES && !self.sessions.contains_key(&(tgid, ssl)) {
            self.sessions.clear();
        }
        self.sessions.insert((tgid, ssl), found.0);
        Some(found)
    }

    /// Connection `sk` closed: no thread's next plaintext read comes from it.
    pub fn closed(&mut self, sk: u64) {
        // One entry per thread that read TLS ciphertext: a few.
        if !self.last_read.is_empty() {
            self.last_read.retain(|_, (s, _)| *s != sk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_follows_the_thread_and_a_write_its_session() {
        let mut sessions = TlsSessions::default();
        assert_eq!(sessions.resolve(1, 10, 0xaa, true), None, "no ciphertext read yet");
        sessions.ciphertext_read(10, 100, Some(5));
        assert_eq!(sessions.resolve(1, 10, 0xaa, true), Some((100, Some(5))));
        // The next read from the same ciphertext: its arrival was given to the first.
        assert_eq!(sessions.resolve(1, 10, 0xaa, true), Some((100, None)));
        assert_eq!(sessions.resolve(1, 10, 0xaa, false), Some((100, None)));
        assert_eq!(sessions.resolve(1, 10, 0xbb, false), None, "a session never read");
        assert_eq!(sessions.resolve(2, 10, 0xaa, false), None, "another process's session");
        // The thread moves on to another connection; the session keeps its own.
        sessions.ciphertext_read(10, 200, None);
        assert_eq!(sessions.resolve(1, 10, 0xbb, true), Some((200, None)));
        assert_eq!(sessions.resolve(1, 10, 0xaa, false), Some((100, None)));
        sessions.closed(200);
        assert_eq!(sessions.resolve(1, 10, 0xcc, true), None, "the connection read last closed");
    }
}
