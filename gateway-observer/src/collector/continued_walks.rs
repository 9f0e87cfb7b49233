//! Data records whose HTTP/2 frame walk the kernel sends in continuation records: the whole walk
//! (the socket tracepoints and TLS uprobes walk in programs of their own), or its part past
//! 32 frames (a gateway answering many streams of one connection in one `writev`). Each is held
//! until its continuations arrive, their headers appended to its own, and then handed on as one
//! record, as if one walk had seen them all.
//! The kernel sends a continuation in the same program run as the record before it, so it is in
//! the ring by the end of the next drain; one that is not (lost to a full ring) leaves the record
//! walked as far as it got, which loses sync there as a walk that stopped at its bound did.

use gateway_observer_common::H2_WALK_PAYLOAD_BYTES;
use gateway_observer_http::h2::Walked;

use crate::events::socket::{ContinuedWalk, DataRecord, SocketRecord, decode};

/// Records held at once, at most: each waits microseconds, so more means continuations are lost.
const MAX_WAITING: usize = 64;
/// Drain ends a record waits through for its next continuation.
const DRAINS_WAITED: u8 = 2;
const HEADER_LEN: usize = 9;

/// Walked records waiting for their continuations.
#[derive(Default)]
pub struct ContinuedWalks {
    waiting: Vec<Waiting>,
    /// Records handed on before their last continuation came.
    pub incomplete: u64,
}

/// A walked record and the walk so far.
pub struct Waiting {
    /// The record's bytes, as the ring held them.
    record: Vec<u8>,
    sk: u64,
    tid: u32,
    /// Where the walk began and its first header is; unknown (None) until the first
    /// continuation says, for a record whose whole walk is in them.
    origin: Option<u64>,
    start: u64,
    headers: Vec<u8>,
    payload_lens: Vec<u8>,
    /// One `H2_WALK_PAYLOAD_BYTES` slot per header.
    payloads: Vec<u8>,
    /// Where the header after the last one starts: where the next continuation begins.
    next_at: u64,
    drains: u8,
}

impl Waiting {
    /// The record with every header walked so far; None if its bytes no longer decode as one.
    pub fn record(&self) -> Option<DataRecord<'_>> {
        let Ok(SocketRecord::Data(mut data)) = decode(&self.record) else { return None };
        if let Some(origin) = self.origin {
            data.walked = Walked {
                origin,
                start: self.start,
                headers: &self.headers,
                payload_lens: &self.payload_lens,
                payloads: &self.payloads,
                payload_slot: H2_WALK_PAYLOAD_BYTES,
            };
        }
        data.walk_continued = false;
        data.walk_in_continuations = false;
        Some(data)
    }

    fn append(&mut self, walked: &Walked) {
        for (i, header) in walked.headers.chunks_exact(HEADER_LEN).enumerate() {
            let slot = i * H2_WALK_PAYLOAD_BYTES;
            let payload = walked.payloads.get(slot..slot + H2_WALK_PAYLOAD_BYTES);
            self.headers.extend_from_slice(header);
            self.payload_lens.push(walked.payload_lens.get(i).copied().unwrap_or(0));
            self.payloads.extend_from_slice(payload.unwrap_or(&[0; H2_WALK_PAYLOAD_BYTES]));
            self.next_at += (HEADER_LEN + payload_len(header)) as u64;
        }
    }
}

/// A frame header's payload length (24 bits, big-endian).
fn payload_len(header: &[u8]) -> usize {
    header.iter().take(3).fold(0, |len, &byte| (len << 8) | usize::from(byte))
}

impl ContinuedWalks {
    /// Holds a walked record whose walk goes on (`bytes`, decoded as `data`). Returns a record to
    /// hand on now: one pushed out to make room, or an earlier one of the same thread and socket
    /// (its continuations did not come).
    pub fn hold(&mut self, bytes: &[u8], data: &DataRecord) -> Option<Waiting> {
        let earlier = self.waiting.iter().position(|w| (w.sk, w.tid) == (data.sk, data.tid));
        let out = match earlier {
            Some(index) => Some(self.waiting.remove(index)),
            None if self.waiting.len() >= MAX_WAITING => Some(self.waiting.remove(0)),
            None => None,
        };
        let mut waiting = Waiting {
            record: bytes.to_vec(),
            sk: data.sk,
            tid: data.tid,
            origin: (!data.walk_in_continuations).then_some(data.walked.origin),
            start: data.walked.start,
            headers: Vec::new(),
            payload_lens: Vec::new(),
            payloads: Vec::new(),
            next_at: data.walked.start,
            drains: 0,
        };
        waiting.append(&data.walked);
        self.waiting.push(waiting);
        self.incomplete += u64::from(out.is_some());
        out
    }

    /// A continuation: returns its record once its walk is whole (this was the last
    /// continuation), or as far as it goes when this one does not start where its walk stopped.
    pub fn extend(&mut self, more: &ContinuedWalk) -> Option<Waiting> {
        let index = self.waiting.iter().position(|w| (w.sk, w.tid) == (more.sk, more.tid))?;
        let waiting = &mut self.waiting[index];
        if waiting.origin.is_none() {
            // The walk's first record: from where it began.
            waiting.origin = Some(more.walked.origin);
            waiting.start = more.walked.start;
            waiting.next_at = more.walked.start;
        } else if more.walked.origin != waiting.next_at {
            self.incomplete += 1;
            return Some(self.waiting.remove(index));
        }
        waiting.append(&more.walked);
        waiting.drains = 0;
        (!more.continued).then(|| self.waiting.remove(index))
    }

    /// At the end of a ring drain: the records whose next continuation has not come by the end
    /// of the drain after theirs, to hand on as far as their walks go.
    pub fn after_drain(&mut self) -> Vec<Waiting> {
        for waiting in &mut self.waiting {
            waiting.drains += 1;
        }
        let (late, kept) = std::mem::take(&mut self.waiting).into_iter().partition(|w| w.drains >= DRAINS_WAITED);
        self.waiting = kept;
        let late: Vec<Waiting> = late;
        self.incomplete += late.len() as u64;
        late
    }
}

#[cfg(test)]
mod tests;
