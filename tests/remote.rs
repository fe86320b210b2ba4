//! Shard sets in an object store, against a real S3 server on loopback
//! (SeaweedFS, started and stopped by each test): build and push, read back
//! byte-identical batches, a second epoch with the server gone, a corrupted
//! object, an interrupted push, two processes sharing one cache, and a cache
//! budget of 30% of the set against LRU on the same access sequence.

mod common;
#[path = "common/s3.rs"]
mod s3;

use common::{rows, stderr, stdout, tessera, write_parquet};
use s3::{LatencyProxy, S3Server, storage_options};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_reader::cache::{AccessPlan, Policy, simulate};
use tessera_reader::{CacheOptions, Cursor, Dataset, LastBatch, Loader, LoaderConfig, OpenOptions};

/// One server at a time: they are heavy for a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

const SPEC: &str = r#"
version: 1
name: remote
sources:
  events: { path: data/*.parquet }
fields:
  id: { dtype: i64, column: id }
  x:  { dtype: f32, column: x, fill_null: 0 }
  n:  { dtype: i32, column: n }
split: { key: id, weights: { train: 0.8, val: 0.2 } }
"#;

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new(rows_count: usize) -> Project {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        write_parquet(&root.join("data"), &rows(rows_count, 5), 4, 5000);
        let plain = format!("{SPEC}shards: {{ target_bytes: 64KiB }}\n");
        let zstd =
            format!("{SPEC}shards: {{ target_bytes: 64KiB, compression: zstd, level: 5 }}\n");
        std::fs::write(root.join("plain.yaml"), plain).expect("spec");
        std::fs::write(root.join("zstd.yaml"), zstd).expect("spec");
        Project { _tmp: tmp, root }
    }

    fn spec(&self, name: &str) -> String {
        self.root.join(format!("{name}.yaml")).display().to_string()
    }

    fn cache(&self) -> String {
        self.root.join("artifacts").display().to_string()
    }

    /// Builds spec `name` and returns the artifact's directory.
    fn build(&self, name: &str) -> PathBuf {
        let o = tessera()
            .args([
                "build",
                &self.spec(name),
                "--cache-dir",
                &self.cache(),
                "--json",
                "-q",
            ])
            .output()
            .expect("run");
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
        PathBuf::from(v["path"].as_str().expect("path"))
    }
}

/// Runs `tessera` with the server's environment.
fn run_s3(endpoint: &str, args: &[&str]) -> Output {
    let mut c = tessera();
    c.args(args);
    for (k, v) in s3::env(endpoint) {
        c.env(k, v);
    }
    c.output().expect("run tessera")
}

fn open_remote(url: &str, endpoint: &str, cache: &Path, budget: Option<u64>) -> Dataset {
    let opts = OpenOptions {
        cache: CacheOptions {
            dir: Some(cache.to_path_buf()),
            budget,
            fetch_threads: None,
        },
        storage_options: storage_options(endpoint),
    };
    Dataset::open_with(url, &opts).expect("open remote set")
}

fn batches(ds: &Dataset, cfg: &LoaderConfig, epochs: std::ops::Range<u64>) -> Vec<u8> {
    let loader = Loader::new(ds, cfg.clone()).expect("loader");
    let mut out = Vec::new();
    for e in epochs {
        let mut it = loader.epoch(e);
        while let Some(b) = it.try_next().expect("batch") {
            out.extend_from_slice(b.bytes());
        }
    }
    out
}

fn configs() -> Vec<LoaderConfig> {
    vec![
        LoaderConfig {
            batch_size: 500,
            shuffle: false,
            last_batch: LastBatch::Partial,
            ..Default::default()
        },
        LoaderConfig {
            batch_size: 256,
            seed: 4,
            ..Default::default()
        },
        LoaderConfig {
            batch_size: 300,
            seed: 9,
            shuffle_window: 2,
            rank: 1,
            world_size: 2,
            last_batch: LastBatch::Pad,
            ..Default::default()
        },
    ]
}

/// The shard files (`.shard`, `.part`) in a cache directory, by name and
/// inode, with their sizes.
fn listing(dir: &Path) -> std::collections::HashMap<(String, u64), u64> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::HashMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if (n.ends_with(".shard") || n.ends_with(".part"))
            && let Ok(m) = std::fs::metadata(e.path())
        {
            out.insert((n, m.ino()), m.len());
        }
    }
    out
}

/// Bytes the cache directory held at one instant: files seen in two
/// consecutive listings existed together between them (one listing taken
/// while files come and go can show a removed file beside its replacement).
fn cache_usage(dir: &Path) -> u64 {
    let a = listing(dir);
    let b = listing(dir);
    a.iter()
        .filter(|(k, _)| b.contains_key(*k))
        .map(|(_, v)| *v)
        .sum()
}

#[test]
fn build_push_and_read_back_byte_identical_batches() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(20_000);
    // Build and push in one step.
    let plain_url = server.url("sets/plain");
    let o = run_s3(
        &ep,
        &[
            "build",
            &p.spec("plain"),
            "--cache-dir",
            &p.cache(),
            "-q",
            "-o",
            &plain_url,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("pushed to s3://"), "{}", stdout(&o));
    let local = p.build("plain");
    // A compressed build, pushed on its own.
    let zstd_dir = p.build("zstd");
    let zstd_url = server.url("sets/zstd");
    let zstd_dir_s = zstd_dir.display().to_string();
    let o = run_s3(&ep, &["push", &zstd_dir_s, &zstd_url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let zm = Dataset::open(&zstd_dir)
        .expect("local zstd")
        .manifest()
        .clone();
    assert_eq!(r["uploaded_files"], zm.shards.len());
    assert_eq!(r["already_there"], false);
    assert_eq!(zm.format_version, 2);

    let local_ds = Dataset::open(&local).expect("local");
    assert!(local_ds.manifest().shards.len() >= 4);
    let cache = p.root.join("shards");
    for url in [&plain_url, &zstd_url] {
        let remote = open_remote(url, &ep, &cache, None);
        assert!(remote.is_cached());
        assert_eq!(remote.manifest().rows, local_ds.manifest().rows);
        for cfg in configs() {
            for split in ["train", "val"] {
                let a = batches(&local_ds.split(split).unwrap(), &cfg, 0..2);
                let b = batches(&remote.split(split).unwrap(), &cfg, 0..2);
                assert!(!a.is_empty());
                assert!(a == b, "{url} {split} {cfg:?}");
            }
        }
    }
    // The CLI reads URLs wherever it reads sets.
    let o = run_s3(&ep, &["inspect", &plain_url]);
    assert!(
        o.status.success() && stdout(&o).contains("rows"),
        "{}",
        stderr(&o)
    );
    let o = run_s3(&ep, &["head", &zstd_url, "-n", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 4, "{}", stdout(&o));
    let o = run_s3(&ep, &["verify", &zstd_url]);
    assert!(
        o.status.success() && stdout(&o).starts_with("ok:"),
        "{}",
        stderr(&o)
    );
    // A second push of the same set sends nothing.
    let local_s = local.display().to_string();
    let o = run_s3(&ep, &["push", &local_s, &plain_url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(r["already_there"], true);
    assert_eq!(r["uploaded_files"], 0);
    // Another set is never published over it.
    let o = run_s3(&ep, &["push", &zstd_dir_s, &plain_url]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("already holds another shard set"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_second_epoch_reads_from_the_cache_with_the_server_stopped() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(12_000);
    let local = p.build("zstd");
    let url = server.url("sets/a");
    let o = run_s3(&ep, &["push", &local.display().to_string(), &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ds = open_remote(&url, &ep, &p.root.join("shards"), None);
    let cfg = LoaderConfig {
        batch_size: 200,
        seed: 1,
        shuffle_window: 3,
        ..Default::default()
    };
    let local_ds = Dataset::open(&local).expect("local");
    assert!(batches(&ds, &cfg, 0..1) == batches(&local_ds, &cfg, 0..1));
    server.stop();
    assert!(batches(&ds, &cfg, 1..2) == batches(&local_ds, &cfg, 1..2));
    assert_eq!(
        ds.cache_stats().expect("stats").fetched_shards as usize,
        local_ds.manifest().shards.len()
    );
    // A new open over the same cache reads the kept manifest and shards,
    // says it is offline, and gives the same batches with no fetch.
    let again = open_remote(&url, &ep, &p.root.join("shards"), None);
    assert!(again.offline().is_some(), "the reopen should be offline");
    assert!(batches(&again, &cfg, 2..3) == batches(&local_ds, &cfg, 2..3));
    // A cache that never saw the set cannot stand in for the store: the open
    // fails and names the URL.
    let opts = OpenOptions {
        cache: CacheOptions {
            dir: Some(p.root.join("empty-cache")),
            ..Default::default()
        },
        storage_options: storage_options(&ep),
    };
    let err = Dataset::open_with(&url, &opts).unwrap_err().to_string();
    assert!(err.contains(&url), "{err}");
}

/// An object_store client for the test bucket, to tamper with objects.
fn raw_store(endpoint: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(s3::BUCKET)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(s3::KEY_ID)
        .with_secret_access_key(s3::SECRET)
        .build()
        .expect("store")
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

#[test]
fn a_corrupted_object_is_refused_with_a_clear_error() {
    use object_store::ObjectStoreExt;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(12_000);
    let local = p.build("plain");
    let url = server.url("sets/c");
    let o = run_s3(&ep, &["push", &local.display().to_string(), &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = Dataset::open(&local).expect("local").manifest().clone();
    let victim = &m.shards[2];
    // Same size, one byte flipped in the records.
    let mut bytes = std::fs::read(local.join(&victim.file)).expect("shard");
    let at = bytes.len() - 100;
    bytes[at] ^= 1;
    let store = raw_store(&ep);
    let path = object_store::path::Path::from(format!("sets/c/{}", victim.file));
    block_on(store.put(&path, bytes.into())).expect("overwrite");

    let cache = p.root.join("shards");
    let ds = open_remote(&url, &ep, &cache, None);
    let loader = Loader::new(
        &ds,
        LoaderConfig {
            batch_size: 1000,
            shuffle: false,
            ..Default::default()
        },
    )
    .expect("loader");
    let mut it = loader.epoch(0);
    let err = loop {
        match it.try_next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a corrupt shard was read"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(err.contains(&format!("{url}/{}", victim.file)), "{err}");
    // It was fetched again before giving up, and never cached.
    assert!(ds.cache_stats().expect("stats").retries >= 1);
    assert!(!cache.join(format!("{}.shard", victim.blake3)).exists());
    let o = run_s3(&ep, &["verify", &url]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains(&victim.file), "{}", stderr(&o));
}

#[test]
fn an_interrupted_push_leaves_no_readable_manifest() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let p = Project::new(40_000);
    let local = p.build("plain");
    let shards = Dataset::open(&local)
        .expect("local")
        .manifest()
        .shards
        .len();
    assert!(shards >= 8);
    // Slow every request down so the push can be cut in the middle.
    let proxy = LatencyProxy::start(server.port, Duration::from_millis(150));
    let ep = proxy.endpoint();
    let url = server.url("sets/i");
    let mut c = tessera();
    c.args([
        "push",
        &local.display().to_string(),
        &url,
        "--concurrency",
        "1",
    ]);
    for (k, v) in s3::env(&ep) {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("push");
    let store = raw_store(&server.endpoint());
    let prefix = object_store::path::Path::from("sets/i");
    let count = || -> usize {
        use futures::TryStreamExt;
        use object_store::ObjectStore;
        block_on(store.list(Some(&prefix)).try_collect::<Vec<_>>())
            .map(|v| v.len())
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while count() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the push made no progress"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the push ended too soon"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill");
    child.wait().expect("reap");
    let uploaded = count();
    assert!(uploaded < shards, "{uploaded} of {shards}");
    // No manifest: the set cannot be opened, and says why.
    let opts = OpenOptions {
        storage_options: storage_options(&server.endpoint()),
        ..Default::default()
    };
    let err = Dataset::open_with(&url, &opts).unwrap_err().to_string();
    assert!(err.contains("no manifest here"), "{err}");
    // Pushing again finishes the job, without sending what is there.
    let o = run_s3(
        &server.endpoint(),
        &["push", &local.display().to_string(), &url, "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert!(r["skipped_files"].as_u64().unwrap_or(0) >= 1, "{r}");
    assert_eq!(
        r["skipped_files"].as_u64().unwrap_or(0) + r["uploaded_files"].as_u64().unwrap_or(0),
        shards as u64
    );
    let ds = open_remote(&url, &server.endpoint(), &p.root.join("shards"), None);
    ds.verify().expect("complete after the second push");
}

#[test]
fn a_push_resumes_over_shards_an_older_push_labelled_with_the_old_metadata_key() {
    use object_store::{Attribute, Attributes, ObjectStore, PutOptions};
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(12_000);
    let local = p.build("plain");
    let m = Dataset::open(&local).expect("local").manifest().clone();
    // The shards as a push of an earlier version left them when it was cut
    // before the manifest: their blake3 under `tessera-blake3`, the key
    // used before it became `tesserablake3` (Azure refuses `-`).
    let store = raw_store(&ep);
    for sh in &m.shards {
        let bytes = std::fs::read(local.join(&sh.file)).expect("shard");
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata("tessera-blake3".into()),
            sh.blake3.clone().into(),
        );
        let opts = PutOptions {
            attributes,
            ..Default::default()
        };
        let path = object_store::path::Path::from(format!("sets/old/{}", sh.file));
        block_on(store.put_opts(&path, bytes.into(), opts)).expect("put");
    }
    let url = server.url("sets/old");
    let o = run_s3(&ep, &["push", &local.display().to_string(), &url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(r["skipped_files"], m.shards.len(), "{r}");
    // No shard was sent again (the count leaves out the manifest), and the
    // set reads back whole.
    assert_eq!(r["uploaded_files"], 0, "{r}");
    let ds = open_remote(&url, &ep, &p.root.join("shards"), None);
    ds.verify().expect("complete");
}

/// Runs `tessera bench` on `url` with a shard cache, returning its JSON.
fn bench(ep: &str, url: &str, cache: &Path, extra: &[&str]) -> std::process::Child {
    let mut c = tessera();
    c.args([
        "bench",
        url,
        "--json",
        "--shard-cache",
        &cache.display().to_string(),
    ]);
    c.args(extra);
    for (k, v) in s3::env(ep) {
        c.env(k, v);
    }
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c.spawn().expect("bench")
}

fn report(child: std::process::Child) -> serde_json::Value {
    let o = child.wait_with_output().expect("bench output");
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("bench json")
}

#[test]
fn two_processes_share_one_cached_copy() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(20_000);
    let local = p.build("zstd");
    let url = server.url("sets/two");
    let o = run_s3(&ep, &["push", &local.display().to_string(), &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let n = Dataset::open(&local)
        .expect("local")
        .manifest()
        .shards
        .len() as u64;
    let cache = p.root.join("shared-cache");
    let args = ["--shuffle", "--shuffle-window", "2", "--batch-size", "500"];
    let a = bench(&ep, &url, &cache, &args);
    let b = bench(&ep, &url, &cache, &args);
    let (ra, rb) = (report(a), report(b));
    let fetched = |r: &serde_json::Value| r["cache"]["fetched_shards"].as_u64().unwrap_or(0);
    let reused = |r: &serde_json::Value| r["cache"]["reused_shards"].as_u64().unwrap_or(0);
    // Every shard was fetched by exactly one of them; the other used that copy.
    assert_eq!(fetched(&ra) + fetched(&rb), n, "{ra}\n{rb}");
    assert_eq!(fetched(&ra) + reused(&ra), n);
    assert_eq!(fetched(&rb) + reused(&rb), n);
    let files = listing(&cache);
    assert_eq!(files.len() as u64, n, "{files:?}");
    assert!(files.keys().all(|(name, _)| name.ends_with(".shard")));
}

#[test]
fn a_thirty_percent_budget_is_never_exceeded_and_fetches_less_than_lru() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(100_000);
    let local = p.build("plain");
    let url = server.url("sets/budget");
    let o = run_s3(&ep, &["push", &local.display().to_string(), &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let local_ds = Dataset::open(&local).expect("local");
    let m = local_ds.manifest();
    let set: u64 = m.shards.iter().map(|s| s.bytes).sum();
    let budget = set * 3 / 10;
    let cache = p.root.join("budget-cache");
    std::fs::create_dir_all(&cache).expect("cache dir");
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, peak, cache) = (Arc::clone(&stop), Arc::clone(&peak), cache.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(cache_usage(&cache), Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let budget_s = budget.to_string();
    let child = bench(
        &ep,
        &url,
        &cache,
        &[
            "--shuffle",
            "--shuffle-window",
            "2",
            "--batch-size",
            "1024",
            "--epochs",
            "3",
            "--cache-budget",
            &budget_s,
        ],
    );
    let r = report(child);
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= budget,
        "the cache held {peak} bytes, budget {budget}"
    );
    // The same sequence under LRU and under the offline optimum.
    let cfg = LoaderConfig {
        batch_size: 1024,
        shuffle: true,
        seed: 0,
        threads: 2,
        last_batch: LastBatch::Partial,
        shuffle_window: 2,
        ..Default::default()
    };
    let loader = Loader::new(&local_ds, cfg).expect("loader");
    let mut steps = Vec::new();
    for epoch in 0..3 {
        let plan = loader.access_plan(
            Cursor {
                seed: 0,
                epoch,
                position: 0,
            },
            false,
        );
        steps.extend(plan.steps().map(<[u32]>::to_vec));
    }
    let plan = AccessPlan::new(m.shards.len(), steps);
    let sizes: Vec<u64> = m.shards.iter().map(|s| s.bytes).collect();
    let lru = simulate(&plan, &sizes, budget, Policy::Lru);
    let opt = simulate(&plan, &sizes, budget, Policy::Belady);
    let fetched = r["cache"]["fetched_bytes"].as_u64().expect("fetched");
    let accesses = lru.accesses as f64;
    let ours_hit = 1.0 - r["cache"]["fetched_shards"].as_u64().unwrap_or(0) as f64 / accesses;
    eprintln!(
        "budget 30% ({budget} of {set} bytes), 3 shuffled epochs, window 2: fetched {fetched} \
         bytes (hit rate {ours_hit:.2}); LRU on the same sequence {} (hit rate {:.2}); \
         offline optimum {} (hit rate {:.2}); ours / LRU = {:.2}",
        lru.fetched_bytes,
        lru.hit_rate(),
        opt.fetched_bytes,
        opt.hit_rate(),
        fetched as f64 / lru.fetched_bytes as f64
    );
    assert!(
        fetched < lru.fetched_bytes,
        "{fetched} vs LRU {}",
        lru.fetched_bytes
    );
    assert!(fetched as f64 <= opt.fetched_bytes as f64 * 1.05);
}

#[test]
fn a_set_with_a_vocabulary_file_is_pushed_whole_and_checked_at_open() {
    use object_store::ObjectStoreExt;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let p = Project::new(12_000);
    // A vocabulary of every id: more than 4096 values, stored beside the
    // manifest (FORMAT.md 3.7).
    const SPLIT: &str = "split: { key: id, weights: { train: 0.8, val: 0.2 } }\n";
    let spec = SPEC.replace(SPLIT, "")
        + "  v:  { dtype: i32, column: id, transform: vocab }\n"
        + SPLIT
        + "shards: { target_bytes: 64KiB }\n";
    assert!(spec.contains("transform: vocab }\nsplit:"), "{spec}");
    std::fs::write(p.root.join("vocab.yaml"), spec).expect("spec");
    let local = p.build("vocab");
    let m = Dataset::open(&local).expect("local").manifest().clone();
    assert_eq!(m.files.len(), 1, "one vocabulary file: {:?}", m.files);
    let url = server.url("sets/v");
    let o = run_s3(&ep, &["push", &local.display().to_string(), &url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(r["uploaded_files"], m.shards.len() + 1);
    // Verified at the store, the vocabulary included.
    let o = run_s3(&ep, &["verify", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cache = p.root.join("shards");
    let ds = open_remote(&url, &ep, &cache, None);
    assert_eq!(ds.manifest(), &m);
    // Without its vocabulary the set does not open, and says which file.
    let store = raw_store(&ep);
    let path = object_store::path::Path::from(format!("sets/v/{}", m.files[0].file));
    block_on(store.delete(&path)).expect("delete");
    let opts = OpenOptions {
        cache: CacheOptions {
            dir: Some(cache),
            ..Default::default()
        },
        storage_options: storage_options(&ep),
    };
    let err = Dataset::open_with(&url, &opts).unwrap_err().to_string();
    assert!(err.contains(&m.files[0].file), "{err}");
}
