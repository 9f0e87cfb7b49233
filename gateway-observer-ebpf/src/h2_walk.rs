//! HTTP/2 frame headers past a transfer's copied head. A gateway writes several streams' frames
//! in one syscall; userspace sees only the first bytes, and a frame header past them would lose
//! its walk. Here each header is read where the one before says the next starts, for HTTP/2
//! connections only, with one user read each (two for a frame whose payload userspace needs).
//!
//! Written for the verifier: no offset of the walk sizes a copy or indexes the record (a payload
//! start is always copied whole, its valid length kept beside it), so the states of different
//! iterations prune each other; with a running offset into a packed payload area, or the head's
//! copy indexed by the offset, it gave up after a million instructions.

use aya_ebpf::helpers::generated::bpf_probe_read_user;
use gateway_observer_common::{DATA_HEAD_BYTES, H2_NEXT_UNKNOWN, H2_WALK_FRAMES, H2_WALK_PAYLOAD_BYTES, H2Walk};

const HEADER: u64 = 9;
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
/// be read or is not a header.
#[inline(always)]
fn payload_len_at(addr: u64) -> Option<u64> {
    let mut header = [0u8; HEADER as usize];
    // SAFETY: copies 9 bytes of user memory into a local.
    if unsafe { bpf_probe_read_user(header.as_mut_ptr().cast(), HEADER as u32, addr as *const _) } != 0 {
        return None;
    }
    frame_len(&header)
}

/// Walks the frames of the `avail` bytes at `base` from the frame boundary `origin`: through the
/// frames that end inside the first `copied` bytes (the head), then keeping the headers of the
/// others with the start of their payloads but DATA's. Stops at the bound, at a header that is not one, or at the end of
/// the buffer. Returns where the frame after the last one walked starts, when the walk reached
/// the buffer's end (None when it stopped before: the bound, a header that is not one).
///
/// # Safety
/// `walk` points at a reserved ring-buffer record.
#[inline(always)]
pub unsafe fn walk_frames(walk: *mut H2Walk, base: u64, avail: u64, origin: u64, copied: u64) -> Option<u64> {
    // SAFETY: the caller's.
    let walk = unsafe { &mut *walk };
    walk.origin = origin as u32;
    walk.start = 0;
    walk.frames = 0;
    walk._pad = [0; 7];
    let mut at = origin;
    let mut step = 0;
    while step < HEAD_FRAMES && at + HEADER <= copied {
        step += 1;
        let len = payload_len_at(base + at)?;
        if at + HEADER + len > copied {
            // Its payload runs past the head: kept below, with its start.
            break;
        }
        at += HEADER + len;
    }
    walk.start = at as u32;
    let mut frames = 0;
    while frames < H2_WALK_FRAMES && at + HEADER <= avail {
        let (Some(header), Some(kept), Some(payload)) =
            (walk.headers.get_mut(frames), walk.payload_lens.get_mut(frames), walk.payloads.get_mut(frames))
        else {
            break;
        };
        // SAFETY: copies 9 bytes of user memory into the record.
        if unsafe { bpf_probe_read_user(header.as_mut_ptr().cast(), HEADER as u32, (base + at) as *const _) } != 0 {
            break;
        }
        let Some(len) = frame_len(header) else { break };
        *kept = 0;
        let payload_at = at + HEADER;
        if header[3] != DATA && payload_at < avail && len > 0 {
            // The whole slot: the bytes after the payload (or the buffer) are never looked at.
            let size = H2_WALK_PAYLOAD_BYTES as u32;
            // SAFETY: the slot's size, from user memory into the record.
            if unsafe { bpf_probe_read_user(payload.as_mut_ptr().cast(), size, (base + payload_at) as *const _) } == 0 {
                *kept = len.min(avail - payload_at).min(H2_WALK_PAYLOAD_BYTES as u64) as u8;
            }
        }
        frames += 1;
        at = payload_at + len;
    }
    walk.frames = frames as u8;
    (at + HEADER > avail).then_some(at)
}

/// Where the frame after those in the `avail` bytes at `base` starts, walking from the frame
/// boundary `origin` (a transfer no longer than the head: its headers need no record of their
/// own, but the connection's position in its frames moves on). None past the bound or at a
/// header that is not one.
#[inline(always)]
pub fn frames_end(base: u64, avail: u64, origin: u64) -> Option<u64> {
    let mut at = origin;
    let mut step = 0;
    while step < HEAD_FRAMES && at + HEADER <= avail {
        step += 1;
        at += HEADER + payload_len_at(base + at)?;
    }
    (at + HEADER > avail).then_some(at)
}

/// `SockState::h2_next` after a transfer of `len` bytes whose walk ended at `end`: the next
/// transfer starts `end - len` bytes before its first header, unless the walk stopped early or
/// its last header lies in bytes it did not read (a later buffer, or cut by the transfer's end).
#[inline(always)]
pub fn next_origin(end: Option<u64>, len: u64) -> u32 {
    match end {
        Some(end) if end >= len && end - len < u64::from(H2_NEXT_UNKNOWN) => (end - len) as u32,
        _ => H2_NEXT_UNKNOWN,
    }
}
