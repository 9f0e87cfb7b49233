//! The visible parts of one segment, as the parser walks it.

use crate::exchange::Segment;

/// Bytes of a segment's end the end-of-chunked-body check looks at (`X0\r\n\r\n`).
const SUFFIX: usize = 6;

/// The visible parts of one segment as the parser walks it: `vis` now, then `gap` unseen bytes,
/// then `rest`.
pub struct Cursor<'a> {
    pub(super) ts_ns: u64,
    pub(super) tid: u32,
    pub(super) queued_since_ns: Option<u64>,
    pub(super) vis: &'a [u8],
    pub(super) gap: u64,
    pub(super) rest: &'a [u8],
    /// The segment's last (at most [`SUFFIX`]) bytes, when visible, in two parts (of the head
    /// and of the rest): the end-of-chunked-body check, put together only when it is made
    /// (rarely), not for every segment.
    suffix: (&'a [u8], &'a [u8]),
    pub(super) fresh: bool,
    pub(super) end_checked: bool,
}

impl<'a> Cursor<'a> {
    pub fn new(seg: &Segment<'a>) -> Self {
        let len = seg.len;
        // Clamp what the kernel claims to what the length allows: head ≤ len, tail ≤ len.
        let head = seg.head.get(..usize::try_from(len).unwrap_or(usize::MAX).min(seg.head.len())).unwrap_or_default();
        let tail_len = seg.tail.len().min(usize::try_from(len).unwrap_or(usize::MAX));
        let tail = seg.tail.get(seg.tail.len().saturating_sub(tail_len)..).unwrap_or_default();
        let head_len = head.len() as u64;
        let tail_start = len.saturating_sub(tail.len() as u64);
        let (gap, rest) = if tail_start <= head_len {
            // Tail overlaps or adjoins the head: the whole segment is visible.
            let overlap = usize::try_from(head_len.saturating_sub(tail_start)).unwrap_or(usize::MAX);
            (0, tail.get(overlap..).unwrap_or_default())
        } else {
            (tail_start.saturating_sub(head_len), tail)
        };
        let mut suffix: (&[u8], &[u8]) = (&[], &[]);
        if gap == 0 || rest.len() >= SUFFIX {
            // The last bytes of head ++ rest.
            let take_rest = rest.len().min(SUFFIX);
            let take_head = if gap == 0 { head.len().min(SUFFIX - take_rest) } else { 0 };
            let from_head = head.get(head.len() - take_head..).unwrap_or_default();
            let from_rest = rest.get(rest.len() - take_rest..).unwrap_or_default();
            suffix = (from_head, from_rest);
        }
        Self {
            ts_ns: seg.ts_ns,
            tid: seg.tid,
            queued_since_ns: seg.queued_since_ns,
            vis: head,
            gap,
            rest,
            suffix,
            fresh: true,
            end_checked: false,
        }
    }

    /// The segment as the kernel showed it: visible head, unseen bytes, visible tail.
    pub(crate) fn parts(&self) -> (&'a [u8], u64, &'a [u8]) {
        (self.vis, self.gap, self.rest)
    }

    pub(super) fn remaining(&self) -> u64 {
        (self.vis.len() as u64).saturating_add(self.gap).saturating_add(self.rest.len() as u64)
    }

    /// The segment visibly ends with the last chunk of a chunked body (`0\r\n\r\n`, not preceded
    /// by another hex digit).
    pub(super) fn ends_with_last_chunk(&self) -> bool {
        let mut suffix = [0u8; SUFFIX];
        let (from_head, from_rest) = self.suffix;
        let len = from_head.len() + from_rest.len();
        for (slot, &b) in suffix.iter_mut().zip(from_head.iter().chain(from_rest)) {
            *slot = b;
        }
        let s = suffix.get(..len.min(SUFFIX)).unwrap_or_default();
        match s.len() {
            6 => s.ends_with(b"0\r\n\r\n") && s.first().is_some_and(|b| !b.is_ascii_hexdigit()),
            5 => s == b"0\r\n\r\n",
            _ => false,
        }
    }
}
