//! A CPython thread's Python frames, read from the process's memory as py-spy reads them, so a
//! stack names the Python function that blocked (`block (gateway.py:49)`), not only the
//! interpreter's C. From `_PyRuntime` (found by the symbolizer in the binary or libpython) to
//! the interpreters, their thread states (the one whose `native_thread_id` is the thread's tid),
//! its current frame (`cframe->current_frame`) and each frame's code object: the function's
//! qualified name, its file and the line of the instruction it is at (from the location table).
//!
//! Only code objects are read (names, file names, line tables: the program's text), never
//! locals, arguments or anything a request put in memory. The memory is the target's and may be
//! anything: every pointer is read with `process_vm_readv` (a bad one is a failed read, not a
//! fault; address arithmetic wraps, so a wild pointer is a failed read too), every walk and
//! string is capped, and a version whose layout is not known ([`layout::of_version`], or 3.13's
//! own table, [`layout::from_debug_offsets`]) gives no frames at all rather than misread ones.
//! A frame's code is named only if its object's type is named `code` (3.13's frames may hold
//! `None` there).

mod layout;
mod linetable;

use std::collections::{HashMap, HashSet};

use layout::{CurrentFrame, Entry, Layout};

/// Interpreters walked (subinterpreters are rare in a gateway).
const MAX_INTERPRETERS: usize = 16;
/// Thread states walked across them (a pool's threads each have one).
const MAX_THREAD_STATES: usize = 4096;
/// Python frames walked per thread: deeper than asyncio's and a web framework's stacks.
pub const MAX_FRAMES: usize = 128;
/// Frames read per thread, named or not (3.12's shim frames, frames whose code is unreadable).
const MAX_FRAMES_READ: usize = 2 * MAX_FRAMES;
/// Characters kept of a name or file name.
pub const MAX_CHARS: usize = 200;
/// Bytes of a line table read; a longer one (a function of thousands of lines) gives no line.
const MAX_LINE_TABLE: usize = 16 << 10;
/// Code objects remembered per request (frames of many threads share them).
const MAX_CODES: usize = 1024;
/// `PyObject.ob_type` and `PyTypeObject.tp_name`, the same in every version read.
const OB_TYPE: u64 = 8;
const TP_NAME: u64 = 24;

/// Reads another process's memory; a failed read is `false`, never a fault.
pub trait Memory {
    /// Fills `buf` from `addr`, all of it or nothing.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    fn u64_at(&self, addr: u64) -> Option<u64> {
        let mut bytes = [0u8; 8];
        self.read(addr, &mut bytes).then(|| u64::from_le_bytes(bytes))
    }
}

/// A live process's memory.
pub struct Process(pub u32);

impl Memory for Process {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        super::memory::read_exact(self.0, addr, buf)
    }
}

/// One Python frame: its name for a stack, and whether it is the outermost of its call into the
/// eval loop (a native `_PyEval_EvalFrameDefault` frame runs it and the frames above it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyFrame {
    pub name: String,
    pub entry: bool,
}

/// What a frame shows of its code object.
#[derive(Debug, Clone)]
struct Code {
    name: String,
    file: String,
    first_line: i32,
    bytecode: u64,
    line_table: Vec<u8>,
}

/// One CPython process's interpreter, for the stacks of one request: its thread states are
/// found once and its code objects read once.
pub struct Interpreter<M> {
    memory: M,
    layout: Layout,
    runtime: u64,
    threads: Option<HashMap<u64, u64>>,
    codes: HashMap<u64, Option<Code>>,
    /// Type objects seen, and whether each is `code`'s.
    code_types: HashMap<u64, bool>,
}

impl<M: Memory> Interpreter<M> {
    /// The interpreter of a CPython of `version` (`Py_Version`) whose `_PyRuntime` is at
    /// `runtime`, if its layout is known.
    pub fn new(memory: M, version: u32, runtime: u64) -> Option<Self> {
        let layout = match layout::of_version(version) {
            Some(listed) => *listed,
            None => {
                let mut table = vec![0u8; layout::DEBUG_OFFSETS_BYTES];
                memory.read(runtime, &mut table).then_some(())?;
                layout::from_debug_offsets(version, &table)?
            }
        };
        Some(Self { memory, layout, runtime, threads: None, codes: HashMap::new(), code_types: HashMap::new() })
    }

