//! A stopped thread's call chain from its registers and a copy of its stack, through each
//! module's `.eh_frame` (framehop): frames of code built without frame pointers (glibc, CPython,
//! a JVM's C++) unwind as well as any other. Only the stack pointer and program counter are
//! known (`/proc/TID/syscall`), not the frame pointer. Functions that keep one (`push rbp; mov
//! rbp, rsp`) need it to find their caller, and the leaf that blocked (glibc's, without frame
//! pointers) left the live value in the register, not on the stack: where the chain stops for the
//! want of it, the frame pointer is found on the stack ([`frame_pointer_on`]) and the unwind goes
//! on from there.

use std::sync::Arc;

use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};

use super::{live::Stopped, memory::StackCopy};
use crate::symbolize::MappedTables;

/// Frames walked at most: a runaway (looping) unwind stops here.
pub const MAX_FRAMES: usize = 64;

/// One frame: its address, and whether it is a return address (the caller's frames) rather than
/// where the thread stopped.
pub type Frame = (u64, bool);

/// framehop's rule cache, kept across unwinds.
pub struct Unwinder {
    cache: CacheX86_64,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self { cache: CacheX86_64::new() }
    }
}

impl Unwinder {
    /// The frames of the thread that stopped at `stopped`, innermost first. A chain cut short
    /// (unknown code, a frame past the copy) ends with the frames found so far.
    pub fn unwind(&mut self, modules: &[MappedTables], stopped: &Stopped, stack: &StackCopy) -> Vec<Frame> {
        let mut unwinder: UnwinderX86_64<Arc<[u8]>> = UnwinderX86_64::new();
        for m in modules {
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: m.tables.text.clone(),
                got_svma: m.tables.got.clone(),
                eh_frame_svma: m.tables.eh_frame.as_ref().map(|(range, _)| range.clone()),
                eh_frame: m.tables.eh_frame.as_ref().map(|(_, bytes)| bytes.clone()),
                eh_frame_hdr_svma: m.tables.eh_frame_hdr.as_ref().map(|(range, _)| range.clone()),
                eh_frame_hdr: m.tables.eh_frame_hdr.as_ref().map(|(_, bytes)| bytes.clone()),
                ..ExplicitModuleSectionInfo::default()
            };
            unwinder.add_module(Module::new(m.path.clone(), m.range.clone(), m.base, info));
        }
        let is_code = |addr: u64| modules.iter().any(|m| m.range.contains(&addr));
        let mut regs = UnwindRegsX86_64::new(stopped.pc, stopped.sp, 0);
        let mut read = |addr: u64| stack.word(addr).ok_or(());
        let mut address = FrameAddress::from_instruction_pointer(stopped.pc);
        let mut out = vec![(stopped.pc, false)];
        let mut guesses = 0;
        while out.len() < MAX_FRAMES {
            let before = regs;
            match unwinder.unwind_frame(address, &mut regs, &mut self.cache, &mut read) {
                Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                    Some(next) => {
                        address = next;
                        out.push((ret, true));
                    }
                    None => break,
                },
                // framehop ends a chain at a zero frame pointer: ours may only be unknown.
                Ok(None) | Err(_) if before.bp() == 0 && guesses < MAX_GUESSES => {
                    guesses += 1;
                    let Some(bp) = frame_pointer_on(stack, before.sp(), is_code) else { break };
                    regs = before;
                    regs.set_bp(bp);
                }
                Ok(None) | Err(_) => break,
            }
        }
        out
    }
}

/// Frame pointers looked for on the stack in one unwind.
const MAX_GUESSES: usize = 2;

/// The lowest slot at or above `sp` that holds a frame record: a saved frame pointer, then a
/// return address into code. That is what `rbp` held in the frame that owns `sp` (the record sits
/// at the top of the frame, and locals below it seldom hold code addresses). The saved value
/// itself says nothing: a caller without frame pointers keeps anything in `rbp`.
pub fn frame_pointer_on(stack: &StackCopy, sp: u64, is_code: impl Fn(u64) -> bool) -> Option<u64> {
    let end = stack.sp.checked_add(stack.bytes.len() as u64)?;
    (sp.next_multiple_of(8)..end)
        .step_by(8)
        .find(|&at| at.checked_add(8).and_then(|ret| stack.word(ret)).is_some_and(&is_code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_pointer_is_the_first_record_above_sp() {
        let code = 0x5000..0x6000;
        let is_code = |a: u64| code.contains(&a);
        let sp = 0x1000;
        // Words from sp: two locals, then the record at 0x1010 (any saved value, a return address).
        let words: [u64; 5] = [7, 0x9000, 0x1234, 0x5200, 0];
        let bytes = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let stack = StackCopy { sp, bytes };
        assert_eq!(frame_pointer_on(&stack, sp, is_code), Some(0x1010));
        assert_eq!(frame_pointer_on(&stack, 0x1011, is_code), None, "aligned, and above sp only");
        let not_code = |_: u64| false;
        assert_eq!(frame_pointer_on(&stack, sp, not_code), None);
    }
}
