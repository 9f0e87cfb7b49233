//! Opaque names for addresses in a target's memory. A futex word's address says where the
//! target's heap or a library lies; sent off the host in an alert, it would undo the target's
//! address-space randomization. Evidence needs only to tell words apart ("every worker waits
//! on the same word"), so each address is named by a hash keyed with a secret of this daemon
//! run: the same word keeps its name while the daemon runs, and the name reveals nothing.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// The name of futex word `uaddr` in evidence: `futex-` and 12 hex digits.
pub fn futex_word(uaddr: u64) -> String {
    // std's hasher is SipHash with a random 128-bit key: a keyed function, not a fast mixer.
    static KEY: OnceLock<RandomState> = OnceLock::new();
    let hash = KEY.get_or_init(RandomState::new).hash_one(uaddr);
    format!("futex-{:012x}", hash >> 16)
}

#[cfg(test)]
mod tests {
    use super::futex_word;

    #[test]
    fn a_word_keeps_its_name_and_the_name_hides_the_address() {
        let addr = 0x7f3a_1c2b_4d60_u64;
        let name = futex_word(addr);
        assert_eq!(name, futex_word(addr), "the same word, the same name");
        assert_ne!(name, futex_word(addr + 4), "another word, another name");
        assert_eq!(name.len(), "futex-".len() + 12);
        assert!(!name.contains("7f3a") && !name.contains("4d60"), "{name}");
    }
}
