//! HTTP/2 frame headers past a transfer's copied head. A gateway writes several streams' frames
//! in one syscall; userspace sees only the first bytes, and a frame header past them would lose
//! its walk. Here each header is read where the one before says the next starts, for HTTP/2
//! connections only, with one user read each (two for a frame whose payload userspace needs).
//!
//! Written for the verifier: no offset of the walk sizes a copy or indexes the record (a payload
//! start is always copied whole, its valid length kept beside it), so the states of different
//! iterations prune each other; with a running offset into a packed payload area, or the head's
//! copy indexed by the offset, it gave up after a million instructions.

use aya_ebpf::helpers::generated::{bpf_probe_read_kernel, bpf_probe_read_user};
use gateway_observer_common::{
    DATA_HEAD_BYTES, H2_NEXT_IN_HEADER, H2_NEXT_PARTIAL, H2_NEXT_UNKNOWN, H2_WALK_FRAMES, H2_WALK_PAYLOAD_BYTES,
    H2Walk, h2_next_partial, h2_partial_seen, h2_split_length,
};

pub const HEADER: u64 = 9;
const DATA: u8 = 0;
/// CONTINUATION, the last frame type RFC 9113 defines: a larger one means the walk is off.
const LAST_TYPE: u8 = 9;
/// Headers that fit whole in the head.
const HEAD_FRAMES: u32 = (DATA_HEAD_BYTES / HEADER as usize) as u32;

/// A frame header's payload length, or None when it cannot be one (an unknown type, the
/// reserved stream bit).
#[inline(always)]
fn frame_len(header: &[u8; HEADER as usize]) -> Option<u64> {
    if header[3] > LAST_TYPE || header[5] & 0x80 != 0 {
        return None;
    }
    Some((u64::from(header[0]) << 16) | (u64::from(header[1]) << 8) | u64::from(header[2]))
}

/// The payload length of the frame whose header is at user address `addr`; None when it cannot
/// be read or is not a header. Read into two words: a byte array local is zeroed by a byte loop
/// the verifier walks at every frame.
#[inline(always)]
fn payload_len_at(addr: u64) -> Option<u64> {
    let mut words = [0u64; 2];
    // SAFETY: copies 9 bytes of user memory into a 16-byte local.
    if unsafe { bpf_probe_read_user(words.as_mut_ptr().cast(), HEADER as u32, addr as *const _) } != 0 {
        return None;
    }
    let byte = |i: u32| ((words[0] >> (8 * i)) & 0xff) as u8;
    frame_len(&[byte(0), byte(1), byte(2), byte(3), byte(4), byte(5), 0, 0, 0])
}

/// The buffers of a transfer, in order, as the walk reaches them: one buffer, or the entries of
/// an iovec array (in user memory, or the kernel's copy inside TCP), each read when the walk
/// gets to it. nginx writes each HTTP/2 frame header and each payload as an iovec of its own.
#[derive(Clone, Copy)]
pub struct Buffers {
    /// The iovec array (0: a single buffer), its entries, and whether it is the kernel's copy.
    pub iov: u64,
    pub count: u64,
    pub kernel_copy: bool,
    /// The buffer the walk is in: its index, where it starts among the bytes moved, its
    /// address and length.
    index: u64,
    start: u64,
    base: u64,
    len: u64,
}

impl Buffers {
    /// Starting at the first buffer, `first_len` bytes at `base`.
    #[inline(always)]
    pub fn new(base: u64, first_len: u64, iov: u64, count: u64, kernel_copy: bool) -> Self {
        Self { iov, count, kernel_copy, index: 0, start: 0, base, len: first_len }
    }

    #[inline(always)]
    fn end(&self) -> u64 {
        self.start + self.len
    }

    /// The user address of byte `at` of the transfer, inside the current buffer.
    #[inline(always)]
    pub fn addr(&self, at: u64) -> u64 {
        self.base + (at - self.start)
    }

