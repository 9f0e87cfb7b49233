//! Where named functions begin in an ELF file, from its dynamic symbol table, without reading the
//! file: the header, the section headers, `.dynsym` and its string table are read (positioned
//! reads, each bounded), nothing else. Node.js links OpenSSL into a 100 MB executable whose
//! exported symbols take 7 MB; reading the whole file per target would cost 100 MB of memory.
//! Nothing here touches a kernel handle.

use std::{fs::File, io, ops::Range, os::unix::fs::FileExt};

use object::{
    Endianness,
    elf::{FileHeader32, FileHeader64, SHN_UNDEF, SHT_DYNSYM},
    read::{
        ReadRef,
        elf::{FileHeader, SectionHeader as _, Sym as _},
    },
};

/// Section headers beyond this are not read (a large executable has about 40).
const MAX_SECTIONS: u64 = 4096;

/// Bytes a file can be read from at given offsets.
pub trait Positioned {
    fn size(&self) -> io::Result<u64>;
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl Positioned for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // Positioned: a descriptor shared with another process keeps its offset.
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl Positioned for [u8] {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let bytes = start.checked_add(buf.len()).and_then(|end| self.get(start..end));
        buf.copy_from_slice(bytes.ok_or(io::ErrorKind::UnexpectedEof)?);
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    #[error("cannot read it: {0}")]
    Read(#[from] io::Error),
    #[error("not an ELF object: {0}")]
    Elf(#[from] object::Error),
    #[error("malformed ELF: {0}")]
    Malformed(&'static str),
    #[error("its dynamic symbol table takes {size} bytes, more than the {cap} allowed")]
    TooLarge { size: u64, cap: u64 },
}

/// The file offsets at which the defined dynamic symbols among `names` begin, as (index in
/// `names`, offset), each name once. At most `cap` bytes of tables are read.
pub fn find(source: &(impl Positioned + ?Sized), names: &[&str], cap: u64) -> Result<Vec<(usize, u64)>, SymbolsError> {
    let mut ident = [0u8; 5];
    source.read_exact_at(&mut ident, 0).map_err(|_| SymbolsError::Malformed("too short for an ELF header"))?;
    if ident[4] == object::elf::ELFCLASS64 {
        find_in::<FileHeader64<Endianness>>(source, names, cap)
    } else {
        find_in::<FileHeader32<Endianness>>(source, names, cap)
    }
}

fn find_in<Elf: FileHeader<Endian = Endianness>>(
    source: &(impl Positioned + ?Sized),
    names: &[&str],
    cap: u64,
) -> Result<Vec<(usize, u64)>, SymbolsError> {
    let mut pieces = Pieces { size: source.size()?, pieces: Vec::new() };
    pieces.add(source, 0..size_of::<Elf>() as u64)?;
    let header = Elf::parse(&pieces)?;
    let endian = header.endian()?;
    let shoff: u64 = header.e_shoff(endian).into();
    // An extended count (0 here, the count in section 0) is a relocatable object's: no
    // dynamic symbols.
    let count = u64::from(header.e_shnum(endian)).min(MAX_SECTIONS);
    let table_bytes = count * size_of::<Elf::SectionHeader>() as u64;
    pieces.add(source, shoff..shoff.saturating_add(table_bytes))?;
    let (symbols, strings) = {
        let sections = Elf::parse(&pieces)?.section_headers(endian, &pieces)?;
        let Some(dynsym) = sections.iter().find(|s| s.sh_type(endian) == SHT_DYNSYM) else { return Ok(Vec::new()) };
        let strings = usize::try_from(dynsym.sh_link(endian)).ok().and_then(|link| sections.get(link));
        let strings = strings.ok_or(SymbolsError::Malformed("dynamic symbols without a string table"))?;
        (span(dynsym, endian), span(strings, endian))
    };
    let size = (symbols.end - symbols.start).saturating_add(strings.end - strings.start);
    if size > cap {
        return Err(SymbolsError::TooLarge { size, cap });
    }
    pieces.add(source, symbols)?;
    pieces.add(source, strings)?;
    let header = Elf::parse(&pieces)?;
    let sections = header.section_headers(endian, &pieces)?;
    let symbols = header.sections(endian, &pieces)?.symbols(endian, &pieces, SHT_DYNSYM)?;
    let mut found = Vec::new();
    for symbol in symbols.iter() {
        let shndx = symbol.st_shndx(endian);
        if shndx == SHN_UNDEF || shndx >= object::elf::SHN_LORESERVE {
            continue;
        }
        let Ok(name) = symbols.symbol_name(endian, symbol) else { continue };
        let Some(index) = names.iter().position(|n| n.as_bytes() == name) else { continue };
        if found.iter().any(|&(i, _)| i == index) {
            continue;
        }
        let Some(section) = sections.get(usize::from(shndx)) else { continue };
        let (value, address, offset): (u64, u64, u64) =
            (symbol.st_value(endian).into(), section.sh_addr(endian).into(), section.sh_offset(endian).into());
        let Some(at) = value.checked_sub(address).and_then(|o| o.checked_add(offset)) else { continue };
        found.push((index, at));
    }
    Ok(found)
}

/// A section's bytes in the file.
fn span<S: object::read::elf::SectionHeader<Endian = Endianness>>(section: &S, endian: Endianness) -> Range<u64> {
    let (offset, size): (u64, u64) = (section.sh_offset(endian).into(), section.sh_size(endian).into());
    offset..offset.saturating_add(size)
}

/// The few byte ranges of a file that were read, as the `object` crate's input: a read outside
/// them fails, as a read past a file's end does.
struct Pieces {
    size: u64,
    pieces: Vec<(u64, Vec<u8>)>,
}

impl Pieces {
    fn add(&mut self, source: &(impl Positioned + ?Sized), range: Range<u64>) -> Result<(), SymbolsError> {
        let end = range.end.min(self.size);
        let len =
            usize::try_from(end.saturating_sub(range.start)).map_err(|_| SymbolsError::Malformed("range too large"))?;
        let mut bytes = vec![0; len];
        source.read_exact_at(&mut bytes, range.start)?;
        self.pieces.push((range.start, bytes));
        Ok(())
    }

    /// The piece holding `offset` and as much after it as the piece has.
    fn at(&self, offset: u64) -> Option<&[u8]> {
        self.pieces.iter().rev().find_map(|(start, bytes)| {
            let skip = usize::try_from(offset.checked_sub(*start)?).ok()?;
            bytes.get(skip..).filter(|rest| !rest.is_empty())
        })
    }
}

impl<'a> ReadRef<'a> for &'a Pieces {
    fn len(self) -> Result<u64, ()> {
        Ok(self.size)
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        if size == 0 {
            return Ok(&[]);
        }
        let size = usize::try_from(size).map_err(|_| ())?;
        self.at(offset).and_then(|rest| rest.get(..size)).ok_or(())
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        let limit = usize::try_from(range.end.saturating_sub(range.start)).map_err(|_| ())?;
        let rest = self.at(range.start).ok_or(())?;
        let rest = &rest[..rest.len().min(limit)];
        let end = rest.iter().position(|&b| b == delimiter).ok_or(())?;
        Ok(&rest[..end])
    }
}
