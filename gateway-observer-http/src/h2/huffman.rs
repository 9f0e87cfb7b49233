//! HPACK Huffman strings decoded (RFC 7541 §5.2): only to learn a string's decoded length (the
//! dynamic table counts it) and the few pseudo-header values kept.

use std::sync::OnceLock;

use super::huffman_table::CODES;

/// The code's tree has 256 internal nodes (257 leaves with EOS); a decoding state is one of
/// them, the root being 0. From each state, each 4-bit nibble leads to a [`Step`]: the shortest
/// code is 5 bits, so a nibble completes at most one symbol.
const STATES: usize = 256;

/// One nibble's transition: the state after it, and the symbol it completed if any.
#[derive(Clone, Copy, Default)]
struct Step {
    next: u8,
    /// `EMITS` when `symbol` was completed; `FAILS` when the nibble completed EOS (never valid
    /// inside a string).
    flags: u8,
    symbol: u8,
}

const EMITS: u8 = 1;
const FAILS: u8 = 2;

struct Machine {
    steps: Vec<[Step; 16]>,
    /// States whose path from the root is all ones and shorter than 8 bits: where a string may
    /// end (its padding is the start of EOS, RFC 7541 §5.2).
    may_end: [bool; STATES],
}

/// A node of the code's tree while the machine is built: internal (children) or a leaf
/// (symbol 0..=255, or 256 for EOS).
#[derive(Clone, Copy)]
enum Node {
    Inner([Option<usize>; 2]),
    Leaf(u16),
}

const EOS: (u32, u8) = (0x3fff_ffff, 30);

fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(build)
}

/// Builds the tree from the codes, numbers its internal nodes as states, and steps every
/// nibble from every state.
fn build() -> Machine {
    let mut nodes = vec![Node::Inner([None, None])];
    for (symbol, &(code, len)) in (0u16..).zip(CODES.iter().chain([&EOS])) {
        let mut at = 0;
        for bit in (0..len).rev() {
            let side = usize::from((code >> bit) & 1 == 1);
            let Node::Inner(children) = nodes[at] else { unreachable!("a code is a prefix of another") };
            at = match children[side] {
                Some(child) => child,
                None => {
                    nodes.push(if bit == 0 { Node::Leaf(symbol) } else { Node::Inner([None, None]) });
                    let child = nodes.len() - 1;
                    let mut children = children;
                    children[side] = Some(child);
                    nodes[at] = Node::Inner(children);
                    child
                }
            };
        }
    }
    // Internal nodes in creation order are the states (the root first).
    let mut state_of = vec![0u8; nodes.len()];
    let mut inner = Vec::with_capacity(STATES);
    for (index, node) in nodes.iter().enumerate() {
        if matches!(node, Node::Inner(_)) {
            state_of[index] = u8::try_from(inner.len()).expect("256 internal nodes");
            inner.push(index);
        }
    }
    let child = |index: usize, bit: usize| match nodes[index] {
        Node::Inner(children) => children[bit].expect("the code is complete"),
        Node::Leaf(_) => unreachable!("only internal nodes step"),
    };
    let mut steps = vec![[Step::default(); 16]; inner.len()];
    for (state_steps, &from) in steps.iter_mut().zip(&inner) {
        for (nibble, slot) in state_steps.iter_mut().enumerate() {
            let mut at = from;
            let mut step = Step::default();
            for bit in (0..4).rev() {
                at = child(at, (nibble >> bit) & 1);
                if let Node::Leaf(symbol) = nodes[at] {
                    match u8::try_from(symbol) {
                        Ok(symbol) => (step.flags, step.symbol) = (step.flags | EMITS, symbol),
                        Err(_) => step.flags |= FAILS,
                    }
                    at = 0;
                }
            }
            step.next = state_of[at];
            *slot = step;
        }
    }
    let mut may_end = [false; STATES];
    let mut at = 0;
    may_end[0] = true;
    for _ in 1..8 {
        at = child(at, 1);
        may_end[usize::from(state_of[at])] = true;
    }
    Machine { steps, may_end }
}

/// Decodes `input` into `out` (cleared first, then at most `limit` bytes kept); returns the
/// decoded length, or None when the input is not valid Huffman (EOS inside it, or padding that
/// is not a prefix of EOS shorter than 8 bits).
pub fn decode(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Option<usize> {
    let machine = machine();
    out.clear();
    let mut decoded = 0usize;
    let mut state = 0u8;
    for byte in input {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = machine.steps.get(usize::from(state))?.get(usize::from(nibble))?;
            if step.flags & FAILS != 0 {
                return None;
            }
            if step.flags & EMITS != 0 {
                if out.len() < limit {
                    out.push(step.symbol);
                }
                decoded += 1;
            }
            state = step.next;
        }
    }
    machine.may_end[usize::from(state)].then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_7541_examples() {
        let mut out = Vec::new();
        // C.4.1: "www.example.com".
        let www = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        assert_eq!(decode(&www, &mut out, 64), Some(15));
        assert_eq!(out, b"www.example.com");
        // C.4.2: "no-cache".
        assert_eq!(decode(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], &mut out, 64), Some(8));
        assert_eq!(out, b"no-cache");
        // C.6.1: "302".
        assert_eq!(decode(&[0x64, 0x02], &mut out, 64), Some(3));
        assert_eq!(out, b"302");
    }

    #[test]
    fn bad_padding_refused() {
        let mut out = Vec::new();
        // "0" is 00000 (5 bits); padding of zeros is invalid.
        assert_eq!(decode(&[0x00], &mut out, 8), None);
        assert_eq!(decode(&[0x07], &mut out, 8), Some(1));
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff, 0xff], &mut out, 8), None);
    }

    /// Every symbol alone and all of them in a row, each padded with ones, decode back; the
    /// machine agrees with the code table it was built from.
    #[test]
    fn every_symbol_round_trips() {
        let encode = |symbols: &[u8]| -> Vec<u8> {
            let (mut bits, mut len, mut out) = (0u64, 0u32, Vec::new());
            for &symbol in symbols {
                let (code, code_len) = CODES[usize::from(symbol)];
                bits = (bits << code_len) | u64::from(code);
                len += u32::from(code_len);
                while len >= 8 {
                    len -= 8;
                    out.push((bits >> len) as u8);
                }
            }
            if len > 0 {
                out.push(((bits << (8 - len)) as u8) | ((1u8 << (8 - len)) - 1));
            }
            out
        };
        let mut out = Vec::new();
        for symbol in 0..=255u8 {
            assert_eq!(decode(&encode(&[symbol]), &mut out, 8), Some(1), "symbol {symbol}");
            assert_eq!(out, [symbol]);
        }
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        assert_eq!(decode(&encode(&all), &mut out, 1024), Some(all.len()));
        assert_eq!(out, all);
    }

    #[test]
    fn eos_inside_a_string_is_refused() {
        let mut out = Vec::new();
        // EOS (30 ones) then two more ones of padding.
        assert_eq!(decode(&[0xff; 4], &mut out, 8), None);
        // "a" (00011) then 30 ones: EOS whole after a symbol.
        assert_eq!(decode(&[0x1f, 0xff, 0xff, 0xff, 0xfc | 0x03], &mut out, 8), None);
    }

    #[test]
    fn limit_bounds_what_is_kept() {
        let mut out = Vec::new();
        let www = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        assert_eq!(decode(&www, &mut out, 3), Some(15));
        assert_eq!(out, b"www");
    }
}
