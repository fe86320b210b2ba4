//! The local shard cache: where shards of remote sets, and decompressed
//! shards of compressed sets, are kept on local disk to be memory-mapped.
//!
//! - Files are named by the blake3 of the (decompressed) shard, so sets and
//!   processes that hold the same shard share one copy. A file is written as
//!   `<hash>.part`, verified against the manifest's blake3, fsynced and only
//!   then renamed to `<hash>.shard`: a crash or a corrupt transfer never
//!   leaves a bad file under a good name.
//! - A byte budget bounds the directory. When a shard must come in and the
//!   budget is full, the cached shard whose next use is furthest in the
//!   future goes (Belady's rule: the reader knows the order of this epoch
//!   and the next from `(seed, epoch, rank)`), and never one whose next use
//!   comes before the incoming shard's: the prefetcher then waits instead.
//!   A shard mapped by any process is never removed, and nothing but
//!   `<hash>.shard` and stale `<hash>.part` files is ever deleted.
//! - Processes share the directory through the file system alone: a shared
//!   `flock` on a cached file while it is mapped ("in use"), an exclusive
//!   one on a `.part` while it is written, and a lock file that serializes
//!   the check-evict-reserve step of admitting a new file, so the budget
//!   holds across processes.
//!
//! [`simulate`] replays an access sequence under Belady's rule and under LRU,
//! for comparing policies on the same sequence.

mod dir;
mod plan;
mod shards;
pub mod simulate;

pub use plan::AccessPlan;
pub(crate) use shards::{CachedShards, PinSet, PlanHandle};
pub use simulate::{Policy, SimReport, simulate};

use crate::durable::parse_size;
use crate::error::{Error, Result};
use std::path::PathBuf;

/// Environment variable naming the shard cache directory.
pub const CACHE_DIR_ENV: &str = "TESSERA_SHARD_CACHE";
/// Environment variable giving the default cache budget: a size as
/// [`parse_size`] reads it (`20GiB`, `500MB`; `MB` is 10^6 bytes, `MiB`
/// 2^20, as everywhere in tessera).
pub const CACHE_BYTES_ENV: &str = "TESSERA_SHARD_CACHE_BYTES";

/// Where the local copies of remote or compressed shards go, and how much
/// room they may take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheOptions {
    /// The cache directory. Default: `$TESSERA_SHARD_CACHE`, else
    /// `$XDG_CACHE_HOME/tessera/shards`, else `~/.cache/tessera/shards`.
    pub dir: Option<PathBuf>,
    /// Most bytes of shard files the directory may hold (shared by every
    /// process using it). Default: `$TESSERA_SHARD_CACHE_BYTES`, else no
    /// limit. Must be at least the largest shard of a set that is opened.
    pub budget: Option<u64>,
    /// Threads fetching (and decompressing) shards ahead of the reader.
    /// Default: 8 for remote sets (requests in flight hide the store's
    /// latency: at 20 ms per request, 8 threads fetched 1.6x what 4 did on
    /// loopback; a compressed shard is held in memory while it is fetched),
    /// the number of cores for local ones.
    pub fetch_threads: Option<usize>,
}

impl CacheOptions {
    /// The directory to use: the option, else the environment's default.
    pub fn resolved_dir(&self) -> Result<PathBuf> {
        if let Some(d) = &self.dir {
            return Ok(d.clone());
        }
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(d) = env(CACHE_DIR_ENV) {
            return Ok(PathBuf::from(d));
        }
        if let Some(d) = env("XDG_CACHE_HOME") {
            return Ok(PathBuf::from(d).join("tessera").join("shards"));
        }
        if let Some(h) = env("HOME") {
            return Ok(PathBuf::from(h)
                .join(".cache")
                .join("tessera")
                .join("shards"));
        }
        Err(Error::InvalidArgument(format!(
            "no shard cache directory: set {CACHE_DIR_ENV} or HOME, or pass a cache directory"
        )))
    }

    /// The budget to use: the option, else the environment's default.
    pub fn resolved_budget(&self) -> Result<Option<u64>> {
        if self.budget.is_some() {
            return Ok(self.budget);
        }
        budget_from_env(std::env::var(CACHE_BYTES_ENV).ok())
    }
}

/// The budget `$TESSERA_SHARD_CACHE_BYTES` (`value`) gives: none when unset
/// or blank.
fn budget_from_env(value: Option<String>) -> Result<Option<u64>> {
    match value {
        Some(v) if !v.trim().is_empty() => parse_size(&v)
            .map(Some)
            .map_err(|e| Error::InvalidArgument(format!("{CACHE_BYTES_ENV}: {e}"))),
        _ => Ok(None),
    }
}

/// What the cache did for one open set, since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheStats {
    /// Shards this process fetched (and decompressed) into the cache.
    pub fetched_shards: u64,
    /// Their size in the cache (decompressed).
    pub fetched_bytes: u64,
    /// Bytes read from the store for them (compressed size if compressed).
    pub transferred_bytes: u64,
    /// Shards found already in the cache directory (fetched before, or by
    /// another process).
    pub reused_shards: u64,
    /// Shards removed from the cache directory to make room.
    pub evicted_shards: u64,
    /// Their size.
    pub evicted_bytes: u64,
    /// Fetches that were retried after a failed or corrupt transfer.
    pub retries: u64,
    /// Shard requests that found the shard mapped already.
    pub hits: u64,
    /// Shard requests that had to wait for it to be fetched or mapped.
    pub misses: u64,
    /// Seconds spent reading from the store (summed over threads).
    pub fetch_seconds: f64,
    /// Seconds spent decompressing (summed over threads).
    pub decompress_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget from the environment is read as every other size is
    /// ([`parse_size`]): `2GB` is 2,000,000,000 bytes, `2GiB` 2^31.
    #[test]
    fn the_environments_budget_is_a_size() {
        let budget = |v: &str| budget_from_env(Some(v.to_owned()));
        assert_eq!(budget("123").unwrap(), Some(123));
        assert_eq!(budget("64KiB").unwrap(), Some(65536));
        assert_eq!(budget("1.5G").unwrap(), Some(3 << 29));
        assert_eq!(budget("2 MB").unwrap(), Some(2_000_000));
        assert_eq!(budget("2GB").unwrap(), Some(parse_size("2GB").unwrap()));
        assert_eq!(budget("2GB").unwrap(), Some(2_000_000_000));
        assert_eq!(budget("2GiB").unwrap(), Some(2 << 30));
        assert_eq!(budget("  ").unwrap(), None);
        assert_eq!(budget_from_env(None).unwrap(), None);
        for bad in ["lots", "5X"] {
            let err = budget(bad).unwrap_err().to_string();
            assert!(err.contains(CACHE_BYTES_ENV) && err.contains(bad), "{err}");
        }
        let given = CacheOptions {
            budget: Some(7),
            ..CacheOptions::default()
        };
        assert_eq!(given.resolved_budget().unwrap(), Some(7));
    }
}
