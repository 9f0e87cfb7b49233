use super::*;
use crate::parser::MAX_PATH;
use crate::redact::RequestPath;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

#[test]
fn rfc_7541_c3_requests_without_huffman() {
    let mut d = Decoder::new();
    let f = d.decode(&hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"), true);
    assert_eq!((f.method, f.path.as_ref().map(RequestPath::as_str), d.entries()), (Some(Method::Get), Some("/"), 1));
    let f = d.decode(&hex("8286 84be 5808 6e6f 2d63 6163 6865"), true);
    assert_eq!((f.method, f.path.as_ref().map(RequestPath::as_str), d.entries()), (Some(Method::Get), Some("/"), 2));
    let f = d.decode(&hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"), true);
    assert_eq!((f.path.as_ref().map(RequestPath::as_str), d.entries(), d.size), (Some("/index.html"), 3, 164));
    assert_eq!(d.broken_blocks(), 0);
}

/// C.5 with a 256-byte table (set here by a size update): entries evicted as the RFC shows,
/// and a later reference to the newest entry finds the status it holds.
#[test]
fn rfc_7541_c5_responses_with_eviction() {
    let mut d = Decoder::new();
    let mut c51 = hex("3fe1 01");
    c51.extend(hex(
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 \
         474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    ));
    assert_eq!(d.decode(&c51, true).status, Some(302));
    assert_eq!((d.entries(), d.size), (4, 222));
    assert_eq!(d.decode(&hex("4803 3330 37c1 c0bf"), true).status, Some(307));
    assert_eq!((d.entries(), d.size), (4, 222));
    assert_eq!(d.decode(&hex("be"), true).status, Some(307));
    let c53 = hex(
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 \
         666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 \
         3630 303b 2076 6572 7369 6f6e 3d31",
    );
    assert_eq!(d.decode(&c53, true).status, Some(200));
    assert_eq!((d.entries(), d.size), (3, 215));
}

#[test]
fn rfc_7541_c6_responses_with_huffman() {
    let mut d = Decoder::new();
    let mut c61 = hex("3fe1 01");
    c61.extend(hex(
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 \
         63c7 8f0b 97c8 e9ae 82ae 43d3",
    ));
    assert_eq!(d.decode(&c61, true).status, Some(302));
    assert_eq!((d.entries(), d.size), (4, 222));
    assert_eq!(d.decode(&hex("4883 640e ffc1 c0bf"), true).status, Some(307));
    assert_eq!((d.entries(), d.size), (4, 222));
}

/// A connection first seen mid-way: references to entries never seen yield nothing, static
/// ones still give the status, and entries added from then on are found.
#[test]
fn midway_start_keeps_static_and_new_entries() {
    let mut d = Decoder::new();
    assert_eq!(d.decode(&hex("be"), true), Fields::default());
    assert_eq!(d.decode(&hex("88 c5"), true).status, Some(200));
    assert_eq!(d.decode(&hex("4803 3330 37"), true).status, Some(307));
    assert_eq!(d.decode(&hex("be"), true).status, Some(307));
}

#[test]
fn partial_block_forgets_the_table() {
    let mut d = Decoder::new();
    d.decode(&hex("4803 3330 37"), true);
    // A literal cut short: what came before it is still read.
    let f = d.decode(&hex("8d 4803 33"), false);
    assert_eq!(f.status, Some(404));
    assert_eq!((d.entries(), d.broken_blocks()), (0, 1));
    assert_eq!(d.decode(&hex("be"), true).status, None);
}

#[test]
fn grpc_status_and_long_path() {
    let mut d = Decoder::new();
    let mut block = hex("40 0b");
    block.extend(b"grpc-status");
    block.extend(hex("01"));
    block.extend(b"0");
    assert_eq!(d.decode(&block, true).grpc_status, Some(0));
    let long = format!("/{}?q=1", "a".repeat(200));
    let mut block = vec![0x04, 0x7f, u8::try_from(long.len() - 127).unwrap()];
    block.extend(long.as_bytes());
    let path = d.decode(&block, true).path.unwrap();
    assert_eq!(path.as_str().len(), MAX_PATH);
    // Identifiers in a path are redacted as in HTTP/1.x.
    let mut block = vec![0x04, 24];
    block.extend(b"/users/12345/orders?x=1");
    block.push(b'2');
    assert_eq!(d.decode(&block, true).path.map(|p| p.redacted()).as_deref(), Some("/users/{id}/orders"));
}

#[test]
fn table_size_capped() {
    let mut d = Decoder::new();
    // A size update to 2^20: capped; then 3000 inserts of 40-byte entries stay within the cap.
    let mut block = vec![0x3f];
    block.extend(hex("e1ff3f"));
    d.decode(&block, true);
    assert_eq!(d.max_size, MAX_TABLE_SIZE);
    for _ in 0..3000 {
        d.decode(&hex("4001 6101 62"), true);
    }
    assert!(d.size <= MAX_TABLE_SIZE && d.entries() == MAX_TABLE_SIZE / 34, "{} {}", d.size, d.entries());
}

/// The `hpack_decoder` fuzz target's seeds: the RFC 7541 examples above, each block prefixed by
/// its length and a flag byte (1: whole).
#[test]
fn committed_hpack_seed_corpus_matches_the_examples() {
    let runs: [(&str, &[&str]); 2] = [
        ("rfc7541_c3", &["8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", "8286 84be 5808 6e6f 2d63 6163 6865"]),
        (
            "rfc7541_c6",
            &[
                "3fe1 01 4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d \
             29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ffc1 c0bf",
            ],
        ),
    ];
    let seeds: Vec<_> = runs
        .iter()
        .map(|(name, blocks)| {
            let mut input = Vec::new();
            for block in *blocks {
                let block = hex(block);
                input.extend([u8::try_from(block.len()).unwrap(), 1]);
                input.extend(block);
            }
            (*name, input)
        })
        .collect();
    crate::replay::tests::check_corpus("hpack_decoder", &seeds);
}
