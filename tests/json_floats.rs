//! Frozen statistics travel as JSON: in the manifest (read back by the
//! reader, the serving transform and Python) and between the tasks of a
//! distributed build (statistics frozen by one process, applied by others).
//! Every f64 must read back to the same bits, or a task would standardize
//! with a mean one unit in the last place off the local build's and the
//! shards would differ. serde_json's default float parser is not correctly
//! rounded for 17-digit numbers; the workspace enables `float_roundtrip`.

/// xorshift64*: a fixed sequence of doubles of every magnitude.
fn doubles(n: usize) -> Vec<f64> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|i| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
            match i % 3 {
                // Any finite bit pattern.
                0 => {
                    let x = f64::from_bits(r);
                    if x.is_finite() { x } else { r as f64 }
                }
                // Means and deviations of typical features.
                1 => (r >> 11) as f64 / (1u64 << 53) as f64 * 10.0,
                _ => ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e6,
            }
        })
        .collect()
}

#[test]
fn every_double_reads_back_from_json_to_the_same_bits() {
    let xs = doubles(200_000);
    let text = serde_json::to_string(&xs).expect("json");
    let back: Vec<f64> = serde_json::from_str(&text).expect("parse");
    let value: serde_json::Value = serde_json::from_str(&text).expect("value");
    let via_value: Vec<f64> = serde_json::from_value(value).expect("from value");
    for ((x, y), z) in xs.iter().zip(&back).zip(&via_value) {
        assert_eq!(x.to_bits(), y.to_bits(), "{x:?} read back as {y:?}");
        assert_eq!(
            x.to_bits(),
            z.to_bits(),
            "{x:?} read back as {z:?} via Value"
        );
    }
}

#[test]
fn the_mean_that_differed_reads_back_exactly() {
    // A mean from the Criteo-like set that read back one unit off.
    let x: f64 = 1.351_520_738_636_859_7;
    let back: f64 = serde_json::from_str(&serde_json::to_string(&x).expect("json")).expect("parse");
    assert_eq!(x.to_bits(), back.to_bits());
}
