//! Where a CPython binary (Debian's static `python3.11`) or libpython (a shared build's) keeps
//! its interpreter state, as its dynamic symbols say: `_PyRuntime` (every interpreter and thread
//! state hangs from it) and `Py_Version` (`PY_VERSION_HEX`, in the file's read-only data; from
//! 3.11 on), which picks the struct layout `stacks::python` reads the process's memory with.
//! Both are exported for debuggers and profilers, so a stripped binary has them too.

use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

/// A CPython's runtime state as its file states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonSymbols {
    /// `PY_VERSION_HEX`: 0x030B07F0 is 3.11.7 final.
    pub version: u32,
    /// `_PyRuntime`'s address in the file.
    pub runtime: u64,
}

/// The file's CPython symbols, if it is a CPython of 3.11 or later.
pub(super) fn python_symbols(file: &object::File) -> Option<PythonSymbols> {
    let find = |name: &str| file.dynamic_symbols().chain(file.symbols()).find(|s| s.name() == Ok(name));
    let runtime = find("_PyRuntime")?.address();
    let version = find("Py_Version")?;
    let section = file.section_by_index(version.section_index()?).ok()?;
    let at = usize::try_from(version.address().checked_sub(section.address())?).ok()?;
    let data = section.data().ok()?;
    let bytes: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    let version = if file.is_little_endian() { u32::from_le_bytes(bytes) } else { u32::from_be_bytes(bytes) };
    (runtime != 0).then_some(PythonSymbols { version, runtime })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine's own CPythons, where they are: Debian's stripped static binary and pyenv's
    /// libpython.
    #[test]
    fn cpython_files_name_their_version_and_runtime() {
        for (path, major_minor) in [
            ("/usr/bin/python3.11", 0x030B),
            ("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0", 0x030B),
            ("/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0", 0x030C),
        ] {
            let Ok(bytes) = std::fs::read(path) else {
                eprintln!("{path} not here: skipped");
                continue;
            };
            let file = object::File::parse(&*bytes).expect("an ELF file");
            let symbols = python_symbols(&file).unwrap_or_else(|| panic!("no CPython symbols in {path}"));
            assert_eq!(symbols.version >> 16, major_minor, "{path}: {:#x}", symbols.version);
            assert!(symbols.runtime > 0, "{path}");
        }
        let libc = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
        assert_eq!(python_symbols(&object::File::parse(&*libc).expect("ELF")), None, "libc is no CPython");
    }
}
