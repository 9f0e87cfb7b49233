//! Symbol names as their source spells them: Rust's (legacy `_ZN…17h<hash>E` and v0 `_R…`, by
//! rustc-demangle, without the hash) and C++'s (Itanium `_Z…`: a JVM's libjvm.so, envoy, node's
//! V8, by cpp_demangle, without parameter and return types, as Rust's and Java's frames read:
//! `v8::internal::FutexEmulation::WaitSync<int>`, not its seven parameters). Names come from the
//! target's files: one longer than [`MAX_MANGLED`] is shown as it is, the output stops at
//! [`MAX_DEMANGLED`], and the demangler's recursion is capped, so a crafted name can neither take
//! long nor overflow the worker's stack.

use std::{borrow::Cow, fmt};

/// Mangled names longer than this are not demangled (the longest in a JDK 17 libjvm.so are ~400).
pub const MAX_MANGLED: usize = 1024;
/// A demangled name is cut here: deep templates expand to kilobytes no alert needs.
pub const MAX_DEMANGLED: usize = 512;
/// Below cpp_demangle's own defaults (96 parsing, 128 printing), for the worker's 2 MiB stack.
const RECURSION: u32 = 64;

/// `name` demangled, or as it is when it is no mangled name (C's) or one past the caps.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if name.len() > MAX_MANGLED {
        return Cow::Borrowed(name);
    }
    let mut out = Bounded::default();
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        let written = fmt::Write::write_fmt(&mut out, format_args!("{rust:#}"));
        return out.finish(written).map_or(Cow::Borrowed(name), Cow::Owned);
    }
    if name.starts_with("_Z") {
        let parse = cpp_demangle::ParseOptions::default().recursion_limit(RECURSION);
        let print = cpp_demangle::DemangleOptions::new().no_params().no_return_type().recursion_limit(RECURSION);
        if let Ok(symbol) = cpp_demangle::Symbol::new_with_options(name.as_bytes(), &parse) {
            let written = symbol.structured_demangle(&mut out, &print);
            return out.finish(written).map_or(Cow::Borrowed(name), Cow::Owned);
        }
    }
    Cow::Borrowed(name)
}

/// A demangler's output that stops it at [`MAX_DEMANGLED`] bytes: substitutions can make a short
/// mangled name expand without bound.
#[derive(Default)]
struct Bounded {
    out: String,
    full: bool,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MAX_DEMANGLED - self.out.len();
        if s.len() <= room {
            self.out.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.out.push_str(&s[..end]);
        self.full = true;
        Err(fmt::Error)
    }
}

impl Bounded {
    /// The name written, cut with an ellipsis if it filled the cap; `None` if the demangler failed.
    fn finish(mut self, written: fmt::Result) -> Option<String> {
        match (written, self.full) {
            (Ok(()), _) => Some(self.out),
            (Err(_), true) => {
                self.out.push('…');
                Some(self.out)
            }
            (Err(_), false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_names_of_a_jvm_and_rust_names_lose_their_hash() {
        for (mangled, shown) in [
            // From a JDK 17 libjvm.so's dynamic symbols.
            ("_ZN2os5sleepEP6Threadl", "os::sleep"),
            ("_ZN10JavaThread3runEv", "JavaThread::run"),
            ("_ZN13PlatformEvent4parkEl", "PlatformEvent::park"),
            // Rust's legacy and v0 manglings.
            ("_ZN3std6thread5sleep17h0123456789abcdefE", "std::thread::sleep"),
            ("_RNvNtCs1234_3std6thread5sleep", "std::thread::sleep"),
        ] {
            assert_eq!(demangle(mangled), shown);
        }
    }

    #[test]
    fn c_names_and_what_is_no_valid_mangling_stay_as_they_are() {
        for name in ["clock_nanosleep", "_PyEval_EvalFrameDefault", "_Z", "_ZN3foo", "_Zzzz", ""] {
            assert_eq!(demangle(name), name);
        }
    }

    #[test]
    fn absurd_names_are_bounded() {
        // Deep nesting: refused by the recursion cap rather than overflowing the stack.
        let nested = format!("_Z1f{}i{}", "PFv".repeat(200), "E".repeat(200));
        assert!(nested.len() <= MAX_MANGLED);
        assert_eq!(demangle(&nested), nested, "past the recursion cap: as it is");
        let long = format!("_ZN{}3fooEv", "3abc".repeat(400));
        assert_eq!(demangle(&long), long, "past {MAX_MANGLED} bytes it is not demangled");
        // Many short template arguments: under the input cap, expanded past the output cap.
        let wide = format!("_Z1fI{}EvT_", "St6vectorIiSaIiEE".repeat(40));
        let shown = demangle(&wide);
        assert!(shown.starts_with("f<std::vector<int, std::allocator<int> >"), "{shown}");
        assert!(shown.len() <= MAX_DEMANGLED + '…'.len_utf8() && shown.ends_with('…'), "{} bytes", shown.len());
    }

    /// Every C++ name a JDK 17's libjvm.so has (where there is one): demangled, and how long it
    /// takes per name.
    #[test]
    fn a_jvms_names() {
        use object::{Object as _, ObjectSymbol as _};
        let Ok(bytes) = std::fs::read("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so") else {
            eprintln!("no JDK 17 here: skipped");
            return;
        };
        let file = object::File::parse(&*bytes).expect("ELF");
        let names: Vec<&str> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter_map(|s| s.name().ok())
            .filter(|n| n.starts_with("_Z"))
            .collect();
        let started = std::time::Instant::now();
        let kept = names.iter().filter(|n| demangle(n) == **n).count();
        let per_name = started.elapsed() / u32::try_from(names.len().max(1)).expect("count");
        eprintln!(
            "DEMANGLE_COST {per_name:?} a name over {} names of libjvm.so, {kept} left as they were",
            names.len()
        );
        assert!(names.len() > 1000 && kept * 100 <= names.len(), "{kept} of {} not demangled", names.len());
    }
}
