//! `ShardHeader::decode` on arbitrary bytes: it must return `Ok` or a typed
//! error, never panic, and a decoded header must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tessera_reader::{HEADER_LEN, ShardHeader};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = ShardHeader::decode(data, Path::new("fuzz/shard-00000.bin")) {
        // Every byte of a valid header is either a field or must be zero, so
        // decoding is injective: re-encoding gives back the input's header.
        assert_eq!(&h.encode()[..], &data[..HEADER_LEN]);
    }
});
