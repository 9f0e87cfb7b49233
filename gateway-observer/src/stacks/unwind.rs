//! A stopped thread's call chain from its registers and a copy of its stack, through each
//! module's `.eh_frame` (framehop): frames of code built without frame pointers (glibc, CPython,
//! a JVM's C++) unwind as well as any other. Only the stack pointer and program counter are
//! known (`/proc/TID/syscall`), not the frame pointer. Functions that keep one (`push rbp; mov
//! rbp, rsp`) need it to find their caller, and the leaf that blocked (glibc's, without frame
//! pointers) left the live value in the register, not on the stack; a frame that saved and
//! restored a caller's scratch `rbp` hands on a value that is no frame pointer either. Where the
//! chain stops or leaves the code for want of it, the frame pointer is found on the stack
//! ([`frame_records`]) and the frame unwound again. A chain never goes on past an address
//! outside the process's code.
//!
//! A JIT's code (V8's JavaScript functions) lies in memory no file backs, so no table covers it;
//! V8 keeps frame pointers in it. A return address into code the process's perf map names is
//! followed like any other: framehop unwinds an address no module holds by frame pointer (the
//! saved `rbp` and the return address above it, each frame higher on the stack than the last),
//! until a return address lands in a file's code again and its tables take over.

use std::{ops::Range, sync::Arc};

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

/// framehop's rule cache, for one unwind: its entries are told apart by a global 16-bit count
/// of module sets, which a daemon building a module set per unwind would wrap around (a stale
/// rule for another process's code at the same address).
pub struct Unwinder {
    cache: CacheX86_64,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self { cache: CacheX86_64::new() }
    }
}

/// Where a mapping's unwind tables come from: the mapping that holds an address (its range)
/// and its file's tables, if it has some; `None` outside any file's code.
pub type TablesAt<'a> = dyn FnMut(u64) -> Option<(Range<u64>, Option<MappedTables>)> + 'a;

/// framehop's modules of one process, each added the first time a frame (or a frame record
/// looked for on the stack) is in it: files no chain passes through are never parsed.
struct Modules<'a, 'b> {
    tables_at: &'a mut TablesAt<'b>,
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    /// Mappings looked at, and whether their file has tables.
    seen: Vec<(Range<u64>, bool)>,
    /// The code the perf map names: followed by frame pointer.
    jit: &'a [Range<u64>],
}

impl Modules<'_, '_> {
    /// Whether `addr` is in a file's code with unwind tables, its module added if it was not.
    fn covers(&mut self, addr: u64) -> bool {
        if let Some((_, has_tables)) = self.seen.iter().find(|(range, _)| range.contains(&addr)) {
            return *has_tables;
        }
        let Some((range, tables)) = (self.tables_at)(addr) else { return false };
        let has_tables = tables.is_some();
        if let Some(m) = tables {
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
            self.unwinder.add_module(Module::new(m.path, m.range, m.base, info));
        }
        self.seen.push((range, has_tables));
        has_tables
    }

    /// Where a chain may go on: a file's code, or a JIT's (by frame pointer).
    fn goes_on(&mut self, addr: u64) -> bool {
        self.covers(addr) || in_jit(self.jit, addr)
    }
}

impl Unwinder {
    /// The frames of the thread that stopped at `stopped`, innermost first. `tables_at` gives
    /// the process's code, `jit` the code the perf map names, sorted and disjoint
    /// ([`crate::symbolize::Image::jit_code`]). A chain cut short (unknown code, a frame past the
    /// copy) ends with the frames found so far.
    pub fn unwind(
        &mut self,
        tables_at: &mut TablesAt<'_>,
        jit: &[Range<u64>],
        stopped: &Stopped,
        stack: &StackCopy,
    ) -> Vec<Frame> {
        self.cache = CacheX86_64::new();
        let mut modules = Modules { tables_at, unwinder: UnwinderX86_64::new(), seen: Vec::new(), jit };
        modules.covers(stopped.pc);
        let mut regs = UnwindRegsX86_64::new(stopped.pc, stopped.sp, 0);
        let mut read = |addr: u64| stack.word(addr).ok_or(());
        let mut address = FrameAddress::from_instruction_pointer(stopped.pc);
        let mut out = vec![(stopped.pc, false)];
        let mut guesses = 0;
        while out.len() < MAX_FRAMES {
            let before = regs;
            let next = modules.unwinder.unwind_frame(address, &mut regs, &mut self.cache, &mut read);
            match next {
                Ok(Some(ret)) if modules.goes_on(ret) => match FrameAddress::from_return_address(ret) {
                    Some(next) => {
                        address = next;
                        out.push((ret, true));
                    }
                    None => break,
                },
                // The chain ended or left the code: the frame pointer the frame needed was unknown
                // (framehop ends a chain at zero) or a caller's scratch value, saved by a callee
                // that keeps frame pointers. Found on the stack instead, the frame is tried again.
                _ if guesses < MAX_GUESSES => {
                    guesses += 1;
                    // Slots that look like frame records, lowest first; the first from which the
                    // chain goes on through code for a few frames wins (a stale return address
                    // left in a frame's locals leads out of the code soon). Frame records are
                    // looked for only by return addresses into files' code: a JIT's leave stale
                    // ones.
                    let candidates: Vec<u64> =
                        frame_records(stack, before.sp(), |addr| modules.covers(addr)).take(MAX_CANDIDATES).collect();
                    let mut best: Option<(usize, u64)> = None;
                    for bp in candidates {
                        let mut trial = before;
                        trial.set_bp(bp);
                        let depth = self.depth_from(&mut modules, address, trial, &mut read);
                        if best.is_none_or(|(most, _)| depth > most) {
                            best = Some((depth, bp));
                        }
                        if depth >= CHECK_DEPTH {
                            break;
                        }
                    }
                    let Some((_, bp)) = best.filter(|(depth, bp)| *depth > 0 && *bp != before.bp()) else { break };
                    regs = before;
                    regs.set_bp(bp);
                }
                _ => break,
            }
        }
        out
    }

