//! A compact byte encoding of what a [`Connection`](super::Connection) is fed: new connection,
//! segment, close. It is the `http_connection` fuzz target's input (so that any byte string is a
//! valid sequence of operations) and the format of its seed corpus, written by [`Writer`].
//!
//! Each operation starts with a tag byte; `tag & 3` is 0 for a read segment, 1 for a write
//! segment, 2 for a close, 3 for a new connection (role in bit 2: 0 Server, 1 Client).
//! - segment: `dt` u8 (time advance, ns), `tid` u8, `queued` u8 (0: none; else the data was
//!   queued `queued - 1` ns before), head length u16 LE (at most 512 used), head bytes, unseen
//!   count u32 LE (the syscall's length is head + unseen), tail length u8 (at most 16 used), tail
//!   bytes;
//! - close: `dt` u8.
//!
//! Time only moves forward, starting at [`START_NS`]. A truncated operation ends the input.

use super::exchange::{Direction, Role, Segment};

pub const START_NS: u64 = 1_000_000;
pub const MAX_HEAD: usize = 512;
pub const MAX_TAIL: usize = 16;

#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    Connect(Role),
    Segment(Direction, Segment<'a>),
    Close { ts_ns: u64 },
}

/// The operations encoded in `input`.
pub fn decode(input: &[u8]) -> Decoder<'_> {
    Decoder { input, ts_ns: START_NS }
}

pub struct Decoder<'a> {
    input: &'a [u8],
    ts_ns: u64,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.input.split_at_checked(n)?;
        self.input = rest;
        Some(taken)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    fn advance(&mut self) -> Option<u64> {
        self.ts_ns = self.ts_ns.saturating_add(u64::from(self.u8()?));
        Some(self.ts_ns)
    }
}

impl<'a> Iterator for Decoder<'a> {
    type Item = Op<'a>;

    fn next(&mut self) -> Option<Op<'a>> {
        let tag = self.u8()?;
        match tag & 3 {
            3 => Some(Op::Connect(if tag & 4 == 0 { Role::Server } else { Role::Client })),
            2 => Some(Op::Close { ts_ns: self.advance()? }),
            dir => {
                let ts_ns = self.advance()?;
                let tid = u32::from(self.u8()?);
                let queued = self.u8()?;
                let head_len = self.take(2)?;
                let head_len = usize::from(u16::from_le_bytes([*head_len.first()?, *head_len.get(1)?])).min(MAX_HEAD);
                let head = self.take(head_len)?;
                let unseen = self.take(4)?;
                let unseen = u32::from_le_bytes(unseen.try_into().ok()?);
                let tail_len = usize::from(self.u8()?).min(MAX_TAIL);
                let tail = self.take(tail_len)?;
                let seg = Segment {
                    ts_ns,
                    tid,
                    len: (head.len() as u64).saturating_add(u64::from(unseen)),
                    head,
                    tail,
                    queued_since_ns: (queued > 0).then(|| ts_ns.saturating_sub(u64::from(queued - 1))),
                    walked: Default::default(),
                };
                Some(Op::Segment(if dir == 0 { Direction::Read } else { Direction::Write }, seg))
            }
        }
    }
}

/// Builds an encoded operation sequence.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn connect(mut self, role: Role) -> Self {
        self.buf.push(match role {
            Role::Server => 3,
            Role::Client => 7,
        });
        self
    }

    /// One syscall that transferred `data`, seen as the kernel would: the first 512 and last 16
    /// bytes. `queued`: reads, ns the data waited in the socket (at most 254).
    pub fn data(self, dir: Direction, dt: u8, tid: u8, queued: Option<u8>, data: &[u8]) -> Self {
        let head = data.get(..MAX_HEAD).unwrap_or(data);
        let unseen = data.len().saturating_sub(head.len());
        let tail = data.get(data.len().saturating_sub(MAX_TAIL)..).unwrap_or_default();
        self.sparse(dir, dt, tid, queued, head, u32::try_from(unseen).unwrap_or(u32::MAX), tail)
    }

    /// One syscall of `head.len() + unseen` bytes whose first bytes are `head` and last `tail`.
    #[expect(clippy::too_many_arguments, reason = "one argument per encoded field")]
    pub fn sparse(
        mut self,
        dir: Direction,
        dt: u8,
        tid: u8,
        queued: Option<u8>,
        head: &[u8],
        unseen: u32,
        tail: &[u8],
    ) -> Self {
        let head = head.get(..MAX_HEAD).unwrap_or(head);
        let tail = tail.get(tail.len().saturating_sub(MAX_TAIL)..).unwrap_or_default();
        self.buf.push(match dir {
            Direction::Read => 0,
            Direction::Write => 1,
        });
        self.buf.extend([dt, tid, queued.map_or(0, |q| q.saturating_add(1))]);
        self.buf.extend(u16::try_from(head.len()).unwrap_or(u16::MAX).to_le_bytes());
        self.buf.extend(head);
        self.buf.extend(unseen.to_le_bytes());
        self.buf.push(u8::try_from(tail.len()).unwrap_or(u8::MAX));
        self.buf.extend(tail);
        self
    }

    pub fn close(mut self, dt: u8) -> Self {
        self.buf.extend([2, dt]);
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
pub(crate) mod tests;
