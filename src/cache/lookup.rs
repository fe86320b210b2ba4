//! Finding a published artifact, and the lookup-lock-build path.
//!
//! Invariants:
//! - An artifact counts only if it is sound: its manifest parses, names the
//!   hash of its directory, and every shard it lists exists with its
//!   recorded size. Anything else at `<root>/<hash>` is a miss (never an
//!   error), and the next publish of that hash replaces it. Shard contents
//!   are not hashed here; that is the reader's `verify`.
//! - Looking at an artifact changes nothing but its directory's modification
//!   time, which a hit sets to now (best effort: a read-only cache still
//!   serves hits). That time is what `gc` ranks artifacts by.
//! - [`Cache::get_or_build`] looks up, takes the lock, looks up again (a
//!   concurrent build may have published while this one waited), and only
//!   then builds, so one hash is built once however many callers race.

use super::{Artifact, Cache, CacheError, Staging};
use std::fs::{self, File, FileTimes};
use std::io;
use std::path::Path;
use std::time::SystemTime;
use tessera_reader::{MANIFEST_FILE, Manifest};

/// What [`Cache::get_or_build`] did.
#[derive(Clone, Debug)]
pub struct Obtained {
    /// The artifact.
    pub artifact: Artifact,
    /// Whether this call built it (false: it was in the cache).
    pub built: bool,
    /// Whether this call waited for another build of the same hash.
    pub waited: bool,
}

/// What is at `<root>/<hash>`.
pub(super) enum Inspection {
    Missing,
    Invalid(String),
    /// Written by a newer tessera: a format version above this one's. Not
    /// usable here, but not garbage either.
    Newer(u64),
    Valid(Box<Manifest>),
}

/// Looks at `<root>/<hash>` without changing anything: the manifest must
/// parse, name this hash, and every shard must exist with its recorded size.
/// Shard contents are not hashed (that is the reader's `verify`).
pub(super) fn inspect(dir: &Path, hash: &str) -> Inspection {
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = match fs::read(&manifest_path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return match fs::symlink_metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Inspection::Missing,
                _ => Inspection::Invalid(format!("{MANIFEST_FILE} is missing")),
            };
        }
        Err(e) => return Inspection::Invalid(format!("{}: {e}", manifest_path.display())),
    };
    let m = match Manifest::parse(&bytes, &manifest_path) {
        Ok(m) => Box::new(m),
        Err(tessera_reader::Error::UnsupportedVersion { found, .. })
            if found > u64::from(tessera_reader::LATEST_FORMAT_VERSION) =>
        {
            return Inspection::Newer(found);
        }
        Err(e) => return Inspection::Invalid(e.to_string()),
    };
    if m.artifact_hash != hash {
        return Inspection::Invalid(format!("the manifest names artifact {:?}", m.artifact_hash));
    }
    for s in &m.shards {
        match fs::metadata(dir.join(&s.file)) {
            Ok(md) if md.len() == s.file_bytes() => {}
            Ok(md) => {
                return Inspection::Invalid(format!(
                    "shard {} is {} bytes, the manifest says {}",
                    s.file,
                    md.len(),
                    s.file_bytes()
                ));
            }
            Err(e) => return Inspection::Invalid(format!("shard {}: {e}", s.file)),
        }
    }
    Inspection::Valid(m)
}

/// Marks a directory as used now (its modification time). Best effort: a
/// read-only cache still serves hits.
pub(super) fn touch(dir: &Path) {
    if let Ok(f) = File::open(dir) {
        let _ = f.set_times(FileTimes::new().set_modified(SystemTime::now()));
    }
}

impl Cache {
    /// The published artifact `hash`, if it is present and sound (its manifest
    /// parses, names this hash, and every shard has its recorded size). A hit
    /// marks the artifact as used. An unsound directory counts as absent; the
    /// next publish of that hash replaces it.
    pub fn lookup(&self, hash: &str) -> Result<Option<Artifact>, CacheError> {
        let dir = self.artifact_dir(hash)?;
        match inspect(&dir, hash) {
            Inspection::Valid(manifest) => {
                touch(&dir);
                Ok(Some(Artifact {
                    hash: hash.to_owned(),
                    path: dir,
                    manifest: *manifest,
                }))
            }
            Inspection::Missing | Inspection::Invalid(_) | Inspection::Newer(_) => Ok(None),
        }
    }

