//! Where named functions of a Go executable begin and how long they are, from `.gopclntab`: the
//! table Go's runtime keeps for its own stack traces, present when the executable is stripped
//! (`-ldflags=-s -w` drops `.symtab`). Layout of Go 1.18 and later (header magic 0xfffffff0;
//! 0xfffffff1 since 1.20, the same fields): a header of pointer-sized words, then the function
//! names (`funcnametab`, NUL-terminated), and the function table (`functab`: per function its
//! entry as an offset from the start of the text and the offset of its `_func` record, sorted by
//! entry, closed by the end of the text), each `_func` opening with its entry and name offset.
//! A function's size is the next one's entry minus its own (its alignment padding, INT3s,
//! included). The file is the target's: every offset is bounds-checked, the bytes read are capped,
//! and the walk is linear in the table, so a hostile file fails or finds nothing.
//! Nothing here touches a kernel handle.

use crate::host::dynamic_symbols::{self, Found, Positioned, Section, SymbolsError};

const MAGIC_GO118: u32 = 0xffff_fff0;
const MAGIC_GO120: u32 = 0xffff_fff1;
/// magic, 2 pad bytes, minLC, ptrSize, then 8 words: nfunc, nfiles, textStart, and the offsets
/// of funcnametab, cutab, filetab, pctab and pclntab (functab and `_func`s) from the header.
const HEADER_BYTES: usize = 8 + 8 * 8;
const WORD_NFUNC: usize = 0;
const WORD_TEXT_START: usize = 2;
const WORD_FUNCNAMETAB: usize = 3;
const WORD_CUTAB: usize = 4;
const WORD_PCLNTAB: usize = 7;
/// A 100 MB Go executable has about 100k functions.
const MAX_FUNCTIONS: u64 = 4 << 20;

/// The functions among `names` found in `.gopclntab`, each once, as file offsets and sizes: empty
/// when the file has no such section or lacks the functions. At most `cap` bytes of the table are
/// read (the names and the function table; not the line tables between them).
pub fn find(source: &(impl Positioned + ?Sized), names: &[&str], cap: u64) -> Result<Vec<Found>, SymbolsError> {
    let table = match dynamic_symbols::loaded_section(source, ".gopclntab")? {
        (_, Some(table)) => table,
        // A position-independent build keeps it among the data relocated at load.
        _ => match dynamic_symbols::loaded_section(source, ".data.rel.ro.gopclntab")? {
            (_, Some(table)) => table,
            _ => return Ok(Vec::new()),
        },
    };
    let (_, Some(text)) = dynamic_symbols::loaded_section(source, ".text")? else {
        return Err(SymbolsError::Malformed(".gopclntab without .text"));
    };
    let table_len = table.file.end - table.file.start;
    let mut header = [0u8; HEADER_BYTES];
    if table_len < HEADER_BYTES as u64 {
        return Err(SymbolsError::Malformed(".gopclntab shorter than its header"));
    }
    source.read_exact_at(&mut header, table.file.start)?;
    let header = Header::parse(&header, table_len)?;
    let read = |range: std::ops::Range<u64>| -> Result<Vec<u8>, SymbolsError> {
        let mut bytes = vec![0u8; (range.end - range.start) as usize];
        source.read_exact_at(&mut bytes, table.file.start + range.start)?;
        Ok(bytes)
    };
    let size = (header.names.end - header.names.start) + (table_len - header.functab);
    if size > cap {
        return Err(SymbolsError::TooLarge { size, cap });
    }
    let funcnametab = read(header.names.clone())?;
    let functab = read(header.functab..table_len)?;
    let wanted = name_offsets(&funcnametab, names);
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    functions_named(&functab, header.nfunc, &wanted)
        .into_iter()
        .map(|(index, entry, size)| {
            Ok(Found { index, offset: file_offset(&text, header.text_start, entry, size)?, size })
        })
        .collect()
}

struct Header {
    nfunc: u64,
    text_start: u64,
    /// `funcnametab`, as offsets in the section.
    names: std::ops::Range<u64>,
    /// Where the function table starts in the section (it runs to the section's end).
    functab: u64,
}

