//! Where CPython keeps what a stack needs, per minor version: byte offsets into its structs, the
//! same fields py-spy reads. 3.13 publishes them itself: `_PyRuntime` starts with
//! `_Py_DebugOffsets` (for out-of-process debuggers), read from the process ([`from_debug_offsets`]).
//! 3.11 and 3.12 have no such table: their offsets were taken with `offsetof` from each version's
//! own headers (`Include/internal/`, built with `Py_BUILD_CORE`: 3.11.7 and 3.12.1 here). The
//! structs are internal and change between minor versions (and between alphas), so a version not
//! listed, or an alpha or beta of one, gives no Python frames rather than reading memory by a
//! wrong map.

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

/// Where a thread state keeps its innermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurrentFrame {
    /// 3.11, 3.12: `PyThreadState.cframe` (this offset), then `_PyCFrame.current_frame` (that one).
    ViaCFrame(u64, u64),
    /// 3.13: `PyThreadState.current_frame`.
    Direct(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    /// `_PyRuntimeState.interpreters.head`
    pub runtime_interpreters: u64,
    /// `PyInterpreterState.next`, `.threads.head`
    pub interp_next: u64,
    pub interp_threads: u64,
    /// `PyThreadState.next`, `.native_thread_id` (the thread's tid)
    pub tstate_next: u64,
    pub tstate_native_thread_id: u64,
    pub current_frame: CurrentFrame,
    /// `_PyInterpreterFrame.f_code` (3.13: `f_executable`), `.previous`, `.prev_instr` (3.13:
    /// `instr_ptr`; both point at the instruction being run), `.owner`
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
    current_frame: CurrentFrame::ViaCFrame(56, 8),
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
    current_frame: CurrentFrame::ViaCFrame(56, 0),
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

/// The layout of the CPython whose `Py_Version` is `version` (`PY_VERSION_HEX`), if listed:
/// 3.11 and 3.12, release candidates and finals. 3.13 and later: [`from_debug_offsets`].
pub fn of_version(version: u32) -> Option<&'static Layout> {
    let (major, minor, level) = (version >> 24, (version >> 16) & 0xff, (version >> 4) & 0xf);
    if major != 3 || level < 0xc {
        return None;
    }
    [&V3_11, &V3_12].into_iter().find(|layout| layout.minor == minor)
}

/// Bytes of 3.13's `_Py_DebugOffsets`, at the start of `_PyRuntime`: 73 `uint64_t`.
pub const DEBUG_OFFSETS_BYTES: usize = 73 * 8;
/// Its first field.
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";
/// `FRAME_OWNED_BY_CSTACK` in 3.13's `enum _frameowner`.
const OWNED_BY_CSTACK_3_13: u8 = 3;

