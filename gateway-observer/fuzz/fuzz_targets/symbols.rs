//! The symbolizer's text inputs: a /proc/PID/maps and a /tmp/perf-PID.map (any local user can
//! write one for any pid), separated by the first NUL byte. Every address at the edge of what
//! was parsed is named, as stacks are: no panic, and an address no mapping holds is `[unknown]`.

#![no_main]

use gateway_observer::symbolize::fuzzing::Parsed;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let (maps, perf_map) = match bytes.iter().position(|b| *b == 0) {
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (bytes, &[][..]),
    };
    let (maps, perf_map) = (String::from_utf8_lossy(maps), String::from_utf8_lossy(perf_map));
    let parsed = Parsed::new(&maps, &perf_map, &[]);
    let (mappings, entries, _) = parsed.counts();
    assert!(mappings <= maps.lines().count() && entries <= perf_map.lines().count());
    for ip in parsed.edges().into_iter().chain([0, u64::MAX]) {
        assert!(!parsed.name(ip).is_empty());
    }
});
