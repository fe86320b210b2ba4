//! The text `tessera cache ls` and `tessera cache gc` print, and the sizes
//! and ages in it; also the parser of ages given on the command line
//! (`cache gc --older-than 7d`).
//!
//! Pure functions of their arguments: nothing here touches the disk, and
//! the time that ages are counted from is a parameter wherever a test
//! needs to fix it.

use super::{CacheEntry, GcReport};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A duration as an age in its largest whole unit: `42s`, `5m`, `3h`, `12d`.
pub fn format_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Parses an age such as `90s`, `30m`, `12h`, `7d` or `2w` (for
/// `cache gc --older-than`).
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not an age like 30m, 12h or 7d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(format!("{s:?}: the unit must be one of s, m, h, d, w")),
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// The table `tessera cache ls` prints, ages counted from now.
pub fn format_listing(entries: &[CacheEntry]) -> String {
    format_listing_at(entries, SystemTime::now())
}

/// [`format_listing`] with ages counted from `now`.
pub fn format_listing_at(entries: &[CacheEntry], now: SystemTime) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16}  {:<24}  {:>12}  {:>10}  {:>9}",
        "HASH", "NAME", "ROWS", "SIZE", "LAST USED"
    );
    for e in entries {
        let age = now
            .duration_since(e.last_used)
            .map(|d| format!("{} ago", format_age(d)))
            .unwrap_or_else(|_| "now".into());
        let rows = e.rows.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
        let name = match &e.problem {
            Some(_) if e.newer_format.is_some() => "(newer format)",
            Some(_) => "(unusable)",
            None if e.name.is_empty() => "-",
            None => e.name.as_str(),
        };
        let _ = writeln!(
            out,
            "{:<16}  {:<24}  {:>12}  {:>10}  {:>9}",
            e.hash.get(..16).unwrap_or(&e.hash),
            name,
            rows,
            format_bytes(e.bytes),
            age
        );
        match (&e.problem, e.newer_format) {
            (Some(p), Some(_)) => {
                let _ = writeln!(out, "  {p}");
            }
            (Some(p), None) => {
                let _ = writeln!(out, "  unusable: {p}");
            }
            _ => {}
        }
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let _ = writeln!(
        out,
        "{} artifact{}, {}",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        format_bytes(total)
    );
    out
}

/// The summary `tessera cache gc` prints.
pub fn format_gc_report(report: &GcReport, dry_run: bool) -> String {
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut out = String::new();
    for e in &report.removed {
        let why = e.problem.as_deref().map(|p| format!(" (unusable: {p})"));
        let _ = writeln!(
            out,
            "{verb} {} {} {}{}",
            e.hash,
            if e.name.is_empty() { "-" } else { &e.name },
            format_bytes(e.bytes),
            why.unwrap_or_default()
        );
    }
    for h in &report.skipped_in_use {
        let _ = writeln!(out, "kept {h}: a build of it is running");
    }
    for h in &report.skipped_open {
        let _ = writeln!(
            out,
            "kept {h}: open in a reader (a training job or a DataLoader worker); \
             --force removes it anyway"
        );
    }
    for (h, v) in &report.skipped_newer {
        let _ = writeln!(
            out,
            "kept {h}: written by a newer tessera (format version {v}); --force removes it"
        );
    }
    let _ = writeln!(
        out,
        "{verb} {} artifact{} and {} temporary item{}, {} in all; kept {}",
        report.removed.len(),
        if report.removed.len() == 1 { "" } else { "s" },
        report.temp_removed.len(),
        if report.temp_removed.len() == 1 {
            ""
        } else {
            "s"
        },
        format_bytes(report.freed_bytes()),
        report.kept
            + report.skipped_in_use.len()
            + report.skipped_open.len()
            + report.skipped_newer.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86400)));
        for bad in ["", "d", "7", "7y", "-1d", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_age(Duration::from_secs(59)), "59s");
        assert_eq!(format_age(Duration::from_secs(3 * 86400 + 5)), "3d");
    }

    /// The table at a fixed time, from hand-built entries: one sound, one
    /// unusable, and one whose hash is too short to abbreviate (entries can
    /// be built by anyone; the table must not panic on them).
    #[test]
    fn listing_at_a_fixed_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let entry = |hash: &str, name: &str, rows, bytes, ago, problem: Option<&str>| CacheEntry {
            hash: hash.into(),
            path: hash.into(),
            name: name.into(),
            rows,
            bytes,
            created: None,
            last_used: now - Duration::from_secs(ago),
            problem: problem.map(str::to_owned),
            newer_format: None,
        };
        let entries = [
            entry(&"ab".repeat(32), "flights", Some(1234), 2048, 90, None),
            entry(
                &"cd".repeat(32),
                "",
                None,
                512,
                3 * 86400,
                Some("manifest.json is missing"),
            ),
            entry("short", "", Some(0), 0, 0, None),
        ];
        let text = format_listing_at(&entries, now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[0].starts_with("HASH"), "{text}");
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "abababababababab",
                "flights",
                "1234",
                "2.0",
                "KiB",
                "1m",
                "ago"
            ]
        );
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "cdcdcdcdcdcdcdcd",
                "(unusable)",
                "-",
                "512",
                "B",
                "3d",
                "ago"
            ]
        );
        assert_eq!(lines[3], "  unusable: manifest.json is missing");
        assert!(lines[4].starts_with("short "), "{text}");
        assert_eq!(lines[5], "3 artifacts, 2.5 KiB");
    }
}
