//! HotSpot's performance-data file (`/tmp/hsperfdata_<user>/<pid>`), bytes → named counters.
//!
//! The layout is HotSpot's `PerfDataPrologue` and `PerfDataEntry` (src/hotspot/share/runtime/
//! perfMemory.hpp): a 32-byte prologue, then `num_entries` entries of a 20-byte header followed by
//! a NUL-terminated name and the value, offsets counted from the entry's start. The target writes
//! this file, so every offset and length is checked against the bytes read: a malformed file is a
//! `FormatError`, never a panic or a read out of bounds. Touches no file: see `super::file`.

use std::collections::BTreeMap;

/// The prologue's first four bytes, always in this (big-endian) order.
const MAGIC: [u8; 4] = [0xca, 0xfe, 0xc0, 0xc0];
const PROLOGUE_LEN: usize = 32;
const ENTRY_HEADER_LEN: usize = 20;
/// The only layout version this parser knows (every JDK since 1.4.2 writes 2.0).
const MAJOR_VERSION: u8 = 2;
/// More entries than any JVM makes (a JDK 17 makes about 250): a bound on the work a file asks.
pub const MAX_ENTRIES: usize = 16_384;

/// `data_type` of a `jlong` scalar and of a byte vector.
const TYPE_LONG: u8 = b'J';
const TYPE_BYTE: u8 = b'B';
/// `data_units` of a byte vector that holds a string.
const UNITS_STRING: u8 = 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Long(i64),
    Text(String),
}

/// Every counter of one reading, by name. Entries of types no counter here uses are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfData {
    pub counters: BTreeMap<String, Value>,
}