    /// Thread `tid`'s Python frames, innermost first; none if it runs no Python (or its state
    /// cannot be read).
    pub fn frames(&mut self, tid: u32) -> Vec<PyFrame> {
        let Some(&tstate) = self.thread_states().get(&u64::from(tid)) else {
            return Vec::new();
        };
        let current = match self.layout.current_frame {
            CurrentFrame::ViaCFrame(cframe_at, current_at) => self
                .memory
                .u64_at(tstate.wrapping_add(cframe_at))
                .filter(|&cframe| cframe != 0)
                .and_then(|cframe| self.memory.u64_at(cframe.wrapping_add(current_at))),
            CurrentFrame::Direct(current_at) => self.memory.u64_at(tstate.wrapping_add(current_at)),
        };
        self.frames_from(current.unwrap_or(0))
    }

    /// The frames from the one at `at` outwards.
    fn frames_from(&mut self, mut at: u64) -> Vec<PyFrame> {
        let l = self.layout;
        let mut frames: Vec<PyFrame> = Vec::new();
        let mut seen = HashSet::new();
        while at != 0 && frames.len() < MAX_FRAMES && seen.len() < MAX_FRAMES_READ && seen.insert(at) {
            let mut frame = [0u8; layout::FRAME_BYTES];
            if !self.memory.read(at, &mut frame) {
                break;
            }
            let word = |offset: u64| read_u64(&frame, offset).unwrap_or(0);
            let owner = frame[l.frame_owner as usize];
            match l.entry {
                Entry::ShimOwner(shim) if owner == shim => {
                    // The frames above the shim were one eval call's.
                    if let Some(last) = frames.last_mut() {
                        last.entry = true;
                    }
                }
                _ => {
                    let entry = matches!(l.entry, Entry::Flag(offset) if frame[offset as usize] != 0);
                    if let Some(name) = self.frame_name(word(l.frame_code), word(l.frame_prev_instr)) {
                        frames.push(PyFrame { name, entry });
                    } else if let Some(last) = frames.last_mut().filter(|_| entry) {
                        last.entry = true;
                    }
                }
            }
            at = word(l.frame_previous);
        }
        frames
    }

    /// Every thread state, by native thread id, walked once per request.
    fn thread_states(&mut self) -> &HashMap<u64, u64> {
        if self.threads.is_none() {
            let threads = self.walk_thread_states();
            self.threads = Some(threads);
        }
        self.threads.get_or_insert_with(HashMap::new)
    }