impl Header {
    /// The header of a section `len` bytes long, its offsets checked against it.
    fn parse(bytes: &[u8; HEADER_BYTES], len: u64) -> Result<Header, SymbolsError> {
        let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if magic != MAGIC_GO118 && magic != MAGIC_GO120 {
            return Err(SymbolsError::Malformed(".gopclntab of a Go before 1.18 or not little-endian"));
        }
        // pad, pad, minLC (1 on x86), ptrSize (8).
        if bytes[4..8] != [0, 0, 1, 8] {
            return Err(SymbolsError::Malformed(".gopclntab not of a 64-bit x86 executable"));
        }
        let word = |i: usize| {
            let at = 8 + 8 * i;
            u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
        };
        let (names, cutab, functab) = (word(WORD_FUNCNAMETAB), word(WORD_CUTAB), word(WORD_PCLNTAB));
        let nfunc = word(WORD_NFUNC);
        let in_order = HEADER_BYTES as u64 <= names && names <= cutab && cutab <= functab && functab <= len;
        if !in_order {
            return Err(SymbolsError::Malformed(".gopclntab offsets out of order or past its end"));
        }
        // nfunc pairs of u32 and the closing entry.
        let functab_bytes = nfunc.checked_mul(8).and_then(|b| b.checked_add(4));
        if nfunc == 0 || nfunc > MAX_FUNCTIONS || functab_bytes.is_none_or(|b| b > len - functab) {
            return Err(SymbolsError::Malformed(".gopclntab function count does not fit"));
        }
        Ok(Header { nfunc, text_start: word(WORD_TEXT_START), names: names..cutab, functab })
    }
}

/// For each name in `names`, the offsets in `funcnametab` where it is stored whole (between
/// NULs), as (offset, index in `names`).
fn name_offsets(funcnametab: &[u8], names: &[&str]) -> Vec<(u32, usize)> {
    let mut found = Vec::new();
    let mut at = 0usize;
    for name in funcnametab.split(|&b| b == 0) {
        if let Some(index) = names.iter().position(|n| n.as_bytes() == name)
            && let Ok(offset) = u32::try_from(at)
        {
            found.push((offset, index));
        }
        at += name.len() + 1;
    }
    found
}

/// The functions whose `_func` names one of `wanted`, as (index in the names, entry offset from
/// the text start, size), each name once. `functab`: the section from the function table on.
fn functions_named(functab: &[u8], nfunc: u64, wanted: &[(u32, usize)]) -> Vec<(usize, u64, u64)> {
    let u32_at = |at: u64| -> Option<u32> {
        let at = usize::try_from(at).ok()?;
        Some(u32::from_le_bytes(functab.get(at..at.checked_add(4)?)?.try_into().ok()?))
    };
    let mut found: Vec<(usize, u64, u64)> = Vec::new();
    for i in 0..nfunc {
        let (Some(entry), Some(record), Some(next)) = (u32_at(8 * i), u32_at(8 * i + 4), u32_at(8 * i + 8)) else {
            break;
        };
        // `_func`: entryOff u32, nameOff i32.
        let (Some(record_entry), Some(name)) = (u32_at(u64::from(record)), u32_at(u64::from(record) + 4)) else {
            continue;
        };
        let Some(&(_, index)) = wanted.iter().find(|(offset, _)| *offset == name) else { continue };
        if record_entry != entry || next <= entry || found.iter().any(|f| f.0 == index) {
            continue;
        }
        found.push((index, u64::from(entry), u64::from(next - entry)));
    }
    found
}