impl PerfData {
    pub fn long(&self, name: &str) -> Option<i64> {
        match self.counters.get(name)? {
            Value::Long(v) => Some(*v),
            Value::Text(_) => None,
        }
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        match self.counters.get(name)? {
            Value::Text(s) => Some(s),
            Value::Long(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{0} bytes: shorter than the 32-byte prologue")]
    Short(usize),
    #[error("magic {0:02x?} is not HotSpot's cafec0c0")]
    Magic([u8; 4]),
    #[error("byte order {0} is neither 0 (big endian) nor 1 (little endian)")]
    ByteOrder(u8),
    #[error("version {0}.{1}: only 2.x is known")]
    Version(u8, u8),
    #[error("the JVM has not finished writing the file yet (not accessible)")]
    NotAccessible,
    #[error("the prologue says {used} bytes are used, but the file has {len}")]
    Used { used: i64, len: usize },
    #[error("the first entry's offset {0} is outside the used bytes")]
    EntryOffset(i64),
    #[error("entry {index} at offset {at}: {what}")]
    Entry { index: usize, at: usize, what: &'static str },
}

/// Reads the fields of a file in its byte order.
#[derive(Clone, Copy)]
struct Reader<'a> {
    bytes: &'a [u8],
    little: bool,
}

impl Reader<'_> {
    fn slice(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.bytes.get(at..at.checked_add(len)?)
    }

    fn i32(&self, at: usize) -> Option<i32> {
        let raw: [u8; 4] = self.slice(at, 4)?.try_into().ok()?;
        Some(if self.little { i32::from_le_bytes(raw) } else { i32::from_be_bytes(raw) })
    }

    fn i64(&self, at: usize) -> Option<i64> {
        let raw: [u8; 8] = self.slice(at, 8)?.try_into().ok()?;
        Some(if self.little { i64::from_le_bytes(raw) } else { i64::from_be_bytes(raw) })
    }
}

/// Parses a whole file. The JVM adds entries while it runs (it counts one before filling it in),
/// so an entry of length zero ends the list: it is one being written, not an error.
pub fn parse(bytes: &[u8]) -> Result<PerfData, FormatError> {
    if bytes.len() < PROLOGUE_LEN {
        return Err(FormatError::Short(bytes.len()));
    }
    let magic: [u8; 4] = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if magic != MAGIC {
        return Err(FormatError::Magic(magic));
    }
    let little = match bytes[4] {
        0 => false,
        1 => true,
        other => return Err(FormatError::ByteOrder(other)),
    };
    if bytes[5] != MAJOR_VERSION {
        return Err(FormatError::Version(bytes[5], bytes[6]));
    }
    if bytes[7] == 0 {
        return Err(FormatError::NotAccessible);
    }
    let r = Reader { bytes, little };
    let short = || FormatError::Short(bytes.len());
    let used = r.i32(8).ok_or_else(short)?;
    let entry_offset = r.i32(24).ok_or_else(short)?;
    let num_entries = r.i32(28).ok_or_else(short)?;
    let used = usize::try_from(used)
        .ok()
        .filter(|u| (PROLOGUE_LEN..=bytes.len()).contains(u))
        .ok_or(FormatError::Used { used: i64::from(used), len: bytes.len() })?;
    let first = usize::try_from(entry_offset)
        .ok()
        .filter(|o| (PROLOGUE_LEN..=used).contains(o))
        .ok_or(FormatError::EntryOffset(i64::from(entry_offset)))?;
    let used = Reader { bytes: &bytes[..used], little };
    let count = usize::try_from(num_entries).unwrap_or(0).min(MAX_ENTRIES);

    let mut data = PerfData::default();
    let mut at = first;
    for index in 0..count {
        let Some(entry) = parse_entry(used, at).map_err(|what| FormatError::Entry { index, at, what })? else {
            break;
        };
        if let Some(value) = entry.value {
            data.counters.insert(entry.name, value);
        }
        at += entry.length;
    }
    Ok(data)
}

struct Entry {
    length: usize,
    name: String,
    /// None for a type no counter here uses.
    value: Option<Value>,
}

/// The entry at `at`, or None for one not written yet (or no room left for another).
fn parse_entry(r: Reader<'_>, at: usize) -> Result<Option<Entry>, &'static str> {
    if at == r.bytes.len() {
        return Ok(None);
    }
    let header = r.slice(at, ENTRY_HEADER_LEN).ok_or("header runs past the used bytes")?;
    let field = |offset: usize| r.i32(at + offset).ok_or("header runs past the used bytes");
    let length = field(0)?;
    if length == 0 {
        return Ok(None);
    }
    let length =
        usize::try_from(length).ok().filter(|l| *l >= ENTRY_HEADER_LEN).ok_or("length shorter than its header")?;
    let entry = r.slice(at, length).ok_or("length runs past the used bytes")?;
    let name_offset = offset_in(field(4)?, length).ok_or("name offset outside the entry")?;
    let vector_length = usize::try_from(field(8)?).map_err(|_| "negative vector length")?;
    let (data_type, units) = (header[12], header[14]);
    let data_offset = offset_in(field(16)?, length).ok_or("data offset outside the entry")?;
    let name_bytes = &entry[name_offset..];
    let name_len = name_bytes.iter().position(|b| *b == 0).ok_or("name not NUL-terminated in the entry")?;
    let name = std::str::from_utf8(&name_bytes[..name_len]).map_err(|_| "name is not UTF-8")?.to_owned();
    let data = Reader { bytes: entry, little: r.little };
    let value = match (data_type, vector_length) {
        (TYPE_LONG, 0) => Some(Value::Long(data.i64(data_offset).ok_or("value runs past the entry")?)),
        (TYPE_BYTE, n) if n > 0 && units == UNITS_STRING => {
            let raw = data.slice(data_offset, n).ok_or("string runs past the entry")?;
            let len = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
            Some(Value::Text(String::from_utf8_lossy(&raw[..len]).into_owned()))
        }
        _ => None,
    };
    Ok(Some(Entry { length, name, value }))
}

/// An offset from an entry's start that falls inside it, past its header.
fn offset_in(offset: i32, length: usize) -> Option<usize> {
    usize::try_from(offset).ok().filter(|o| (ENTRY_HEADER_LEN..length).contains(o))
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// Builds files the way HotSpot lays them out, in either byte order.
    pub struct Builder {
        little: bool,
        entries: Vec<Vec<u8>>,
    }

    impl Builder {
        pub fn new(little: bool) -> Self {
            Self { little, entries: Vec::new() }
        }

        fn i32(&self, v: i32) -> [u8; 4] {
            if self.little { v.to_le_bytes() } else { v.to_be_bytes() }
        }

        fn entry(&mut self, name: &str, data_type: u8, vector_length: usize, units: u8, data: &[u8]) -> &mut Self {
            let name_offset = ENTRY_HEADER_LEN;
            let data_offset = (name_offset + name.len() + 1).next_multiple_of(8);
            let length = (data_offset + data.len()).next_multiple_of(8);
            let mut e = Vec::with_capacity(length);
            e.extend(self.i32(length as i32));
            e.extend(self.i32(name_offset as i32));
            e.extend(self.i32(vector_length as i32));
            e.extend([data_type, 0, units, 3]);
            e.extend(self.i32(data_offset as i32));
            e.extend(name.as_bytes());
            e.resize(data_offset, 0);
            e.extend(data);
            e.resize(length, 0);
            self.entries.push(e);
            self
        }

        pub fn long(&mut self, name: &str, v: i64) -> &mut Self {
            let data = if self.little { v.to_le_bytes() } else { v.to_be_bytes() };
            self.entry(name, TYPE_LONG, 0, 4, &data)
        }

        pub fn text(&mut self, name: &str, s: &str, capacity: usize) -> &mut Self {
            let mut data = s.as_bytes().to_vec();
            data.resize(capacity, 0);
            self.entry(name, TYPE_BYTE, capacity, UNITS_STRING, &data)
        }

        /// The file: prologue, entries, then zeroes up to `size` (HotSpot maps a fixed size).
        pub fn build(&self, size: usize) -> Vec<u8> {
            let body: usize = self.entries.iter().map(Vec::len).sum();
            let mut f = MAGIC.to_vec();
            f.extend([u8::from(self.little), 2, 0, 1]);
            f.extend(self.i32((PROLOGUE_LEN + body) as i32));
            f.extend(self.i32(0));
            f.extend([0; 8]);
            f.extend(self.i32(PROLOGUE_LEN as i32));
            f.extend(self.i32(self.entries.len() as i32));
            for e in &self.entries {
                f.extend(e);
            }
            f.resize(size.max(f.len()), 0);
            f
        }
    }

    fn sample(little: bool) -> Vec<u8> {
        Builder::new(little)
            .long("sun.os.hrt.frequency", 1_000_000_000)
            .long("sun.rt.safepointTime", 143_043_690)
            .long("sun.rt.safepoints", 7)
            .text("sun.gc.lastCause", "System.gc()", 64)
            .long("sun.gc.collector.1.time", -5)
            .build(4096)
    }

    #[test]
    fn counters_and_strings_in_both_byte_orders() {
        for little in [true, false] {
            let data = parse(&sample(little)).expect("parses");
            assert_eq!(data.long("sun.os.hrt.frequency"), Some(1_000_000_000));
            assert_eq!(data.long("sun.rt.safepointTime"), Some(143_043_690));
            assert_eq!(data.long("sun.rt.safepoints"), Some(7));
            assert_eq!(data.text("sun.gc.lastCause"), Some("System.gc()"));
            assert_eq!(data.long("sun.gc.collector.1.time"), Some(-5));
            assert_eq!(data.long("sun.gc.lastCause"), None, "a string is not a number");
            assert_eq!(data.counters.len(), 5);
        }
    }

    #[test]
    fn the_prologue_is_checked() {
        let good = sample(true);
        assert_eq!(parse(&good[..31]), Err(FormatError::Short(31)));
        let mut bad = good.clone();
        bad[0] = 0xcb;
        assert!(matches!(parse(&bad), Err(FormatError::Magic(_))));
        let mut bad = good.clone();
        bad[4] = 7;
        assert_eq!(parse(&bad), Err(FormatError::ByteOrder(7)));
        let mut bad = good.clone();
        bad[5] = 1;
        assert_eq!(parse(&bad), Err(FormatError::Version(1, 0)));
        let mut bad = good.clone();
        bad[7] = 0;
        assert_eq!(parse(&bad), Err(FormatError::NotAccessible));
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&100_000i32.to_le_bytes());
        assert_eq!(parse(&bad), Err(FormatError::Used { used: 100_000, len: 4096 }));
        let mut bad = good.clone();
        bad[24..28].copy_from_slice(&(-1i32).to_le_bytes());
        assert_eq!(parse(&bad), Err(FormatError::EntryOffset(-1)));
    }

    #[test]
    fn an_entry_being_added_ends_the_list_and_a_broken_one_is_an_error() {
        let mut file = sample(true);
        // num_entries counts one more, still zeroed: the JVM is adding it.
        let n = i32::from_le_bytes(file[28..32].try_into().expect("4 bytes"));
        file[28..32].copy_from_slice(&(n + 1).to_le_bytes());
        let used = i32::from_le_bytes(file[8..12].try_into().expect("4 bytes"));
        file[8..12].copy_from_slice(&(used + 64).to_le_bytes());
        assert_eq!(parse(&file).expect("parses").counters.len(), 5);
        // The first entry's name offset points past the entry.
        let mut bad = sample(true);
        bad[36..40].copy_from_slice(&10_000i32.to_le_bytes());
        assert_eq!(parse(&bad), Err(FormatError::Entry { index: 0, at: 32, what: "name offset outside the entry" }));
        // Its length runs past the used bytes.
        let mut bad = sample(true);
        bad[32..36].copy_from_slice(&i32::MAX.to_le_bytes());
        assert_eq!(parse(&bad), Err(FormatError::Entry { index: 0, at: 32, what: "length runs past the used bytes" }));
        // Shorter than its own header: would loop forever if taken.
        let mut bad = sample(true);
        bad[32..36].copy_from_slice(&4i32.to_le_bytes());
        assert_eq!(parse(&bad), Err(FormatError::Entry { index: 0, at: 32, what: "length shorter than its header" }));
    }

    #[test]
    fn truncations_and_garbage_never_panic() {
        let good = sample(false);
        for len in 0..good.len() {
            let _ = parse(&good[..len]);
        }
        // Every byte of the used part flipped in turn, then a cheap pseudo-random stream.
        for at in 0..300 {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            let _ = parse(&bad);
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut bytes = good.clone();
            for _ in 0..8 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % 300) as usize;
                bytes[at] = (state >> 32) as u8;
            }
            let _ = parse(&bytes);
        }
    }
}