    /// Frames the chain goes on through code from `address` with `regs`, up to [`CHECK_DEPTH`]
    /// (a chain that ends properly counts as going all the way).
    fn depth_from(
        &mut self,
        modules: &mut Modules<'_, '_>,
        mut address: FrameAddress,
        mut regs: UnwindRegsX86_64,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> usize {
        for depth in 0..CHECK_DEPTH {
            match modules.unwinder.unwind_frame(address, &mut regs, &mut self.cache, read) {
                Ok(Some(ret)) if modules.goes_on(ret) => match FrameAddress::from_return_address(ret) {
                    Some(next) => address = next,
                    None => return depth,
                },
                Ok(None) if depth > 0 => return CHECK_DEPTH,
                _ => return depth,
            }
        }
        CHECK_DEPTH
    }
}

/// Whether `addr` is in one of `jit`'s sorted, disjoint ranges.
fn in_jit(jit: &[std::ops::Range<u64>], addr: u64) -> bool {
    let after = jit.partition_point(|range| range.start <= addr);
    after.checked_sub(1).is_some_and(|at| jit[at].contains(&addr))
}

/// Frame records tried for one frame.
const MAX_CANDIDATES: usize = 16;
/// Frames a guessed frame pointer must lead through to be taken at once.
const CHECK_DEPTH: usize = 4;

/// Frame pointers looked for on the stack in one unwind.
const MAX_GUESSES: usize = 4;

/// Slots at or above `sp` that hold a frame record, lowest first: a saved frame pointer, then a
/// return address into code. The one `rbp` pointed at in the frame that owns `sp` is among them
/// (the record sits at the top of the frame); so may be stale return addresses in its locals. The
/// saved value itself says nothing: a caller without frame pointers keeps anything in `rbp`.
pub fn frame_records<'a>(
    stack: &'a StackCopy,
    sp: u64,
    mut is_code: impl FnMut(u64) -> bool + 'a,
) -> impl Iterator<Item = u64> + 'a {
    let end = stack.sp.saturating_add(stack.bytes.len() as u64);
    (sp.next_multiple_of(8)..end)
        .step_by(8)
        .filter(move |&at| at.checked_add(8).and_then(|ret| stack.word(ret)).is_some_and(&mut is_code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_records_are_return_addresses_into_code_above_sp() {
        let code = 0x5000..0x6000;
        let is_code = |a: u64| code.contains(&a);
        let sp = 0x1000;
        // Words from sp: two locals, then the record at 0x1010 (any saved value, a return address).
        let words: [u64; 5] = [7, 0x9000, 0x1234, 0x5200, 0];
        let bytes = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let stack = StackCopy { sp, bytes };
        assert_eq!(frame_records(&stack, sp, is_code).collect::<Vec<_>>(), vec![0x1010]);
        assert_eq!(frame_records(&stack, 0x1011, is_code).next(), None, "aligned, and above sp only");
        let not_code = |_: u64| false;
        assert_eq!(frame_records(&stack, sp, not_code).next(), None);
    }

    #[test]
    fn jit_code_is_found_in_sorted_disjoint_ranges() {
        let jit = [0x1000..0x1100, 0x2000..0x2008, 0x7f58_5c00_5900..0x7f58_5c00_5a04];
        for (addr, inside) in
            [(0x1000, true), (0x10ff, true), (0x1100, false), (0x1fff, false), (0x2004, true), (0x7f58_5c00_5a00, true)]
        {
            assert_eq!(in_jit(&jit, addr), inside, "{addr:#x}");
        }
        assert!(!in_jit(&jit, 0) && !in_jit(&jit, u64::MAX) && !in_jit(&[], 0x1000));
    }
}
