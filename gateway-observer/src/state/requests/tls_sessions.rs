//! Ties TLS plaintext the kernel could not place on a socket to its connection. A library that
//! moves its ciphertext through memory (Node.js feeds OpenSSL from buffers; libuv reads and writes
//! the socket outside any hooked call) gives plaintext keyed by its session (`SSL *`) only. A
//! read's plaintext comes right after the ciphertext it decrypts, read by the same thread on one
//! of the connections that began with a TLS record: it belongs there, and teaches the session its
//! connection. A write's plaintext goes to its session's connection (a server reads a request
//! before it writes). A client writes its request before it reads anything: that plaintext is
//! held for its thread until the thread writes ciphertext on a TLS connection, which is the
//! request encrypted (libuv writes what OpenSSL produced right after the call), and teaches the
//! session its connection. The maps are bounded; a session's entry is overwritten at its next
//! read or first write (an `SSL *` reused by a new session), not looked for at each close.

use std::collections::HashMap;

use gateway_observer_http::h2::Walked;

use super::FastHash;
use crate::events::socket::DataRecord;

/// Plaintext writes of one session held for one thread, at most: past it the oldest is dropped.
const MAX_HELD_WRITES: usize = 8;

/// A write's plaintext whose session has no connection yet: the record, its bytes owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldWrite {
    pub tgid: u32,
    pub ssl: u64,
    pub len: u64,
    pub timestamp_ns: u64,
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
}

impl HeldWrite {
    fn of(data: &DataRecord) -> Self {
        HeldWrite {
            tgid: data.tgid,
            ssl: data.sk,
            len: data.len,
            timestamp_ns: data.timestamp_ns,
            head: data.head.to_vec(),
            tail: data.tail.to_vec(),
        }
    }

    /// The record as if the kernel had tied it to connection `sk` (`lost`: its lost-records count).
    pub fn on_connection(&self, tid: u32, sk: u64, lost: u16) -> DataRecord<'_> {
        DataRecord {
            sk,
            tid,
            tgid: self.tgid,
            fd: gateway_observer_common::DATA_FD_UNKNOWN,
            read: false,
            len: self.len,
            timestamp_ns: self.timestamp_ns,
            queued_since_ns: None,
            head: &self.head,
            tail: &self.tail,
            sock_lost: lost,
            // Plaintext: the kernel walks no frames in it.
            walked: Walked::default(),
            walk_continued: false,
            walk_in_continuations: false,
        }
    }
}

/// Threads and sessions remembered, at most each: past it the map starts again empty.
const MAX_ENTRIES: usize = 65_536;

#[derive(Default)]
pub struct TlsSessions {
    /// The TLS connection each thread last read ciphertext from, and when that ciphertext had
    /// arrived (handed to the first plaintext read after it).
    last_read: HashMap<u32, (u64, Option<u64>), FastHash>,
    /// (tgid, `SSL *`) → connection.
    sessions: HashMap<(u32, u64), u64, FastHash>,
    /// Per thread, the plaintext writes of one session not tied to a connection yet.
    held_writes: HashMap<u32, Vec<HeldWrite>, FastHash>,
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

    /// Holds the plaintext of a write `resolve` found no connection for, until its thread writes
    /// ciphertext. Returns how many held writes were given up for it (another session's, or the
    /// oldest past the bound).
    pub fn hold_write(&mut self, data: &DataRecord) -> u64 {
        if self.held_writes.len() >= MAX_ENTRIES && !self.held_writes.contains_key(&data.tid) {
            let dropped = self.held_writes.values().map(Vec::len).sum::<usize>();
            self.held_writes.clear();
            return dropped as u64 + self.hold_write(data);
        }
        let held = self.held_writes.entry(data.tid).or_default();
        let mut dropped = 0;
        if held.first().is_some_and(|h| (h.tgid, h.ssl) != (data.tgid, data.sk)) {
            dropped = held.len();
            held.clear();
        }
        if held.len() >= MAX_HELD_WRITES {
            held.remove(0);
            dropped += 1;
        }
        held.push(HeldWrite::of(data));
        dropped as u64
    }

    /// Thread `tid` wrote ciphertext on TLS connection `sk`: the writes it held are that
    /// connection's, and so is their session from now on.
    pub fn ciphertext_written(&mut self, tid: u32, sk: u64) -> Vec<HeldWrite> {
        let Some(held) = self.held_writes.remove(&tid) else { return Vec::new() };
        if let Some(first) = held.first() {
            if self.sessions.len() >= MAX_ENTRIES && !self.sessions.contains_key(&(first.tgid, first.ssl)) {
                self.sessions.clear();
            }
            self.sessions.insert((first.tgid, first.ssl), sk);
        }
        held
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

    fn write(tid: u32, ssl: u64, timestamp_ns: u64) -> DataRecord<'static> {
        DataRecord {
            sk: ssl,
            tid,
            tgid: 1,
            fd: gateway_observer_common::DATA_FD_TLS_SESSION,
            read: false,
            len: 18,
            timestamp_ns,
            queued_since_ns: None,
            head: b"GET / HTTP/1.1\r\n\r\n",
            tail: b"",
            sock_lost: 0,
            walked: Walked::default(),
            walk_continued: false,
            walk_in_continuations: false,
        }
    }

    #[test]
    fn a_clients_first_writes_wait_for_the_ciphertext_they_become() {
        let mut sessions = TlsSessions::default();
        assert_eq!(sessions.resolve(1, 10, 0xaa, false), None, "a client has read nothing");
        assert_eq!(sessions.hold_write(&write(10, 0xaa, 5)), 0);
        assert_eq!(sessions.hold_write(&write(10, 0xaa, 6)), 0);
        assert!(sessions.ciphertext_written(11, 100).is_empty(), "another thread's ciphertext");
        let held = sessions.ciphertext_written(10, 100);
        assert_eq!(held.iter().map(|h| h.timestamp_ns).collect::<Vec<_>>(), vec![5, 6]);
        let record = held[0].on_connection(10, 100, 3);
        assert_eq!(
            (record.sk, record.fd, record.read, record.sock_lost),
            (100, gateway_observer_common::DATA_FD_UNKNOWN, false, 3)
        );
        assert_eq!(record.head, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(sessions.resolve(1, 10, 0xaa, false), Some((100, None)), "the session learnt its connection");
        assert!(sessions.ciphertext_written(10, 100).is_empty(), "nothing held twice");
    }

    #[test]
    fn held_writes_are_bounded_and_of_one_session() {
        let mut sessions = TlsSessions::default();
        for ts in 0..MAX_HELD_WRITES as u64 {
            assert_eq!(sessions.hold_write(&write(10, 0xaa, ts)), 0);
        }
        assert_eq!(sessions.hold_write(&write(10, 0xaa, 99)), 1, "the oldest given up");
        assert_eq!(sessions.hold_write(&write(10, 0xbb, 100)), MAX_HELD_WRITES as u64, "another session's");
        let held = sessions.ciphertext_written(10, 200);
        assert_eq!(held.len(), 1);
        assert_eq!(sessions.resolve(1, 10, 0xbb, false), Some((200, None)));
        assert_eq!(sessions.resolve(1, 10, 0xaa, false), None, "given up, never tied");
    }
}
