//! The line a code object is at, from its location table (`co_linetable`, PEP 657; the format of
//! CPython 3.11 and 3.12, `Objects/locations.md`): entries of one header byte (top bit set,
//! a 4-bit kind, a 3-bit length in code units less one) and varint operands. Only the line is
//! wanted, so columns are skipped. The table is the target's bytes: every step is bounded by
//! the table's end and a malformed one gives no line.

/// Bytes in a code unit (`_Py_CODEUNIT`).
const CODE_UNIT: u64 = 2;

/// The line of the instruction `offset` bytes into the code, counted from `first_line`
/// (`co_firstlineno`); `None` past the table or at an instruction with no line.
pub fn line_at(table: &[u8], first_line: i32, offset: u64) -> Option<i32> {
    let mut line = i64::from(first_line);
    let mut start = 0u64;
    let mut at = 0;
    while let Some(&header) = table.get(at) {
        if header & 0x80 == 0 {
            return None;
        }
        let kind = (header >> 3) & 0xf;
        let end = start + (u64::from(header & 7) + 1) * CODE_UNIT;
        let mut operands = Operands { table, at: at + 1 };
        let delta = match kind {
            // No location.
            15 => 0,
            // Long form and no-column form: the line delta first.
            13 | 14 => operands.signed()?,
            // One-line forms: the delta is in the kind.
            10..=12 => i64::from(kind - 10),
            // Short forms: same line.
            _ => 0,
        };
        line = line.checked_add(delta)?;
        if offset < end {
            return if kind == 15 { None } else { i32::try_from(line).ok() };
        }
        start = end;
        // The next entry starts at the next byte with the top bit set.
        at += 1;
        while table.get(at).is_some_and(|b| b & 0x80 == 0) {
            at += 1;
        }
    }
    None
}

struct Operands<'a> {
    table: &'a [u8],
    at: usize,
}

impl Operands<'_> {
    /// 6 bits a byte, least significant first, bit 6 set while more follow.
    fn unsigned(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(6) {
            let byte = *self.table.get(self.at)?;
            if byte & 0x80 != 0 {
                return None;
            }
            self.at += 1;
            value |= u64::from(byte & 0x3f) << shift;
            if byte & 0x40 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// The sign in the lowest bit.
    fn signed(&mut self) -> Option<i64> {
        let value = self.unsigned()?;
        let magnitude = i64::try_from(value >> 1).ok()?;
        Some(if value & 1 == 1 { -magnitude } else { magnitude })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `import time` / `def f():` / `a = 1` / `time.sleep(1)` / `return 3`, from its second
    /// line, as CPython 3.11.7 compiled it (`f.__code__.co_linetable`); `dis` gives the lines of
    /// RESUME at 0 (2), STORE_FAST at 4 (3), CALL at 34 (4), RETURN_VALUE at 48 (5).
    const TABLE: &[u8] = b"\x80\x00\xd8\x08\t\x80A\xdd\x04\x08\x84J\x88q\x81M\x84M\x80M\xd8\x0b\x0c\x881";

    #[test]
    fn lines_of_a_recorded_function() {
        for (offset, line) in [(0, 2), (4, 3), (34, 4), (48, 5)] {
            assert_eq!(line_at(TABLE, 2, offset), Some(line), "at {offset}");
        }
        assert_eq!(line_at(TABLE, 2, 10_000), None, "past the code");
    }

    #[test]
    fn every_form_moves_the_line_as_cpython_does() {
        // Long form (-1 as 3), no-column form (+5 as 10), one-line form +2, no location.
        let table = [0xf1, 3, 0, 1, 1, 0xe8, 10, 0xe0, 0, 0, 0xf8];
        assert_eq!(line_at(&table, 10, 0), Some(9), "long form, 2 code units");
        assert_eq!(line_at(&table, 10, 3), Some(9));
        assert_eq!(line_at(&table, 10, 4), Some(14), "no-column form");
        assert_eq!(line_at(&table, 10, 6), Some(16), "one-line form");
        assert_eq!(line_at(&table, 10, 8), None, "no location");
    }

    #[test]
    fn malformed_tables_give_no_line() {
        for table in [&[0x00][..], &[0xf0], &[0xf0, 0x40, 0x40], &[0xf0, 0xc0], &[0xe8; 1]] {
            assert_eq!(line_at(table, 1, 0), None, "{table:x?}");
        }
        let endless = [0xf0].into_iter().chain([0x7f; 40]).collect::<Vec<u8>>();
        assert_eq!(line_at(&endless, 1, 0), None, "a varint of more than 64 bits");
        assert_eq!(line_at(&[0xe8, 0x3e], i32::MAX, 0), None, "past i32");
    }
}
