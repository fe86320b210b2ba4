//! Helpers the cache's unit tests share: artifact hashes, small real shard
//! sets written through the reader crate's writer, and a published artifact
//! made through the same lock-stage-publish path builds use.

use super::{Artifact, Cache};
use std::fs::{self, File, FileTimes};
use std::path::Path;
use std::time::{Duration, SystemTime};
use tessera_reader::{DType, FieldSpec, Manifest, RecordLayout, ShardSetWriter};

/// A distinct, valid artifact hash for each `n`.
pub(super) fn hash_n(n: u32) -> String {
    blake3::hash(&n.to_le_bytes()).to_hex().to_string()
}

/// Writes a small valid shard set into `dir`, manifest included.
pub(super) fn write_set(dir: &Path, hash: &str, rows: u32) -> Manifest {
    let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::U32, &[])]).unwrap();
    let mut w = ShardSetWriter::new(dir, layout, 4096 + 4 * 100).unwrap();
    w.begin_split("train").unwrap();
    for i in 0..rows {
        w.write_records(&i.to_le_bytes()).unwrap();
    }
    w.finish_with(|m| {
        m.artifact_hash = hash.to_owned();
        m.name = format!("set-{rows}");
    })
    .unwrap()
}

/// Locks `hash`, stages a set of `rows` records and publishes it.
pub(super) fn publish_new(cache: &Cache, hash: &str, rows: u32) -> Artifact {
    let lock = cache.lock(hash).unwrap();
    let staging = lock.stage().unwrap();
    let m = write_set(staging.path(), hash, rows);
    staging.publish(&m).unwrap()
}

/// The names in `dir`, sorted; empty if it does not exist.
pub(super) fn entries_of(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// Sets `path`'s modification time (an artifact's last use) to `ago` ago.
pub(super) fn set_last_used(path: &Path, ago: Duration) {
    File::open(path)
        .unwrap()
        .set_times(FileTimes::new().set_modified(SystemTime::now() - ago))
        .unwrap();
}
