//! Where CPython keeps what a stack needs, per minor version: byte offsets into its structs,
//! taken with `offsetof` from each version's own headers (`Include/internal/`, built with
//! `Py_BUILD_CORE`: 3.11.7 and 3.12.1 here), the same fields py-spy reads. The structs are
//! internal and change between minor versions (and between alphas), so a version not listed,
//! or an alpha or beta of one, gives no Python frames rather than reading memory by a wrong map.

/// How a frame says it is the outermost of one call into the eval loop (one native
/// `_PyEval_EvalFrameDefault` frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// 3.11: `_PyInterpreterFrame.is_entry`, a byte at this offset.
    Flag(u64),
    /// 3.12: the eval loop pushes a shim frame owned by the C stack (`FRAME_OWNED_BY_CSTACK`)
    /// below the frames it runs.
    ShimOwner(u8),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    /// `_PyRuntimeState.interpreters.head`
    pub runtime_interpreters: u64,
    /// `PyInterpreterState.next`, `.threads.head`
    pub interp_next: u64,
    pub interp_threads: u64,
    /// `PyThreadState.next`, `.native_thread_id` (the thread's tid), `.cframe`
    pub tstate_next: u64,
    pub tstate_native_thread_id: u64,
    pub tstate_cframe: u64,
    /// `_PyCFrame.current_frame`
    pub cframe_current_frame: u64,
    /// `_PyInterpreterFrame.f_code`, `.previous`, `.prev_instr`, `.owner`
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_prev_instr: u64,
    pub frame_owner: u64,
    pub entry: Entry,
    /// `PyCodeObject.co_firstlineno` (an int), `.co_filename`, `.co_name`, `.co_qualname`,
    /// `.co_linetable`, `.co_code_adaptive` (where the bytecode starts)
    pub code_first_line: u64,
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_bytecode: u64,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where a compact string's
    /// characters start, ASCII or not.
    pub ascii_data: u64,
    pub compact_data: u64,
}

/// Bytes of an interpreter frame read at once: past every offset above.
pub const FRAME_BYTES: usize = 72;

/// Offsets every listed version shares: `PyVarObject.ob_size`, `PyBytesObject.ob_sval`,
/// `PyASCIIObject.length` and `.state` (bits: interned 2, kind 3, compact 1, ascii 1).
pub const BYTES_SIZE: u64 = 16;
pub const BYTES_DATA: u64 = 32;
pub const STR_LENGTH: u64 = 16;
pub const STR_STATE: u64 = 32;

const V3_11: Layout = Layout {
    minor: 11,
    runtime_interpreters: 40,
    interp_next: 0,
    interp_threads: 16,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_cframe: 56,
    cframe_current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_prev_instr: 56,
    frame_owner: 69,
    entry: Entry::Flag(68),
    code_first_line: 72,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_bytecode: 184,
    ascii_data: 48,
    compact_data: 72,
};

const V3_12: Layout = Layout {
    minor: 12,
    runtime_interpreters: 40,
    interp_next: 0,
    interp_threads: 72,
    tstate_next: 8,
    tstate_native_thread_id: 144,
    tstate_cframe: 56,
    cframe_current_frame: 0,
    frame_code: 0,
    frame_previous: 8,
    frame_prev_instr: 56,
    frame_owner: 70,
    entry: Entry::ShimOwner(3),
    code_first_line: 68,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_bytecode: 192,
    ascii_data: 40,
    compact_data: 56,
};

/// The layout of the CPython whose `Py_Version` is `version` (`PY_VERSION_HEX`), if known:
/// 3.11 and 3.12, release candidates and finals.
pub fn of_version(version: u32) -> Option<&'static Layout> {
    let (major, minor, level) = (version >> 24, (version >> 16) & 0xff, (version >> 4) & 0xf);
    if major != 3 || level < 0xc {
        return None;
    }
    [&V3_11, &V3_12].into_iter().find(|layout| layout.minor == minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finals_and_candidates_of_known_versions_only() {
        assert_eq!(of_version(0x030B_07F0).map(|l| l.minor), Some(11), "3.11.7");
        assert_eq!(of_version(0x030B_02F0).map(|l| l.minor), Some(11), "3.11.2, Debian 12's");
        assert_eq!(of_version(0x030C_00C1).map(|l| l.minor), Some(12), "3.12.0rc1");
        assert_eq!(of_version(0x030C_00A7), None, "3.12.0a7: the structs were still moving");
        assert_eq!(of_version(0x030D_00F0), None, "3.13: not listed");
        assert_eq!(of_version(0x020B_07F0), None);
    }

    #[test]
    fn one_frame_read_covers_every_frame_field() {
        for layout in [&V3_11, &V3_12] {
            let entry = match layout.entry {
                Entry::Flag(at) => at,
                Entry::ShimOwner(_) => layout.frame_owner,
            };
            let fields = [layout.frame_code + 8, layout.frame_previous + 8, layout.frame_prev_instr + 8];
            let last = fields.into_iter().chain([layout.frame_owner + 1, entry + 1]).max();
            assert!(last <= Some(FRAME_BYTES as u64), "3.{}", layout.minor);
        }
    }
}