    /// On to the next buffer; false when there is none (or its entry cannot be read).
    #[inline(always)]
    fn next(&mut self) -> bool {
        let index = self.index + 1;
        if self.iov == 0 || index >= self.count {
            return false;
        }
        let mut entry = [0u64; 2];
        let dst = entry.as_mut_ptr().cast();
        let src = (self.iov + index * 16) as *const _;
        // SAFETY: 16 bytes (base, len) of an iovec entry into a local.
        let failed = unsafe {
            if self.kernel_copy { bpf_probe_read_kernel(dst, 16, src) } else { bpf_probe_read_user(dst, 16, src) }
        } != 0;
        if failed {
            return false;
        }
        self.start += self.len;
        self.index = index;
        self.base = entry[0];
        self.len = entry[1];
        true
    }
}

/// How a walk ended.
#[derive(Clone, Copy)]
pub enum WalkEnd {
    /// At the transfer's end: where the frame after the last one walked starts.
    Reached(u64),
    /// At the bound, the next header at `at` of `buffers`: a continuation can walk on from there.
    Bound { at: u64, buffers: Buffers },
    /// At the transfer's end inside the header at `at` of `buffers`, its first bytes in the
    /// buffer: `next_after_cut_header` says where the next one starts.
    Cut { at: u64, buffers: Buffers },
    /// Before the end, at a header it could not read or that is not one.
    Stopped,
}

impl WalkEnd {
    #[inline(always)]
    pub fn reached(self) -> Option<u64> {
        match self {
            Self::Reached(at) => Some(at),
            _ => None,
        }
    }
}

/// Walks the frames of the `len` bytes a transfer moved (`buffers`) from the frame boundary
/// `origin`: through the frames that end inside the first `copied` bytes (the head, in the first
/// buffer), then keeping the headers of the others with the start of their payloads but DATA's,
/// from whichever buffer holds them. Stops at the bound, at a header that is not one or that
/// two buffers share, or at the transfer's end. `SPLIT_HEADERS`: a header the transfer's end
/// cuts before its length is whole is a `Cut` too (6.1's verifier, for the `tcp_*msg` fallback,
/// gave up on the extra branches: that fallback has no continuation to read it anyway).
///
/// # Safety
/// `walk` points at a reserved ring-buffer record.
#[inline(always)]
pub unsafe fn walk_frames<const SPLIT_HEADERS: bool>(
    walk: *mut H2Walk,
    mut buffers: Buffers,
    len: u64,
    origin: u64,
    copied: u64,
) -> WalkEnd {
    // SAFETY: the caller's.
    let walk = unsafe { &mut *walk };
    walk.origin = origin as u32;
    walk.start = 0;
    walk.frames = 0;
    walk.continued = 0;
    walk._pad = [0; 6];
    let mut at = origin;
    let mut step = 0;
    while step < HEAD_FRAMES && at + HEADER <= copied {
        step += 1;
        let Some(len) = payload_len_at(buffers.base + at) else { return WalkEnd::Stopped };
        if at + HEADER + len > copied {
            // Its payload runs past the head: kept below, with its start.
            break;
        }
        at += HEADER + len;
    }
    walk.start = at as u32;
    let mut frames = 0;
    // One iteration a frame, its moves to later buffers written out rather than looped over: a
    // second loop counter multiplied the verifier's states past its limit.
    while frames < H2_WALK_FRAMES {
        // The header may lie a buffer or two on (nginx: past a DATA payload's buffer).
        if at >= buffers.end() && !(at < len && buffers.next()) {
            break;
        }
        if at >= buffers.end() && !(at < len && buffers.next()) {
            break;
        }
        if at + HEADER > len || at + HEADER > buffers.end() {
            // The transfer's end, or a header two buffers share (or further on).
            break;
        }
        let (Some(header), Some(kept), Some(payload)) =
            (walk.headers.get_mut(frames), walk.payload_lens.get_mut(frames), walk.payloads.get_mut(frames))
        else {
            break;
        };
        // SAFETY: copies 9 bytes of user memory into the record.
        if unsafe { bpf_probe_read_user(header.as_mut_ptr().cast(), HEADER as u32, buffers.addr(at) as *const _) } != 0
        {
            break;
        }
        let Some(frame_len) = frame_len(header) else { break };
        *kept = 0;
        let payload_at = at + HEADER;
        if header[3] != DATA && frame_len > 0 && payload_at < len {
            if payload_at >= buffers.end() {
                // nginx: the payload in a buffer of its own.
                buffers.next();
            }
            if payload_at < buffers.end() {
                // The whole slot: the bytes after the payload (or the buffer) are never looked at.
                let size = H2_WALK_PAYLOAD_BYTES as u32;
                let src = buffers.addr(payload_at) as *const _;
                // SAFETY: the slot's size, from user memory into the record.
                if unsafe { bpf_probe_read_user(payload.as_mut_ptr().cast(), size, src) } == 0 {
                    let room = buffers.end() - payload_at;
                    *kept = frame_len.min(room).min(H2_WALK_PAYLOAD_BYTES as u64) as u8;
                }
            }
        }
        frames += 1;
        at = payload_at + frame_len;
    }
    walk.frames = frames as u8;
    if at + HEADER > len {
        // The cut header's length is read elsewhere (`next_after_cut_header`): here, after an
        // unrolled walk, every extra read is verified once per frame the walk may have stopped at.
        let in_buffer = if SPLIT_HEADERS {
            at < len && at + (len - at).min(LENGTH_BYTES) <= buffers.end()
        } else {
            at + LENGTH_BYTES <= len && at + LENGTH_BYTES <= buffers.end()
        };
        if in_buffer { WalkEnd::Cut { at, buffers } } else { WalkEnd::Reached(at) }
    } else if frames == H2_WALK_FRAMES {
        WalkEnd::Bound { at, buffers }
    } else {
        WalkEnd::Stopped
    }
}

