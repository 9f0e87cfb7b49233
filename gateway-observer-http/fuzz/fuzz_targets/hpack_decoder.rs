//! Decodes any byte string as a run of HPACK header blocks (each prefixed by its length, u8, and
//! a flag byte: bit 0 set when the block was seen whole): no panic, the dynamic table within its
//! cap, and the kept fields bounded.

#![no_main]

use libfuzzer_sys::fuzz_target;

use gateway_observer_http::{
    h2::hpack::{Decoder, MAX_TABLE_SIZE},
    parser::MAX_PATH,
};

/// The smallest entry HPACK counts (an empty name and value).
const MIN_ENTRY: usize = 32;

fuzz_target!(|input: &[u8]| {
    let mut decoder = Decoder::new();
    let mut rest = input;
    while let [len, flags, after @ ..] = rest {
        let (block, next) = after.split_at(usize::from(*len).min(after.len()));
        let fields = decoder.decode(block, flags & 1 == 1);
        assert!(fields.path.map(|p| p.redacted()).is_none_or(|p| p.len() <= MAX_PATH && !p.contains(['?', '#'])));
        assert!(decoder.entries() <= MAX_TABLE_SIZE / MIN_ENTRY);
        rest = next;
    }
});
