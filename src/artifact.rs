//! Naming an artifact the way people do: a shard-set directory or URL, the
//! spec that builds it, a hash prefix, or a dataset name; and exporting an
//! artifact out of the cache into a directory of one's choosing (`tessera
//! build -o DIR`).

use crate::cache::{Cache, CacheEntry};
use crate::error::BuildError;
use std::path::{Path, PathBuf};
use tessera_reader::durable::{TempPath, remove_all, sync_file, temp_sibling};

/// Finds the shard set `arg` names:
///
/// 0. an object-store or `file://` URL: itself (the reader opens it);
/// 1. a directory holding `manifest.json`: that directory;
/// 2. a spec file: the artifact it builds, if it is in the cache (the inputs
///    are fingerprinted, nothing is built);
/// 3. a hash prefix of at least 4 hex digits matching one cached artifact;
/// 4. a dataset name: the most recently used cached artifact of that name.
pub fn resolve(arg: &str, cache_dir: Option<&Path>) -> Result<PathBuf, BuildError> {
    if tessera_reader::is_store_url(arg) || arg.starts_with("file://") {
        return Ok(PathBuf::from(arg));
    }
    let path = Path::new(arg);
    if path.is_dir() {
        if path.join("manifest.json").is_file() {
            return Ok(path.to_path_buf());
        }
        return Err(BuildError::Other(format!(
            "{arg} is a directory without a manifest.json, so not a shard set"
        )));
    }
    if path.is_file() {
        return from_spec(path, cache_dir);
    }
    let cache = Cache::resolve(cache_dir)?;
    let entries: Vec<CacheEntry> = cache
        .list()?
        .into_iter()
        .filter(|e| e.problem.is_none())
        .collect();
    let is_hex = arg.len() >= 4 && arg.chars().all(|c| c.is_ascii_hexdigit());
    if is_hex {
        let lower = arg.to_ascii_lowercase();
        let hits: Vec<&CacheEntry> = entries
            .iter()
            .filter(|e| e.hash.starts_with(&lower))
            .collect();
        match hits.as_slice() {
            [one] => return Ok(one.path.clone()),
            [] => {}
            many => {
                let names: Vec<String> = many.iter().map(|e| e.hash[..16].to_string()).collect();
                return Err(BuildError::Other(format!(
                    "hash prefix {arg} matches {} cached artifacts ({}); give more digits",
                    many.len(),
                    names.join(", ")
                )));
            }
        }
    }
    // `list` is most recently used first.
    if let Some(e) = entries.iter().find(|e| e.name == arg) {
        return Ok(e.path.clone());
    }
    Err(BuildError::Other(format!(
        "{arg} is not a shard-set directory, a spec file, a cached hash prefix or the name of a \
         cached dataset (cache: {})",
        cache.root().display()
    )))
}

fn from_spec(spec: &Path, cache_dir: Option<&Path>) -> Result<PathBuf, BuildError> {
    let (hash, cache) = crate::build::artifact_hash(spec, cache_dir)?;
    match cache.lookup(&hash)? {
        Some(a) => Ok(a.path),
        None => Err(BuildError::Other(format!(
            "{} has not been built with these inputs (artifact {}); run: tessera build {}",
            spec.display(),
            &hash[..16],
            spec.display()
        ))),
    }
}

/// Makes `dest` a copy of the shard set at `src`: shards hard-linked (they are
/// never modified once published, and a link survives `cache gc`), copied
/// when the two are on different file systems; the manifest copied last. The
/// new directory is assembled beside `dest` and renamed into place, replacing
/// an earlier export; anything else already at `dest` is left alone and is an
/// error.
pub fn export(src: &Path, dest: &Path) -> Result<(), BuildError> {
    let io = |what: &Path, e: std::io::Error| BuildError::io(what, e);
    if dest.exists() {
        let ours = dest.join("manifest.json").is_file();
        let empty = dest.is_dir()
            && std::fs::read_dir(dest)
                .map_err(|e| io(dest, e))?
                .next()
                .is_none();
        if !ours && !empty {
            return Err(BuildError::Other(format!(
                "{} exists and is not a shard set written by tessera; choose another -o directory",
                dest.display()
            )));
        }
    }
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    // Removed on any failure below.
    let tmp = TempPath::create_dir_beside(dest)?;
    let manifest = read_manifest(src)?;
    for s in &manifest.shards {
        let (from, to) = (src.join(&s.file), tmp.path().join(&s.file));
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(|e| io(&from, e))?;
            sync_file(&to)?;
        }
    }
    for extra in sidecars(src)? {
        let (from, to) = (src.join(&extra), tmp.path().join(&extra));
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(|e| io(&from, e))?;
        }
    }
    let (from, to) = (src.join("manifest.json"), tmp.path().join("manifest.json"));
    std::fs::copy(&from, &to).map_err(|e| io(&from, e))?;
    sync_file(&to)?;
    if dest.exists() {
        // The earlier export goes aside, and comes back if the new one
        // cannot take its place.
        let old = temp_sibling(dest);
        std::fs::rename(dest, &old).map_err(|e| io(dest, e))?;
        if let Err(e) = std::fs::rename(tmp.path(), dest) {
            let _ = std::fs::rename(&old, dest);
            return Err(io(dest, e));
        }
        tmp.keep();
        remove_all(&old)?;
    } else {
        std::fs::rename(tmp.path(), dest).map_err(|e| io(dest, e))?;
        tmp.keep();
    }
    Ok(())
}

/// Files of a shard set besides the manifest and the shards it lists.
fn sidecars(src: &Path) -> Result<Vec<String>, BuildError> {
    let manifest = read_manifest(src)?;
    let shards: std::collections::HashSet<&str> =
        manifest.shards.iter().map(|s| s.file.as_str()).collect();
    let mut out = Vec::new();
    let rd = std::fs::read_dir(src).map_err(|e| BuildError::io(src, e))?;
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "manifest.json"
            && !name.starts_with('.')
            && !shards.contains(name.as_str())
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn read_manifest(dir: &Path) -> Result<tessera_reader::Manifest, BuildError> {
    let path = dir.join("manifest.json");
    let bytes = std::fs::read(&path).map_err(|e| BuildError::io(&path, e))?;
    Ok(tessera_reader::Manifest::parse(&bytes, &path)?)
}
