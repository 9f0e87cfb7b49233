//! The `THREADS` array, mmapped: userspace reads every slot each tick with plain memory reads
//! (no syscall per thread), and clears or fills a slot the same way.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
};

use aya::maps::MapData;
use gateway_observer_common::ThreadState;

/// Size of one array element: the kernel rounds the value size up to 8 bytes.
const ELEMENT: usize = std::mem::size_of::<ThreadState>().next_multiple_of(8);

pub struct ThreadSlots {
    base: NonNull<u8>,
    len: usize,
    slots: u32,
}

// SAFETY: the mapping is owned by this struct and only reached through &self/&mut self.
unsafe impl Send for ThreadSlots {}

impl ThreadSlots {
    pub fn map(data: &MapData, slots: u32) -> std::io::Result<Self> {
        let page = 4096;
        let len = (ELEMENT * slots as usize).next_multiple_of(page);
        let fd = data.fd().as_fd().as_raw_fd();
        // SAFETY: a shared mapping of a BPF_F_MMAPABLE array map of `slots` elements; the length
        // is what the kernel allows for it. The mapping outlives nothing: Drop unmaps it.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(Self { base, len, slots })
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    fn slot_ptr(&self, slot: u32) -> Option<*mut ThreadState> {
        (slot < self.slots).then(|| {
            // SAFETY: slot < slots, so the element lies inside the mapping.
            unsafe { self.base.as_ptr().add(slot as usize * ELEMENT).cast::<ThreadState>() }
        })
    }

    /// A copy of one slot. The kernel may be updating it meanwhile: each field is read whole
    /// (aligned), and totals only grow, so a copy is at worst a moment old.
    pub fn read(&self, slot: u32) -> Option<ThreadState> {
        // SAFETY: in bounds and aligned (page-aligned base, 8-byte multiple elements);
        // ThreadState is plain integers, valid for any bits; volatile because the kernel writes.
        self.slot_ptr(slot).map(|p| unsafe { std::ptr::read_volatile(p) })
    }

    /// The tid in one slot (0 when free), without copying the rest: the tick looks at every slot,
    /// and copying all 16,384 whole (13 MB) was most of an idle daemon's CPU.
    pub fn tid(&self, slot: u32) -> Option<u32> {
        // SAFETY: as in read, for the one aligned u32 field.
        self.slot_ptr(slot).map(|p| unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*p).tid)) })
    }

    pub fn write(&mut self, slot: u32, state: ThreadState) {
        if let Some(p) = self.slot_ptr(slot) {
            // SAFETY: as in read; a slot is written here only while no TRACKED entry points at it
            // (free, or being handed to a thread before TRACKED is set).
            unsafe { std::ptr::write_volatile(p, state) };
        }
    }
}

impl Drop for ThreadSlots {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