/// `SockState::h2_next` after a transfer of `len` bytes no longer than the head (its headers
/// need no record of their own, but the connection's place in its frames moves on), whose
/// first `avail` bytes are at `base`, walking from the frame boundary `origin`. `SPLIT_HEADERS`:
/// as `walk_frames`'.
#[inline(always)]
pub fn next_after_head<const SPLIT_HEADERS: bool>(base: u64, avail: u64, origin: u64, len: u64) -> u32 {
    let mut at = origin;
    let mut step = 0;
    while step < HEAD_FRAMES && at + HEADER <= avail {
        step += 1;
        let Some(payload) = payload_len_at(base + at) else { return H2_NEXT_UNKNOWN };
        at += HEADER + payload;
    }
    if at + HEADER <= avail {
        // Past the bound.
        return H2_NEXT_UNKNOWN;
    }
    let in_buffer = if SPLIT_HEADERS {
        at < avail && at + (len - at).min(LENGTH_BYTES) <= avail
    } else {
        at + LENGTH_BYTES <= avail
    };
    if in_buffer {
        return next_after_cut_header::<SPLIT_HEADERS>(base + at, at, len);
    }
    next_origin(Some(at), len)
}

/// Frames stepped over in a gathered transfer (`next_after_gathered`) before its place is left
/// unknown.
const GATHERED_FRAMES: u32 = 16;

/// `next_after_head` for a transfer gathered whole into `bytes` (kernel memory,
/// `transfer_buffers::gather_small_transfer`): where the next transfer's first header is, or
/// unknown past `GATHERED_FRAMES` or when the transfer ends inside a header.
#[inline(always)]
pub fn next_after_gathered(bytes: &[u8; 2 * DATA_HEAD_BYTES], origin: u64, len: u64) -> u32 {
    let mut at = origin;
    let mut step = 0;
    while step < GATHERED_FRAMES && at + HEADER <= len {
        step += 1;
        let i = (at & (DATA_HEAD_BYTES as u64 - 1)) as usize;
        let (Some(&b0), Some(&b1), Some(&b2)) = (bytes.get(i), bytes.get(i + 1), bytes.get(i + 2)) else {
            return H2_NEXT_UNKNOWN;
        };
        at += HEADER + ((u64::from(b0) << 16) | (u64::from(b1) << 8) | u64::from(b2));
    }
    if at < len {
        return H2_NEXT_UNKNOWN;
    }
    next_origin(Some(at), len)
}

