//! Byte sizes, one syntax and one meaning everywhere: a spec's
//! `target_bytes`, `--memory-limit` and `--cache-budget` on the command
//! line, `$TESSERA_SHARD_CACHE_BYTES` in the environment.
//!
//! A size is a number of bytes, or a number with a unit, with an optional
//! space and an optional fraction (`1.5GiB`), rounded down to whole bytes:
//!
//! | unit | bytes |
//! |------|-------|
//! | (none), `B` | 1 |
//! | `KB`, `MB`, `GB`, `TB` | powers of 1000: 10^3, 10^6, 10^9, 10^12 |
//! | `KiB`, `MiB`, `GiB`, `TiB` | powers of 1024: 2^10, 2^20, 2^30, 2^40 |
//! | `K`, `M`, `G`, `T` | powers of 1024, as in GNU `dd` and `sort -S` |
//!
//! Units are case-insensitive.

/// The number of bytes `text` names (see the module documentation), or an
/// error that quotes it and shows the syntax.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    let bad = || {
        format!(
            "cannot read {text:?} as a size; write a number of bytes or a number with a unit \
             (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. \"64MiB\""
        )
    };
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        _ => return Err(bad()),
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() && frac.is_empty() || frac.contains('.') || frac.len() > 18 {
        return Err(bad());
    }
    let digits = format!("{whole}{frac}");
    let mantissa: u128 = digits.parse().map_err(|_| bad())?;
    let scale = 10u128.pow(frac.len() as u32);
    let bytes = mantissa
        .checked_mul(multiplier)
        .map(|b| b / scale)
        .ok_or_else(bad)?;
    u64::try_from(bytes).map_err(|_| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("123", 123),
            ("65536", 65536),
            ("4096 B", 4096),
            ("1.5", 1),
            ("500MB", 500_000_000),
            ("500mb", 500_000_000),
            ("2 MB", 2_000_000),
            ("2GB", 2_000_000_000),
            ("1kb", 1000),
            ("3TB", 3_000_000_000_000),
            ("64KiB", 65536),
            ("64MiB", 64 << 20),
            ("64 MiB", 64 << 20),
            ("1GiB", 1 << 30),
            ("1.5GiB", 3 << 29),
            ("2TiB", 2 << 40),
            ("1.5G", 3 << 29),
            ("64k", 65536),
            ("20M", 20 << 20),
            (" 7 gib ", 7 << 30),
            (".5KiB", 512),
            ("0.001KB", 1),
        ];
        for &(text, bytes) in table {
            assert_eq!(parse_size(text), Ok(bytes), "{text:?}");
        }
    }

    #[test]
    fn bad_sizes_are_refused_with_the_syntax() {
        for text in [
            "", "lots", "5X", "64 megs", "MiB", ".", "1.2.3MiB", "-5MiB", "1e3", "2XB",
        ] {
            let err = parse_size(text).unwrap_err();
            assert!(err.contains(&format!("{text:?}")), "{err}");
        }
        assert!(parse_size("99999999999999TiB").is_err());
        assert!(parse_size("18446744073709551616").is_err());
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }
}
