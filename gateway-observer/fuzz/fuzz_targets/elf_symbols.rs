//! The symbolizer's ELF input: any bytes as the file behind a process's executable mappings (the
//! target chooses its binaries and libraries). The symbol table must come out sorted, and every
//! address at the edge of a segment or symbol, through each mapping, named without a panic.

#![no_main]

use gateway_observer::symbolize::fuzzing::Parsed;
use libfuzzer_sys::fuzz_target;

/// The file mapped three ways, as loaders do: from offset 0 at a PIE base, a text segment at its
/// page offset, and one at the top of the address space.
const MAPS: &str = "\
555555554000-555555556000 r-xp 00000000 fd:00 12 /usr/bin/gateway
7f0000001000-7f0000100000 r-xp 00001000 fd:00 13 /usr/lib/libgateway.so
ffffffffff600000-ffffffffff601000 r-xp 00000000 00:00 0 /usr/lib/libedge.so
";

fuzz_target!(|bytes: &[u8]| {
    let parsed = Parsed::new(MAPS, "", bytes);
    let addresses = parsed.symbol_addresses();
    assert!(addresses.windows(2).all(|w| w[0] < w[1]), "symbols not sorted and distinct");
    for ip in parsed.edges() {
        assert!(!parsed.name(ip).is_empty());
    }
});