    fn walk_thread_states(&self) -> HashMap<u64, u64> {
        let l = &self.layout;
        let mut threads = HashMap::new();
        let mut seen = HashSet::new();
        let mut interp = self.memory.u64_at(self.runtime.wrapping_add(l.runtime_interpreters)).unwrap_or(0);
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 || !seen.insert(interp) {
                break;
            }
            let mut tstate = self.memory.u64_at(interp.wrapping_add(l.interp_threads)).unwrap_or(0);
            while tstate != 0 && seen.len() < MAX_THREAD_STATES && seen.insert(tstate) {
                if let Some(tid) = self.memory.u64_at(tstate.wrapping_add(l.tstate_native_thread_id)) {
                    threads.entry(tid).or_insert(tstate);
                }
                tstate = self.memory.u64_at(tstate.wrapping_add(l.tstate_next)).unwrap_or(0);
            }
            interp = self.memory.u64_at(interp.wrapping_add(l.interp_next)).unwrap_or(0);
        }
        threads
    }

    /// `qualname (file:line)` of the frame running `code` at `prev_instr`.
    fn frame_name(&mut self, code: u64, prev_instr: u64) -> Option<String> {
        if code == 0 {
            return None;
        }
        if !self.codes.contains_key(&code) {
            if self.codes.len() >= MAX_CODES {
                self.codes.clear();
            }
            let read = self.read_code(code);
            self.codes.insert(code, read);
        }
        let code = self.codes.get(&code)?.as_ref()?;
        // CPython: an instruction before the first (a frame being set up) is the first line.
        let line = match prev_instr.checked_sub(code.bytecode) {
            Some(offset) => linetable::line_at(&code.line_table, code.first_line, offset),
            None => Some(code.first_line),
        };
        Some(match line {
            Some(line) => format!("{} ({}:{line})", code.name, code.file),
            None => format!("{} ({})", code.name, code.file),
        })
    }

    fn read_code(&mut self, code: u64) -> Option<Code> {
        if !self.is_code(code) {
            return None;
        }
        let l = &self.layout;
        let mut header = vec![0u8; l.code_bytecode as usize];
        if !self.memory.read(code, &mut header) {
            return None;
        }
        let word = |offset: u64| read_u64(&header, offset).filter(|&p| p != 0);
        let first_line = header.get(l.code_first_line as usize..l.code_first_line as usize + 4)?;
        let first_line = i32::from_le_bytes(first_line.try_into().ok()?);
        let name = word(l.code_qualname)
            .and_then(|p| self.string(p))
            .or_else(|| word(l.code_name).and_then(|p| self.string(p)))?;
        let file =
            word(l.code_filename).and_then(|p| self.string(p)).map_or_else(|| "?".to_owned(), |f| short_file(&f));
        let line_table = word(l.code_linetable).and_then(|p| self.bytes(p)).unwrap_or_default();
        Some(Code { name, file, first_line, bytecode: code.wrapping_add(l.code_bytecode), line_table })
    }

    /// Whether `object`'s type is named `code`; each type object is read once.
    fn is_code(&mut self, object: u64) -> bool {
        let Some(kind) = self.memory.u64_at(object.wrapping_add(OB_TYPE)) else { return false };
        if let Some(&is_code) = self.code_types.get(&kind) {
            return is_code;
        }
        let mut name = [0u8; 5];
        let is_code = self
            .memory
            .u64_at(kind.wrapping_add(TP_NAME))
            .is_some_and(|at| self.memory.read(at, &mut name) && &name == b"code\0");
        if self.code_types.len() < MAX_CODES {
            self.code_types.insert(kind, is_code);
        }
        is_code
    }

    /// A `bytes` object's contents, up to [`MAX_LINE_TABLE`].
    fn bytes(&self, object: u64) -> Option<Vec<u8>> {
        let size = self.memory.u64_at(object.wrapping_add(layout::BYTES_SIZE))?;
        let size = usize::try_from(size).ok().filter(|&s| s <= MAX_LINE_TABLE)?;
        let mut data = vec![0u8; size];
        self.memory.read(object.wrapping_add(layout::BYTES_DATA), &mut data).then_some(data)
    }

    /// A compact `str` (every identifier and file name is one), up to [`MAX_CHARS`] characters,
    /// control characters shown as `?`.
    fn string(&self, object: u64) -> Option<String> {
        let mut header = [0u8; (layout::STR_STATE + 4) as usize];
        if !self.memory.read(object, &mut header) {
            return None;
        }
        let length = usize::try_from(read_u64(&header, layout::STR_LENGTH)?).ok()?;
        let state = u32::from_le_bytes(header[layout::STR_STATE as usize..].try_into().ok()?);
        let (kind, compact, ascii) = ((state >> 2) & 7, state & (1 << 5) != 0, state & (1 << 6) != 0);
        if !compact || !matches!(kind, 1 | 2 | 4) {
            return None;
        }
        let data = object.wrapping_add(if ascii { self.layout.ascii_data } else { self.layout.compact_data });
        let shown = length.min(MAX_CHARS);
        let mut bytes = vec![0u8; shown * kind as usize];
        if !self.memory.read(data, &mut bytes) {
            return None;
        }
        let mut text: String = bytes
            .chunks_exact(kind as usize)
            .map(|c| {
                let code = c.iter().rev().fold(0u32, |value, b| (value << 8) | u32::from(*b));
                char::from_u32(code).filter(|c| !c.is_control()).unwrap_or('?')
            })
            .collect();
        if length > shown {
            text.push('…');
        }
        Some(text)
    }
}

fn read_u64(bytes: &[u8], offset: u64) -> Option<u64> {
    let at = usize::try_from(offset).ok()?;
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A source file as a stack shows it: its name, with its package for `__init__.py` and
/// `__main__.py` (the path says where the code is installed, no more).
fn short_file(path: &str) -> String {
    let mut parts = path.rsplit('/');
    let name = parts.next().unwrap_or(path);
    match (name, parts.next()) {
        ("__init__.py" | "__main__.py", Some(package)) if !package.is_empty() => format!("{package}/{name}"),
        _ => name.to_owned(),
    }
}

/// The native frame that runs Python frames (one call of the eval loop).
const EVAL_FRAME: &str = "_PyEval_EvalFrameDefault+";

/// A native stack with each eval loop frame replaced by the Python frames it runs, as py-spy
/// shows them. Python frames left over (the native unwind stopped short, or the eval loop has
/// no symbol) follow the native frames.
pub fn merge(native: Vec<String>, python: Vec<PyFrame>) -> Vec<String> {
    if python.is_empty() {
        return native;
    }
    let mut python = python.into_iter().peekable();
    let mut merged = Vec::with_capacity(native.len() + python.len());
    for frame in native {
        if frame.starts_with(EVAL_FRAME) && python.peek().is_some() {
            for py in python.by_ref() {
                merged.push(py.name);
                if py.entry {
                    break;
                }
            }
        } else {
            merged.push(frame);
        }
    }
    merged.extend(python.map(|py| py.name));
    merged
}

#[cfg(test)]
mod tests;
