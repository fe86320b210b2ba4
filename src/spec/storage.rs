//! The `shards:` and `chunks:` sections of a spec, and the byte sizes they
//! take (`64MiB`, `2GB`, a bare number of bytes).

use super::read::{Ctx, Item, MapView};
use super::yaml::Kind;
use super::{Chunks, Shards, SpecError};

const SHARDS_KEYS: &[&str] = &["target_bytes", "compression", "level"];
/// zstd level when the spec gives none.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
const CHUNKS_KEYS: &[&str] = &["target_bytes", "partitions"];
/// Most partitions a global query may be cut into.
pub const MAX_PARTITIONS: u64 = 4096;

/// Default chunk size: 32 MiB of input per build task.
pub const DEFAULT_CHUNK_BYTES: u64 = 32 << 20;
/// Smallest accepted chunk size: 4 KiB.
pub const MIN_CHUNK_BYTES: u64 = 4 << 10;

/// Default shard size: 64 MiB.
pub const DEFAULT_TARGET_BYTES: u64 = 64 << 20;
/// Smallest accepted shard size: 64 KiB.
pub const MIN_TARGET_BYTES: u64 = 64 << 10;

pub(super) fn read_shards(ctx: &Ctx<'_>, top: &MapView<'_>) -> Result<Shards, SpecError> {
    let mut shards = Shards {
        target_bytes: DEFAULT_TARGET_BYTES,
        zstd_level: None,
    };
    let Some(owned) = top.get_some("shards") else {
        return Ok(shards);
    };
    let map = owned.item().map(ctx, SHARDS_KEYS)?;
    if let Some(owned) = map.get_some("target_bytes") {
        shards.target_bytes = read_size(ctx, &owned.item(), MIN_TARGET_BYTES, "64KiB")?;
    }
    if let Some(owned) = map.get_some("compression") {
        let item = owned.item();
        match item.string(ctx)? {
            "none" => {}
            "zstd" => shards.zstd_level = Some(DEFAULT_ZSTD_LEVEL),
            other => {
                return Err(item.error(
                    ctx,
                    format!("unknown compression {other:?}; use none or zstd"),
                ));
            }
        }
    }
    if let Some(owned) = map.get_some("level") {
        let item = owned.item();
        let levels = tessera_reader::ZSTD_LEVELS;
        if shards.zstd_level.is_none() {
            return Err(item.error(ctx, "level applies only to compression: zstd"));
        }
        let level = item.u64_at_least(ctx, 1)?;
        if level > *levels.end() as u64 {
            return Err(item.error(
                ctx,
                format!(
                    "zstd level {level} is not in {}..={}",
                    levels.start(),
                    levels.end()
                ),
            ));
        }
        shards.zstd_level = Some(level as i32);
    }
    Ok(shards)
}

pub(super) fn read_chunks(ctx: &Ctx<'_>, top: &MapView<'_>) -> Result<Chunks, SpecError> {
    let mut chunks = Chunks {
        target_bytes: DEFAULT_CHUNK_BYTES,
        partitions: None,
    };
    let Some(owned) = top.get_some("chunks") else {
        return Ok(chunks);
    };
    let map = owned.item().map(ctx, CHUNKS_KEYS)?;
    if let Some(owned) = map.get_some("target_bytes") {
        chunks.target_bytes = read_size(ctx, &owned.item(), MIN_CHUNK_BYTES, "4KiB")?;
    }
    if let Some(owned) = map.get_some("partitions") {
        let item = owned.item();
        chunks.partitions = match &item.node.kind {
            Kind::Str(s) if s == "auto" => None,
            Kind::Int(_) => {
                let n = item.u64_at_least(ctx, 1)?;
                if n > MAX_PARTITIONS {
                    return Err(item.error(
                        ctx,
                        format!("at most {MAX_PARTITIONS} partitions, found {n}"),
                    ));
                }
                Some(n as usize)
            }
            other => {
                return Err(item.error(
                    ctx,
                    format!(
                        "expected a number of partitions (1 or more) or \"auto\", found {}",
                        other.describe()
                    ),
                ));
            }
        };
    }
    Ok(chunks)
}

/// A byte count written as an integer or a size string, at least `min`
/// (`min_text` is how the message writes it).
fn read_size(ctx: &Ctx<'_>, item: &Item<'_>, min: u64, min_text: &str) -> Result<u64, SpecError> {
    let bytes = match &item.node.kind {
        Kind::Int(i) if *i < 0 => {
            return Err(item.error(
                ctx,
                format!("a size cannot be negative, found {i}; the smallest allowed is {min_text}"),
            ));
        }
        Kind::Int(_) => item.u64_at_least(ctx, 0)?,
        Kind::Str(s) => parse_size(s).map_err(|msg| item.error(ctx, msg))?,
        other => {
            return Err(item.error(
                ctx,
                format!(
                    "expected a byte count such as 67108864 or \"64MiB\", found {}",
                    other.describe()
                ),
            ));
        }
    };
    if bytes < min {
        return Err(item.error(
            ctx,
            format!("the size must be at least {min_text} ({min} bytes), found {bytes}"),
        ));
    }
    Ok(bytes)
}

/// Parses `"64MiB"`, `"1.5 GiB"`, `"500MB"`, `"65536"` into bytes: the one
/// size syntax of tessera ([`tessera_reader::durable::parse_size`]).
pub fn parse_size(text: &str) -> Result<u64, String> {
    tessera_reader::durable::parse_size(text)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("500mb"), Ok(500_000_000));
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("4096 B"), Ok(4096));
        assert!(parse_size("64 megs").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("1.2.3MiB").is_err());
        assert!(parse_size("-5MiB").is_err());
        assert!(parse_size("99999999999999TiB").is_err());
    }
}
