//! `Manifest::parse` on arbitrary bytes: it must return `Ok` or a typed error,
//! never panic, and whatever it accepts must survive a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tessera_reader::Manifest;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz/manifest.json");
    let Ok(m) = Manifest::parse(data, path) else {
        return;
    };
    // An accepted manifest is internally consistent, so what it serializes to
    // must be accepted again with the same meaning. The free-form JSON parts
    // (stats, spec, ...) are left out of the comparison: their floats are
    // serde_json's business, not the format's.
    let again = Manifest::parse(&m.to_json(), path).expect("re-parse of an accepted manifest");
    assert_eq!(again.layout, m.layout);
    assert_eq!(again.layout_digest, m.layout_digest);
    assert_eq!(again.rows, m.rows);
    assert_eq!(again.shards, m.shards);
    assert_eq!(again.splits, m.splits);
    let covered: u64 = m.splits.iter().map(|s| s.rows).sum();
    assert_eq!(covered, m.rows);
});