/// A frame header's first bytes: its payload length.
const LENGTH_BYTES: u64 = 3;

/// `SockState::h2_next` after a transfer of `len` bytes that ended inside the frame header at
/// `at` (user address `addr`): a gateway reads into what room its buffer has left, so a read may
/// end anywhere. With the header's 3 length bytes moved, where the frame after it starts; with
/// 1 or 2, those bytes (`H2_NEXT_PARTIAL`), which the next transfer's first bytes complete.
/// `SPLIT_HEADERS`: as `walk_frames'`; without, the caller knows the 3 bytes were moved.
#[inline(always)]
pub fn next_after_cut_header<const SPLIT_HEADERS: bool>(addr: u64, at: u64, len: u64) -> u32 {
    // One read of 3 bytes whatever was moved (a second read, after an unrolled walk, is verified
    // once per frame the walk may have stopped at): bytes past the transfer are not used, and
    // where they cannot be read the place is unknown.
    let Some(length) = user_length(addr) else { return H2_NEXT_UNKNOWN };
    match len - at {
        1 if SPLIT_HEADERS => h2_next_partial(1, length >> 16),
        2 if SPLIT_HEADERS => h2_next_partial(2, length >> 8),
        _ => next_origin_in_header(at + HEADER + u64::from(length), len),
    }
}

/// Where the first whole frame header of a transfer is, when the one before ended inside a
/// header before its length was whole (`next`, with `H2_NEXT_PARTIAL`): its first `avail` bytes,
/// at `base`, complete that length. `NO_ORIGIN` when they cannot.
#[inline(always)]
pub fn origin_past_split_header(next: u32, base: u64, avail: u64) -> u64 {
    let seen = u64::from(h2_partial_seen(next));
    if seen == 0 || seen >= LENGTH_BYTES || avail < LENGTH_BYTES - seen {
        return NO_ORIGIN;
    }
    // The 3 bytes from the transfer's start: those past the header's length are not used.
    let Some(bytes) = user_length(base) else { return NO_ORIGIN };
    let rest = bytes >> (8 * seen);
    HEADER - seen + u64::from(h2_split_length(next, rest))
}

/// An origin past any transfer: nothing is walked, and the connection's place becomes unknown.
pub const NO_ORIGIN: u64 = 1 << 40;

/// The 3 bytes at user address `addr`, as a big-endian number (a frame header's length field).
#[inline(always)]
fn user_length(addr: u64) -> Option<u32> {
    let mut word = 0u32;
    // SAFETY: copies 3 bytes of user memory into a 4-byte local.
    if unsafe { bpf_probe_read_user((&raw mut word).cast(), LENGTH_BYTES as u32, addr as *const _) } != 0 {
        return None;
    }
    let bytes = word.to_le_bytes();
    Some((u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]))
}

/// `SockState::h2_next` after a transfer of `len` bytes whose walk ended at `end`: the next
/// transfer starts `end - len` bytes before its first header, unless the walk stopped early or
/// its last header lies in bytes it did not read (a later buffer, or its length cut by the transfer's end).
#[inline(always)]
pub fn next_origin(end: Option<u64>, len: u64) -> u32 {
    match end {
        Some(end) if end >= len && end - len < u64::from(H2_NEXT_PARTIAL) => (end - len) as u32,
        _ => H2_NEXT_UNKNOWN,
    }
}

/// `next_origin` for a transfer that ended inside the header of the frame before `end`.
#[inline(always)]
pub fn next_origin_in_header(end: u64, len: u64) -> u32 {
    match next_origin(Some(end), len) {
        H2_NEXT_UNKNOWN => H2_NEXT_UNKNOWN,
        next => next | H2_NEXT_IN_HEADER,
    }
}