/// The file offset of the function `size` bytes long at `entry` from the text start, which must
/// lie inside `.text`. The header's text start is where the text begins (an executable linked
/// externally has C code before it); one outside `.text` (a position-independent file's,
/// relocated at load) is taken as `.text`'s own start.
fn file_offset(text: &Section, text_start: u64, entry: u64, size: u64) -> Result<u64, SymbolsError> {
    let text_len = text.file.end - text.file.start;
    let text_end = text.address.saturating_add(text_len);
    let start = if (text.address..text_end).contains(&text_start) { text_start } else { text.address };
    let address = start.checked_add(entry).filter(|&a| a.checked_add(size).is_some_and(|end| end <= text_end));
    let address = address.ok_or(SymbolsError::Malformed(".gopclntab function outside .text"))?;
    Ok(text.file.start + (address - text.address))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.gopclntab` of three functions: header, names, functab, `_func` records.
    fn table(names: &[&str], entries: &[u32]) -> Vec<u8> {
        let mut funcnametab = Vec::new();
        let mut name_offsets = Vec::new();
        for name in names {
            name_offsets.push(funcnametab.len() as u32);
            funcnametab.extend_from_slice(name.as_bytes());
            funcnametab.push(0);
        }
        let names_at = HEADER_BYTES as u64;
        let functab_at = names_at + funcnametab.len() as u64;
        let nfunc = names.len();
        let records_at = (nfunc * 8 + 4) as u32;
        let mut functab = Vec::new();
        for (i, entry) in entries.iter().take(nfunc).enumerate() {
            functab.extend_from_slice(&entry.to_le_bytes());
            functab.extend_from_slice(&(records_at + 8 * i as u32).to_le_bytes());
        }
        functab.extend_from_slice(&entries[nfunc].to_le_bytes());
        for (i, entry) in entries.iter().take(nfunc).enumerate() {
            functab.extend_from_slice(&entry.to_le_bytes());
            functab.extend_from_slice(&name_offsets[i].to_le_bytes());
        }
        let mut out = MAGIC_GO120.to_le_bytes().to_vec();
        out.extend_from_slice(&[0, 0, 1, 8]);
        for word in [nfunc as u64, 0, 0x1000, names_at, functab_at, functab_at, functab_at, functab_at] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&funcnametab);
        out.extend_from_slice(&functab);
        out
    }

    fn header_of(bytes: &[u8]) -> Result<Header, SymbolsError> {
        Header::parse(bytes[..HEADER_BYTES].try_into().unwrap(), bytes.len() as u64)
    }

    #[test]
    fn functions_are_found_by_name_with_sizes_from_the_next_entry() {
        let bytes =
            table(&["main.main", "crypto/tls.(*Conn).Read", "crypto/tls.(*Conn).Write"], &[0, 0x40, 0x100, 0x180]);
        let header = header_of(&bytes).expect("header");
        let names = &bytes[header.names.start as usize..header.names.end as usize];
        let wanted = name_offsets(names, &["crypto/tls.(*Conn).Write", "crypto/tls.(*Conn).Read", "absent"]);
        assert_eq!(wanted, [(10, 1), (34, 0)]);
        let found = functions_named(&bytes[header.functab as usize..], header.nfunc, &wanted);
        assert_eq!(found, [(1, 0x40, 0xc0), (0, 0x100, 0x80)]);
        let text = Section { file: 0x1000..0x2000, address: 0x401000 };
        assert_eq!(file_offset(&text, 0x401000, 0x100, 0x80).unwrap(), 0x1100);
        assert_eq!(file_offset(&text, 0, 0x100, 0x80).unwrap(), 0x1100, "an unrelocated text start");
        assert!(file_offset(&text, 0x401000, 0xff0, 0x20).is_err(), "past .text");
        let high = Section { file: 0x1000..0x2000, address: u64::MAX - 0x800 };
        assert!(file_offset(&high, high.address, 0x700, 0x200).is_err(), "past the address space");
    }

    /// Every prefix of a valid table, and the table with each byte in turn replaced by garbage,
    /// fails or finds functions inside the text: never a panic.
    #[test]
    fn truncated_or_corrupted_tables_fail_quietly() {
        let bytes = table(&["a", "crypto/tls.(*Conn).Read", "b"], &[0, 0x40, 0x100, 0x180]);
        let probe = |bytes: &[u8]| -> Option<Vec<(usize, u64, u64)>> {
            let header = header_of(bytes).ok()?;
            let names = bytes.get(header.names.start as usize..header.names.end as usize)?;
            let wanted = name_offsets(names, &["crypto/tls.(*Conn).Read"]);
            Some(functions_named(bytes.get(header.functab as usize..)?, header.nfunc, &wanted))
        };
        assert_eq!(probe(&bytes), Some(vec![(0, 0x40, 0xc0)]));
        for len in HEADER_BYTES..bytes.len() {
            let _ = probe(&bytes[..len]);
        }
        for at in 0..bytes.len() {
            for garbage in [0x00, 0x7f, 0xff] {
                let mut corrupt = bytes.clone();
                corrupt[at] = garbage;
                for (_, entry, size) in probe(&corrupt).unwrap_or_default() {
                    assert!(size > 0 && entry + size <= u64::from(u32::MAX));
                }
            }
        }
        let mut huge = bytes.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(header_of(&huge).is_err(), "a function count past the section");
        let mut old = bytes.clone();
        old[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
        assert!(header_of(&old).is_err(), "Go 1.2-1.15's table");
        assert!(find(b"\x7fELF garbage".as_slice(), &["x"], 1 << 20).is_err());
        assert!(find(b"".as_slice(), &["x"], 1 << 20).is_err());
    }
}