/// The layout of a 3.13 CPython of `version`, from the `_Py_DebugOffsets` at the start of its
/// `_PyRuntime` (`table`, [`DEBUG_OFFSETS_BYTES`] read from the process). The table's own shape
/// is 3.13's (it changes between minor versions too: 3.14 adds fields), so only 3.13 finals and
/// candidates are read, and only a table that says it is theirs: its cookie, the same version,
/// the default build (a free-threaded one lays objects out differently), the object offsets
/// every listed version shares, and every offset within its struct's size.
pub fn from_debug_offsets(version: u32, table: &[u8]) -> Option<Layout> {
    let (major, minor, level) = (version >> 24, (version >> 16) & 0xff, (version >> 4) & 0xf);
    if major != 3 || minor != 13 || level < 0xc || table.get(..8)? != DEBUG_COOKIE {
        return None;
    }
    let word = |index: usize| -> Option<u64> {
        let bytes = table.get(index * 8..index * 8 + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    };
    if word(1)? != u64::from(version) || word(2)? != 0 {
        return None;
    }
    // (struct size, field offsets) of `runtime_state`, `interpreter_state`, `thread_state`,
    // `interpreter_frame`, `code_object`: each field must lie within its struct.
    let within = |size: usize, fields: &[usize]| -> Option<Vec<u64>> {
        let size = word(size)?;
        fields.iter().map(|&f| word(f).filter(|&offset| offset.checked_add(8).is_some_and(|end| end <= size))).collect()
    };
    let runtime = within(3, &[5])?;
    let interp = within(6, &[8, 9])?;
    let tstate = within(19, &[21, 23, 25])?;
    // `owner` is a char: checked as a byte below.
    let frame = within(28, &[29, 30, 31])?;
    let owner = word(33)?;
    let code = within(34, &[35, 36, 37, 38])?;
    let (first_line, bytecode) = (word(39)?, word(43)?);
    let shared = [(65, BYTES_SIZE), (66, BYTES_DATA), (68, STR_STATE), (69, STR_LENGTH)];
    if shared.iter().any(|&(index, offset)| word(index) != Some(offset)) || owner >= word(28)? {
        return None;
    }
    let ascii_data = word(70)?;
    let layout = Layout {
        minor,
        runtime_interpreters: runtime[0],
        interp_next: interp[0],
        interp_threads: interp[1],
        tstate_next: tstate[0],
        tstate_native_thread_id: tstate[2],
        current_frame: CurrentFrame::Direct(tstate[1]),
        frame_previous: frame[0],
        frame_code: frame[1],
        frame_prev_instr: frame[2],
        frame_owner: owner,
        entry: Entry::ShimOwner(OWNED_BY_CSTACK_3_13),
        code_filename: code[0],
        code_name: code[1],
        code_qualname: code[2],
        code_linetable: code[3],
        code_first_line: first_line,
        code_bytecode: bytecode,
        ascii_data,
        // `PyCompactUnicodeObject`: the ASCII header, `utf8_length` and `utf8`.
        compact_data: ascii_data + 16,
    };
    let frame_end = [layout.frame_code, layout.frame_previous, layout.frame_prev_instr].map(|o| o + 8);
    let fits = frame_end.into_iter().chain([owner + 1]).all(|end| end <= FRAME_BYTES as u64);
    // The code header is read up to the bytecode: past its other fields, and not huge.
    let code_fields = [first_line + 4, code[0] + 8, code[1] + 8, code[2] + 8, code[3] + 8];
    let header_ok = bytecode <= 4096 && code_fields.iter().all(|&end| end <= bytecode);
    (fits && header_ok).then_some(layout)
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

    /// The `_Py_DebugOffsets` that pyenv's 3.13.0 `libpython3.13.so.1.0` initializes
    /// `_PyRuntime` with (584 bytes of its `.data`, in hex).
    const DEBUG_OFFSETS_3_13_0: &str = include_str!("testdata/cpython-3.13.0-debug-offsets.hex");

    fn table_3_13_0() -> Vec<u8> {
        let hex = DEBUG_OFFSETS_3_13_0.trim();
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
    }

    #[test]
    fn the_3_13_layout_is_its_own_debug_offsets() {
        let table = table_3_13_0();
        assert_eq!(table.len(), DEBUG_OFFSETS_BYTES);
        let layout = from_debug_offsets(0x030D_00F0, &table).expect("3.13.0's table");
        assert_eq!(layout.current_frame, CurrentFrame::Direct(72));
        assert_eq!((layout.tstate_next, layout.tstate_native_thread_id), (8, 160));
        assert_eq!((layout.interp_next, layout.interp_threads, layout.runtime_interpreters), (7264, 7344, 632));
        let frame = (layout.frame_code, layout.frame_previous, layout.frame_prev_instr, layout.frame_owner);
        assert_eq!(frame, (0, 8, 56, 70));
        assert_eq!((layout.code_first_line, layout.code_qualname, layout.code_bytecode), (68, 128, 200));
        assert_eq!((layout.ascii_data, layout.compact_data), (40, 56));
        assert_eq!(layout.entry, Entry::ShimOwner(3));
    }

    #[test]
    fn a_debug_offsets_table_not_of_3_13_or_out_of_bounds_gives_no_layout() {
        let table = table_3_13_0();
        assert!(from_debug_offsets(0x030D_01F0, &table).is_none(), "another version than the table's");
        assert!(from_debug_offsets(0x030E_00F0, &table).is_none(), "3.14: its table has another shape");
        assert!(from_debug_offsets(0x030D_00A1, &table).is_none(), "an alpha");
        assert!(from_debug_offsets(0x030D_00F0, &table[..100]).is_none(), "short");
        let with = |index: usize, value: u64| {
            let mut changed = table.clone();
            changed[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
            from_debug_offsets(0x030D_00F0, &changed)
        };
        assert!(with(0, 0).is_none(), "no cookie");
        assert!(with(2, 1).is_none(), "free-threaded");
        assert!(with(23, 304).is_none(), "current_frame past the thread state");
        assert!(with(29, u64::MAX).is_none(), "previous frame pointer that overflows");
        assert!(with(31, 76).is_none(), "instr_ptr past the bytes read of a frame");
        assert!(with(33, 80).is_none(), "owner past the frame");
        assert!(with(43, 100_000).is_none(), "a huge code header");
        assert!(with(69, 24).is_none(), "a string length elsewhere than every version's");
        for byte in 0..table.len() {
            let mut flipped = table.clone();
            flipped[byte] ^= 0xff;
            if let Some(layout) = from_debug_offsets(0x030D_00F0, &flipped) {
                assert!(layout.frame_owner < FRAME_BYTES as u64 && layout.code_bytecode <= 4096);
            }
        }
    }

    #[test]
    fn one_frame_read_covers_every_frame_field() {
        let v3_13 = from_debug_offsets(0x030D_00F0, &table_3_13_0()).expect("3.13");
        for layout in [&V3_11, &V3_12, &v3_13] {
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
