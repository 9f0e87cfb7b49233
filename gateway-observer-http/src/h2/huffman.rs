//! HPACK Huffman strings decoded (RFC 7541 §5.2): only to learn a string's decoded length (the
//! dynamic table counts it) and the few pseudo-header values kept.

use std::sync::OnceLock;

use super::huffman_table::CODES;

/// Codes sorted by (length, code), and where each length's run starts.
struct Lookup {
    sorted: Vec<(u8, u32, u8)>,
    /// `starts[len]..starts[len + 1]` are the codes `len` bits long.
    starts: [usize; 32],
}

fn lookup() -> &'static Lookup {
    static LOOKUP: OnceLock<Lookup> = OnceLock::new();
    LOOKUP.get_or_init(|| {
        let mut sorted: Vec<(u8, u32, u8)> =
            CODES.iter().zip(0u8..=255).map(|(&(code, len), sym)| (len, code, sym)).collect();
        sorted.sort_unstable();
        let mut starts = [sorted.len(); 32];
        for (len, slot) in starts.iter_mut().enumerate().rev() {
            if let Some(first) = sorted.iter().position(|&(l, _, _)| usize::from(l) >= len) {
                *slot = first;
            }
        }
        Lookup { sorted, starts }
    })
}

/// Decodes `input` into `out` (cleared first, then at most `limit` bytes kept); returns the
/// decoded length, or None when the input is not valid Huffman (a code beyond 30 bits, or padding
/// that is not a prefix of EOS).
pub fn decode(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Option<usize> {
    let table = lookup();
    out.clear();
    let mut decoded = 0usize;
    let (mut code, mut len) = (0u32, 0u8);
    for byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len > 30 {
                return None;
            }
            let (from, to) = (table.starts[usize::from(len)], table.starts[usize::from(len) + 1]);
            let run = table.sorted.get(from..to).unwrap_or_default();
            if let Ok(i) = run.binary_search_by_key(&code, |&(_, c, _)| c)
                && let Some(&(_, _, sym)) = run.get(i)
            {
                if out.len() < limit {
                    out.push(sym);
                }
                decoded += 1;
                (code, len) = (0, 0);
            }
        }
    }
    // Padding: fewer than 8 bits, all ones (the start of EOS).
    (len < 8 && code == (1u32 << len) - 1).then_some(decoded)
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

    #[test]
    fn limit_bounds_what_is_kept() {
        let mut out = Vec::new();
        let www = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        assert_eq!(decode(&www, &mut out, 3), Some(15));
        assert_eq!(out, b"www");
    }
}
