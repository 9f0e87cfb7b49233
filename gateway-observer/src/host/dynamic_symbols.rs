//! Where named functions begin in an ELF file, from its dynamic symbol table (or, for Go's
//! executables, its full `.symtab`), without reading the file: the header, the section headers,
//! the symbol table and its string table are read (positioned reads, each bounded), nothing else.
//! Node.js links OpenSSL into a 100 MB executable whose exported symbols take 7 MB; reading the
//! whole file per target would cost 100 MB of memory. Nothing here touches a kernel handle.

use std::{fs::File, io, ops::Range, os::unix::fs::FileExt};

use object::{
    Endianness,
    elf::{FileHeader32, FileHeader64, SHN_UNDEF, SHT_DYNSYM, SHT_SYMTAB},
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

/// A defined symbol found: its index in the names asked for, file offset and size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub index: usize,
    pub offset: u64,
    pub size: u64,
}

/// The file offsets at which the defined dynamic symbols among `names` begin, as (index in
/// `names`, offset), each name once. At most `cap` bytes of tables are read.
pub fn find(source: &(impl Positioned + ?Sized), names: &[&str], cap: u64) -> Result<Vec<(usize, u64)>, SymbolsError> {
    Ok(find_in_table(source, names, cap, SHT_DYNSYM)?.into_iter().map(|f| (f.index, f.offset)).collect())
}

/// The defined symbols among `names` in the full symbol table (`.symtab`), with their sizes.
pub fn find_static(source: &(impl Positioned + ?Sized), names: &[&str], cap: u64) -> Result<Vec<Found>, SymbolsError> {
    find_in_table(source, names, cap, SHT_SYMTAB)
}

fn is_elf64(source: &(impl Positioned + ?Sized)) -> Result<bool, SymbolsError> {
    let mut ident = [0u8; 5];
    source.read_exact_at(&mut ident, 0).map_err(|_| SymbolsError::Malformed("too short for an ELF header"))?;
    Ok(ident[4] == object::elf::ELFCLASS64)
}

fn find_in_table(
    source: &(impl Positioned + ?Sized),
    names: &[&str],
    cap: u64,
    table: u32,
) -> Result<Vec<Found>, SymbolsError> {
    if is_elf64(source)? {
        find_in::<FileHeader64<Endianness>>(source, names, cap, table)
    } else {
        find_in::<FileHeader32<Endianness>>(source, names, cap, table)
    }
}

/// The ELF machine (`EM_*`) of a file, and the file range of its section named `name`, if any.
pub fn named_section(
    source: &(impl Positioned + ?Sized),
    name: &str,
) -> Result<(u16, Option<Range<u64>>), SymbolsError> {
    let (machine, section) = loaded_section(source, name)?;
    Ok((machine, section.map(|s| s.file)))
}

/// A section's bytes in the file and the address they are loaded at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub file: Range<u64>,
    pub address: u64,
}

/// As `named_section`, with the section's load address.
pub fn loaded_section(source: &(impl Positioned + ?Sized), name: &str) -> Result<(u16, Option<Section>), SymbolsError> {
    if is_elf64(source)? {
        named_section_in::<FileHeader64<Endianness>>(source, name)
    } else {
        named_section_in::<FileHeader32<Endianness>>(source, name)
    }
}

fn named_section_in<Elf: FileHeader<Endian = Endianness>>(
    source: &(impl Positioned + ?Sized),
    name: &str,
) -> Result<(u16, Option<Section>), SymbolsError> {
    let (pieces, endian) = section_headers::<Elf>(source)?;
    let machine = Elf::parse(&pieces)?.e_machine(endian);
    let names = {
        let header = Elf::parse(&pieces)?;
        let sections = header.section_headers(endian, &pieces)?;
        let index = usize::from(header.e_shstrndx(endian));
        let strings = sections.get(index).ok_or(SymbolsError::Malformed("no section names"))?;
        span(strings, endian)
    };
    // Section names are short: their table is read whole, within the symbol cap's spirit.
    if names.end - names.start > 1 << 20 {
        return Err(SymbolsError::TooLarge { size: names.end - names.start, cap: 1 << 20 });
    }
    let mut pieces = pieces;
    pieces.add(source, names)?;
    let header = Elf::parse(&pieces)?;
    let table = header.sections(endian, &pieces)?;
    let found = table
        .section_by_name(endian, name.as_bytes())
        .map(|(_, section)| Section { file: span(section, endian), address: section.sh_addr(endian).into() });
    Ok((machine, found))
}

/// The ELF header and section headers of `source`, read.
fn section_headers<Elf: FileHeader<Endian = Endianness>>(
    source: &(impl Positioned + ?Sized),
) -> Result<(Pieces, Endianness), SymbolsError> {
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
    Ok((pieces, endian))
}

fn find_in<Elf: FileHeader<Endian = Endianness>>(
    source: &(impl Positioned + ?Sized),
    names: &[&str],
    cap: u64,
    table: u32,
) -> Result<Vec<Found>, SymbolsError> {
    let (mut pieces, endian) = section_headers::<Elf>(source)?;
    let (symbols, strings) = {
        let sections = Elf::parse(&pieces)?.section_headers(endian, &pieces)?;
        let Some(symtab) = sections.iter().find(|s| s.sh_type(endian) == table) else { return Ok(Vec::new()) };
        let strings = usize::try_from(symtab.sh_link(endian)).ok().and_then(|link| sections.get(link));
        let strings = strings.ok_or(SymbolsError::Malformed("dynamic symbols without a string table"))?;
        (span(symtab, endian), span(strings, endian))
    };
    let size = (symbols.end - symbols.start).saturating_add(strings.end - strings.start);
    if size > cap {
        return Err(SymbolsError::TooLarge { size, cap });
    }
    pieces.add(source, symbols)?;
    pieces.add(source, strings)?;
    let header = Elf::parse(&pieces)?;
    let sections = header.section_headers(endian, &pieces)?;
    let symbols = header.sections(endian, &pieces)?.symbols(endian, &pieces, table)?;
    let mut found = Vec::new();
    for symbol in symbols.iter() {
        let shndx = symbol.st_shndx(endian);
        if shndx == SHN_UNDEF || shndx >= object::elf::SHN_LORESERVE {
            continue;
        }
        let Ok(name) = symbols.symbol_name(endian, symbol) else { continue };
        let Some(index) = names.iter().position(|n| n.as_bytes() == name) else { continue };
        if found.iter().any(|f: &Found| f.index == index) {
            continue;
        }
        let Some(section) = sections.get(usize::from(shndx)) else { continue };
        let (value, address, offset): (u64, u64, u64) =
            (symbol.st_value(endian).into(), section.sh_addr(endian).into(), section.sh_offset(endian).into());
        let Some(at) = value.checked_sub(address).and_then(|o| o.checked_add(offset)) else { continue };
        found.push(Found { index, offset: at, size: symbol.st_size(endian).into() });
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