    /// The artifact `hash`: from the cache if present, otherwise built by
    /// `build` into a staging directory and published. Concurrent calls for
    /// one hash (threads or processes) build it once; the others wait, calling
    /// `on_wait` first (to tell the user), then return the published artifact.
    /// If `build` fails, its staging directory is removed and its error
    /// returned. The manifest `build` returns must carry `hash` as its
    /// `artifact_hash`.
    pub fn get_or_build<E: From<CacheError>>(
        &self,
        hash: &str,
        on_wait: impl FnOnce(),
        build: impl FnOnce(&Staging<'_>) -> Result<Manifest, E>,
    ) -> Result<Obtained, E> {
        let hit = |waited| -> Result<Option<Obtained>, CacheError> {
            Ok(self.lookup(hash)?.map(|artifact| Obtained {
                artifact,
                built: false,
                waited,
            }))
        };
        if let Some(found) = hit(false)? {
            crate::fault::point("cache.hit");
            return Ok(found);
        }
        let (lock, waited) = match self.try_lock(hash)? {
            Some(lock) => (lock, false),
            None => {
                on_wait();
                (self.lock(hash)?, true)
            }
        };
        crate::fault::point("cache.locked");
        // Someone else may have published it while this call waited.
        if let Some(found) = hit(waited)? {
            return Ok(found);
        }
        let staging = lock.stage()?;
        let manifest = build(&staging)?;
        let artifact = staging.publish(&manifest)?;
        Ok(Obtained {
            artifact,
            built: true,
            waited,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::TMP_DIR;
    use crate::cache::test_support::{entries_of, hash_n, publish_new, write_set};
    use std::fs::OpenOptions;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;
    use tessera_reader::Dataset;

    #[test]
    fn unsound_artifacts_are_misses_and_get_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(5);
        let a = publish_new(&cache, &h, 250);
        let shard = a.path.join(&a.manifest.shards[0].file);

        // A truncated shard.
        let f = OpenOptions::new().write(true).open(&shard).unwrap();
        f.set_len(100).unwrap();
        assert!(cache.lookup(&h).unwrap().is_none());
        let listed = cache.list().unwrap();
        assert!(listed[0].problem.as_deref().unwrap().contains("bytes"));

        // A garbage manifest.
        fs::write(a.path.join(MANIFEST_FILE), b"{not json").unwrap();
        assert!(cache.lookup(&h).unwrap().is_none());

        // A manifest that belongs to another hash.
        let other = hash_n(6);
        let o = publish_new(&cache, &other, 20);
        fs::remove_dir_all(&a.path).unwrap();
        fs::rename(&o.path, &a.path).unwrap();
        assert!(cache.lookup(&h).unwrap().is_none());

        // Publishing replaces the unsound directory.
        let fresh = publish_new(&cache, &h, 7);
        assert_eq!(cache.lookup(&h).unwrap().unwrap().manifest, fresh.manifest);
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
    }

    #[test]
    fn two_threads_build_once() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::new(tmp.path()));
        let h = hash_n(10);
        let builds = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(2));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (cache, h, builds, barrier) =
                    (cache.clone(), h.clone(), builds.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    cache
                        .get_or_build::<CacheError>(
                            &h,
                            || {},
                            |st| {
                                builds.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(Duration::from_millis(300));
                                Ok(write_set(st.path(), &h, 500))
                            },
                        )
                        .unwrap()
                })
            })
            .collect();
        let results: Vec<Obtained> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert_eq!(results.iter().filter(|r| r.built).count(), 1);
        assert_eq!(results[0].artifact.path, results[1].artifact.path);
        assert_eq!(results[0].artifact.manifest, results[1].artifact.manifest);
        assert_eq!(Dataset::open(&results[0].artifact.path).unwrap().len(), 500);
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
    }

    #[test]
    fn failed_build_leaves_nothing_and_a_later_build_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(11);
        let err = cache
            .get_or_build::<CacheError>(
                &h,
                || {},
                |st| {
                    write_set(st.path(), &h, 50);
                    Err(CacheError::Publish {
                        path: st.path().to_path_buf(),
                        reason: "simulated failure".into(),
                    })
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("simulated"));
        assert!(!cache.root().join(&h).exists());
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
        let ok = cache
            .get_or_build::<CacheError>(&h, || {}, |st| Ok(write_set(st.path(), &h, 50)))
            .unwrap();
        assert!(ok.built);
        let again = cache
            .get_or_build::<CacheError>(&h, || {}, |_| panic!("must be a cache hit"))
            .unwrap();
        assert!(!again.built && !again.waited);
    }

    /// The whole cache-hit path without DataFusion: fingerprint, hash, build
    /// once; a second run (fresh stat cache from disk) is a hit without
    /// reading the inputs; changing an input gives a new artifact.
    #[test]
    fn fingerprint_hash_build_then_hit() {
        use crate::fingerprint::{SourceFiles, artifact_hash, fingerprint_inputs};
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        fs::create_dir_all(data.join("year=2024")).unwrap();
        let files = [data.join("year=2024/a.csv"), data.join("year=2024/b.csv")];
        for (i, f) in files.iter().enumerate() {
            fs::write(f, format!("x\n{i}\n").repeat(1000)).unwrap();
        }
        let cache = Cache::new(tmp.path().join("cache"));
        let spec = serde_json::json!({"version": 1, "name": "e2e"});
        let sources = [SourceFiles {
            source: "s".into(),
            root: data.clone(),
            files: files.to_vec(),
            hash_bytes: false,
        }];
        let run = |builds: &AtomicUsize| {
            let mut stat = cache.load_stat_cache();
            stat.set_racy_window(Duration::ZERO);
            let inputs = fingerprint_inputs(&sources, &mut stat).unwrap();
            stat.save().unwrap();
            let hash = artifact_hash(&spec, &inputs, 1, 1);
            let got = cache
                .get_or_build::<CacheError>(
                    &hash,
                    || {},
                    |st| {
                        builds.fetch_add(1, Ordering::SeqCst);
                        let mut m = write_set(st.path(), &hash, 10);
                        m.inputs = crate::fingerprint::manifest_inputs(&inputs);
                        Ok(m)
                    },
                )
                .unwrap();
            (inputs, got)
        };
        let builds = AtomicUsize::new(0);
        let (inputs, first) = run(&builds);
        assert!(first.built && inputs.iter().all(|f| !f.from_stat_cache));
        assert_eq!(inputs[0].rel, "year=2024/a.csv");
        let (inputs, second) = run(&builds);
        assert!(!second.built, "same inputs: a cache hit");
        assert!(
            inputs.iter().all(|f| f.from_stat_cache),
            "no input was read"
        );
        assert_eq!(second.artifact.path, first.artifact.path);
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert_eq!(
            second.artifact.manifest.inputs[1]["path"],
            "year=2024/b.csv"
        );

        fs::write(&files[1], b"x\n42\n").unwrap();
        let (_, third) = run(&builds);
        assert!(third.built);
        assert_ne!(third.artifact.hash, first.artifact.hash);
        assert_eq!(cache.list().unwrap().len(), 2);
    }

    const CHILD_ROOT: &str = "TESSERA_TEST_CHILD_CACHE";
    const CHILD_LOG: &str = "TESSERA_TEST_CHILD_LOG";
    const CHILD_HASH: &str = "TESSERA_TEST_CHILD_HASH";

    /// Not a test by itself: the body of a child process spawned by
    /// `two_processes_build_once`. Does nothing unless the variables are set.
    #[test]
    fn child_builder_process() {
        let (Some(root), Some(log), Some(h)) = (
            std::env::var_os(CHILD_ROOT),
            std::env::var_os(CHILD_LOG),
            std::env::var(CHILD_HASH).ok(),
        ) else {
            return;
        };
        let cache = Cache::new(PathBuf::from(root));
        let got = cache
            .get_or_build::<CacheError>(
                &h,
                || {},
                |st| {
                    use std::io::Write;
                    let mut f = OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&log)
                        .unwrap();
                    writeln!(f, "built by {}", std::process::id()).unwrap();
                    std::thread::sleep(Duration::from_millis(500));
                    Ok(write_set(st.path(), &h, 400))
                },
            )
            .unwrap();
        assert_eq!(got.artifact.manifest.rows, 400);
    }

    #[test]
    fn two_processes_build_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let log = tmp.path().join("builds.log");
        let h = hash_n(12);
        let module = module_path!();
        let test = format!(
            "{}::child_builder_process",
            module.split_once("::").map_or(module, |(_, rest)| rest)
        );
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(&exe)
                    .args([test.as_str(), "--exact", "--test-threads=1"])
                    .env(CHILD_ROOT, &root)
                    .env(CHILD_LOG, &log)
                    .env(CHILD_HASH, &h)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "child failed: {stdout}");
            assert!(stdout.contains("1 passed"), "child ran no test: {stdout}");
        }
        let log = fs::read_to_string(&log).unwrap();
        assert_eq!(log.lines().count(), 1, "{log}");
        let cache = Cache::new(&root);
        let a = cache.lookup(&h).unwrap().unwrap();
        assert_eq!(Dataset::open(&a.path).unwrap().len(), 400);
        assert!(entries_of(&root.join(TMP_DIR)).is_empty());
    }
}
