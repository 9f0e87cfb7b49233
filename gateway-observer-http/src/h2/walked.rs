//! Frame headers the kernel walked past a syscall's copied head (HTTP/2 connections only), put
//! back where they were in the syscall's bytes so that the frame walker finds every header.
//!
//! The kernel walks from a frame boundary (`origin`: the syscall's start, or the end of the
//! client preface) and keeps the headers that end past the head, back to back from `start`, each
//! with the first bytes of its payload (none for DATA). The walk is only right when the syscall
//! did start at a frame boundary; the session uses it only when its own walker agrees.

use super::frames::{FrameHeader, HEADER_LEN, Piece};

/// What the kernel walked of one syscall past its head; empty for most syscalls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Walked<'a> {
    /// Where the kernel's walk began.
    pub origin: u64,
    /// Where the first header below starts.
    pub start: u64,
    /// 9-byte frame headers, each frame following the one before.
    pub headers: &'a [u8],
    /// Payload bytes kept of each frame, at the start of its slot of `payloads`.
    pub payload_lens: &'a [u8],
    pub payloads: &'a [u8],
    /// Bytes of one frame's slot.
    pub payload_slot: usize,
}

impl Walked<'_> {
    pub fn is_empty(&self) -> bool {
        self.headers.len() < HEADER_LEN
    }
}

/// A syscall's bytes in order, from what is known of them: the visible head, the walked
/// headers and payload starts at their offsets, the visible tail, and the unseen bytes between.
/// Bytes seen twice (a header that starts inside the head) are given once.
pub fn pieces<'a>(head: &'a [u8], len: u64, tail: &'a [u8], walked: &Walked<'a>, out: &mut Vec<Piece<'a>>) {
    out.clear();
    let mut layout = Layout { pos: 0, len, out };
    layout.seen(0, head);
    let mut at = walked.start;
    for (i, bytes) in walked.headers.chunks_exact(HEADER_LEN).enumerate() {
        let Ok(header) = <&[u8; HEADER_LEN]>::try_from(bytes) else { break };
        layout.seen(at, bytes);
        let kept = usize::from(walked.payload_lens.get(i).copied().unwrap_or(0)).min(walked.payload_slot);
        let slot = i.saturating_mul(walked.payload_slot);
        layout.seen(at + HEADER_LEN as u64, walked.payloads.get(slot..slot + kept).unwrap_or_default());
        at += HEADER_LEN as u64 + u64::from(FrameHeader::parse(header).len);
    }
    layout.seen(len.saturating_sub(tail.len() as u64), tail);
    if layout.pos < len {
        layout.out.push(Piece::Unseen(len - layout.pos));
    }
}

/// Pieces laid out so far, up to `pos`.
struct Layout<'a, 'o> {
    pos: u64,
    len: u64,
    out: &'o mut Vec<Piece<'a>>,
}

impl<'a> Layout<'a, '_> {
    /// `bytes` seen at offset `at`: what lies past `pos` (and before the syscall's end) is laid
    /// out, after the unseen bytes before it.
    fn seen(&mut self, at: u64, bytes: &'a [u8]) {
        let end = at.saturating_add(bytes.len() as u64).min(self.len);
        if end <= self.pos || at >= end {
            return;
        }
        let from = usize::try_from(self.pos.saturating_sub(at)).unwrap_or(usize::MAX);
        let to = usize::try_from(end - at).unwrap_or(usize::MAX);
        let Some(new) = bytes.get(from..to) else { return };
        if at > self.pos {
            self.out.push(Piece::Unseen(at - self.pos));
        }
        self.out.push(Piece::Seen(new));
        self.pos = end;
    }
}

#[cfg(test)]
mod tests;
