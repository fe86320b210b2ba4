//! Sources in an object store, against a real S3 server on loopback
//! (SeaweedFS, started and stopped by each test): the same spec built from
//! a bucket and from local copies of the same files writes the same shards;
//! row-group pruning fetches only part of the input; fingerprints follow the
//! objects (a rebuild is a cache hit, a changed object is not); CSV, hive
//! prefixes and chunked byte ranges read from the bucket; bad URLs fail
//! with the spec key and the URL.

mod common;
#[path = "common/s3.rs"]
mod s3;

use common::{rows, stderr, stdout, tessera, write_parquet};
use s3::{S3Server, storage_options};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

/// One server at a time: they are heavy for a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

const FIELDS: &str = r#"
fields:
  id:  { dtype: i64, column: id }
  day: { dtype: i32, column: day }
  x:   { dtype: f32, column: x, fill_null: 0 }
split: { key: id, weights: { train: 0.8, val: 0.2 } }
shards: { target_bytes: 64KiB }
"#;

/// Runs `tessera` with the server's credentials in the environment (the
/// endpoint comes from the spec's `storage:` where a test says so).
fn run_s3(endpoint: &str, args: &[&str]) -> Output {
    let mut c = tessera();
    c.args(args);
    for (k, v) in s3::env(endpoint) {
        c.env(k, v);
    }
    c.output().expect("run tessera")
}

/// Uploads every file below `dir` to `url/<relative path>`.
fn upload(endpoint: &str, dir: &Path, url: &str) {
    let (store, prefix) =
        tessera_reader::remote::object_store_for(url, &storage_options(endpoint)).expect("store");
    let rt = tessera_reader::remote::io_runtime().expect("runtime");
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(dir)
                .expect("below")
                .to_string_lossy()
                .into_owned();
            let key = object_store::path::Path::from(format!("{prefix}/{rel}"));
            let bytes = std::fs::read(&p).expect("read");
            rt.block_on(async {
                use object_store::ObjectStoreExt;
                store.put(&key, bytes.into()).await.expect("put")
            });
        }
    }
}

struct Built {
    json: serde_json::Value,
}

impl Built {
    fn path(&self) -> PathBuf {
        PathBuf::from(self.json["path"].as_str().expect("path"))
    }

    /// Every shard file's name and blake3, from the files themselves.
    fn shard_hashes(&self) -> Vec<(String, String)> {
        let ds = tessera_reader::Dataset::open(self.path()).expect("open");
        ds.manifest()
            .shards
            .iter()
            .map(|s| {
                let bytes = std::fs::read(self.path().join(&s.file)).expect("shard");
                (s.file.clone(), blake3::hash(&bytes).to_hex().to_string())
            })
            .collect()
    }
}

fn build(endpoint: &str, spec: &Path, cache: &Path) -> Built {
    let o = run_s3(
        endpoint,
        &[
            "build",
            &spec.display().to_string(),
            "--cache-dir",
            &cache.display().to_string(),
            "--json",
            "-q",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    Built {
        json: serde_json::from_str(&stdout(&o)).expect("json"),
    }
}

fn storage_yaml(endpoint: &str) -> String {
    format!("{{ endpoint: \"{endpoint}\", allow_http: true, region: us-east-1 }}")
}

#[test]
fn parquet_in_a_bucket_builds_the_local_shards_and_fetches_only_what_pruning_keeps() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // `day` rises through the files, so `day >= 27` keeps about a tenth of
    // the row groups.
    let files = write_parquet(&root.join("data"), &rows(200_000, 3), 4, 5000);
    let input_bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).expect("meta").len())
        .sum();
    upload(&ep, &root.join("data"), &server.url("raw/events"));

    let filter = "filter: \"day >= 27\"\n";
    let local = root.join("local.yaml");
    std::fs::write(
        &local,
        format!(
            "version: 1\nname: ev\nsources:\n  events: {{ path: data/*.parquet }}\n{filter}{FIELDS}"
        ),
    )
    .expect("spec");
    let remote_spec = |name: &str, extra: &str| {
        let p = root.join(format!("{name}.yaml"));
        std::fs::write(
            &p,
            format!(
                "version: 1\nname: ev\nsources:\n  events:\n    path: {}/*.parquet\n    storage: {}\n{extra}{filter}{FIELDS}",
                server.url("raw/events"),
                storage_yaml(&ep),
            ),
        )
        .expect("spec");
        p
    };
    let remote = remote_spec("remote", "");
    let cache = root.join("cache");

    let a = build(&ep, &local, &cache);
    let b = build(&ep, &remote, &cache);
    assert_eq!(a.json["rows"], b.json["rows"]);
    assert!(a.json["rows_kept"].as_u64().expect("kept") > 1000);
    assert_eq!(a.shard_hashes(), b.shard_hashes(), "shards differ");
    assert_eq!(a.json["bytes_fetched"], 0);
    let fetched = b.json["bytes_fetched"].as_u64().expect("fetched");
    assert!(fetched > 0);
    assert!(
        fetched * 3 < input_bytes,
        "pruning should leave most row groups unread: fetched {fetched} of {input_bytes}"
    );
    assert!(
        b.json["scan"]["row_groups_pruned"]
            .as_u64()
            .expect("pruned")
            > 20
    );
    // The manifest names the objects (relative to the glob's folder, as
    // for local files: no location) and what identified them.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.path().join("manifest.json")).expect("manifest"))
            .expect("json");
    let inputs = m["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 4);
    assert_eq!(inputs[0]["path"], "part-000.parquet");
    assert!(inputs[0]["etag"].as_str().is_some_and(|e| !e.is_empty()));
    assert!(inputs[0].get("url").is_none() && inputs[0].get("blake3").is_none());

    // Unchanged objects: a cache hit that fetches nothing. The credentials
    // come from `--storage` this time, with nothing in the environment.
    let flags: Vec<String> = [
        ("access_key_id", s3::KEY_ID),
        ("secret_access_key", s3::SECRET),
    ]
    .iter()
    .flat_map(|(k, v)| ["--storage".to_string(), format!("{k}={v}")])
    .collect();
    let bare = |args: &[&str]| {
        let mut c = tessera();
        for k in [
            "AWS_ENDPOINT",
            "AWS_ALLOW_HTTP",
            "AWS_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            c.env_remove(k);
        }
        c.args(args).args(&flags).output().expect("run")
    };
    let o = bare(&[
        "build",
        &remote.display().to_string(),
        "--cache-dir",
        &cache.display().to_string(),
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let again = Built {
        json: serde_json::from_str(&stdout(&o)).expect("json"),
    };
    assert_eq!(again.json["cache_hit"], true);
    assert_eq!(again.json["hash"], b.json["hash"]);
    assert_eq!(again.json["bytes_fetched"], 0);
    // Push and read back with `--storage` options only.
    let set_url = server.url("sets/ev");
    let endpoint_flag = format!("endpoint={ep}");
    let b_path = b.path().display().to_string();
    let o = bare(&[
        "push",
        &b_path,
        &set_url,
        "--storage",
        &endpoint_flag,
        "--storage",
        "allow_http=true",
        "--storage",
        "region=us-east-1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = bare(&[
        "verify",
        &set_url,
        "--storage",
        &endpoint_flag,
        "--storage",
        "allow_http=true",
        "--storage",
        "region=us-east-1",
    ]);
    assert!(
        o.status.success() && stdout(&o).starts_with("ok:"),
        "{}",
        stderr(&o)
    );
    let o = bare(&["verify", &set_url, "--storage", "endpoint"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not KEY=VALUE"), "{}", stderr(&o));

    // `fingerprint: bytes` hashes the objects: the inputs then carry the
    // same blake3 as the local files.
    let hashed = build(
        &ep,
        &remote_spec("hashed", "    fingerprint: bytes\n"),
        &cache,
    );
    assert_ne!(hashed.json["hash"], b.json["hash"]);
    assert_eq!(hashed.shard_hashes(), a.shard_hashes());
    let mh: serde_json::Value = serde_json::from_slice(
        &std::fs::read(hashed.path().join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    let ml: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.path().join("manifest.json")).expect("manifest"))
            .expect("json");
    for (h, l) in mh["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .zip(ml["inputs"].as_array().expect("inputs"))
    {
        assert_eq!(h["blake3"], l["blake3"]);
    }

    // A changed object is a new input: not a cache hit, and the new rows.
    let changed = root.join("changed");
    write_parquet(&changed, &rows(200_000, 4), 4, 5000);
    std::fs::remove_file(changed.join("part-000.parquet")).expect("rm");
    std::fs::remove_file(changed.join("part-001.parquet")).expect("rm");
    std::fs::remove_file(changed.join("part-002.parquet")).expect("rm");
    upload(&ep, &changed, &server.url("raw/events"));
    let c = build(&ep, &remote, &cache);
    assert_eq!(c.json["cache_hit"], false);
    assert_ne!(c.json["hash"], b.json["hash"]);
}

#[test]
fn csv_below_a_hive_prefix_in_a_bucket_matches_the_local_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let data = root.join("csv");
    let all = rows(6_000, 5);
    for (i, part) in all.chunks(2_000).enumerate() {
        let dir = data.join(format!("region={}", ["eu", "us", "ap"][i]));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut text = String::from("id,day,x\n");
        for r in part {
            let x = r.x.map(|v| v.to_string()).unwrap_or_default();
            text.push_str(&format!("{},{},{x}\n", r.id, r.day));
        }
        std::fs::write(dir.join("rows.csv"), text).expect("csv");
    }
    // A marker file the listing must skip, as a directory walk does.
    std::fs::write(data.join("_SUCCESS"), b"").expect("marker");
    upload(&ep, &data, &server.url("raw/csv"));

    let body = |path: &str| {
        format!(
            "version: 1\nname: hive\nsources:\n  t:\n    path: {path}\n    format: csv\n    chunk: true\n{{storage}}query: SELECT id, day, x, region FROM t\nfields:\n  id: {{ dtype: i64, column: id }}\n  x: {{ dtype: f32, column: x, fill_null: 0 }}\n  region: {{ dtype: u32, column: region, transform: {{ vocab: {{ oov: 0 }} }} }}\nsplit: {{ key: id, weights: {{ train: 0.7, val: 0.3 }} }}\nchunks: {{ target_bytes: 8KiB }}\nshards: {{ target_bytes: 64KiB }}\n"
        )
    };
    let local = root.join("local.yaml");
    std::fs::write(&local, body("csv").replace("{storage}", "")).expect("spec");
    let remote = root.join("remote.yaml");
    std::fs::write(
        &remote,
        body(&format!("{}/", server.url("raw/csv"))).replace(
            "{storage}",
            &format!("    storage: {}\n", storage_yaml(&ep)),
        ),
    )
    .expect("spec");
    let cache = root.join("cache");
    let a = build(&ep, &local, &cache);
    let b = build(&ep, &remote, &cache);
    assert_eq!(a.json["rows"], b.json["rows"]);
    assert_eq!(a.json["rows_kept"], 6_000);
    assert!(b.json["chunks"].as_u64().expect("chunks") > 3, "{}", b.json);
    assert_eq!(a.shard_hashes(), b.shard_hashes());
    assert!(b.json["bytes_fetched"].as_u64().expect("fetched") > 0);

    // The same build as plan, tasks (each process lists and reads the
    // bucket itself, as a cluster node would) and commit.
    let work = root.join("work");
    let plan_out = run_s3(
        &ep,
        &[
            "plan",
            &remote.display().to_string(),
            "--cache-dir",
            &root.join("cache2").display().to_string(),
            "--work-dir",
            &work.display().to_string(),
            "--json",
        ],
    );
    assert!(plan_out.status.success(), "{}", stderr(&plan_out));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&plan_out)).expect("plan");
    assert_eq!(plan["hash"], b.json["hash"]);
    let plan_file = work.join("plan.json").display().to_string();
    let ids: Vec<String> = plan["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str().map(str::to_string))
        .collect();
    for stage in ["stats-", "freeze", "shard-"] {
        let mut args = vec!["task", plan_file.as_str()];
        args.extend(
            ids.iter()
                .filter(|i| i.starts_with(stage))
                .map(String::as_str),
        );
        if args.len() == 2 {
            continue;
        }
        let o = run_s3(&ep, &args);
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
    }
    let o = run_s3(&ep, &["commit", &plan_file, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let committed = Built {
        json: serde_json::from_str(&stdout(&o)).expect("json"),
    };
    assert_eq!(committed.json["hash"], b.json["hash"]);
    assert_eq!(committed.shard_hashes(), a.shard_hashes());
}

#[test]
fn bad_object_store_paths_name_the_key_and_the_url() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // The bucket exists and holds data, but not where the spec looks.
    write_parquet(&root.join("data"), &rows(100, 1), 1, 100);
    upload(&ep, &root.join("data"), &server.url("raw"));
    let cases = [
        (
            format!("{}/*.parquet", server.url("nothing/here")),
            "matches no parquet files",
        ),
        (
            "http://127.0.0.1:9/data/*.parquet".to_string(),
            "globs need a store that lists",
        ),
        ("ftp://host/data.parquet".to_string(), "unknown scheme"),
    ];
    for (path, expected) in cases {
        let spec = root.join("bad.yaml");
        let storage = if path.starts_with("s3:") {
            format!("    storage: {}\n", storage_yaml(&ep))
        } else {
            String::new()
        };
        std::fs::write(
            &spec,
            format!(
                "version: 1\nname: bad\nsources:\n  t:\n    path: {path}\n    format: parquet\n{storage}fields:\n  id: {{ dtype: i64, column: id }}\n",
            ),
        )
        .expect("spec");
        let o = run_s3(
            &ep,
            &[
                "build",
                &spec.display().to_string(),
                "--cache-dir",
                &root.join("c").display().to_string(),
            ],
        );
        let err = stderr(&o);
        assert!(!o.status.success(), "{path}: {err}");
        assert!(err.contains("sources.t.path"), "{path}: {err}");
        assert!(err.contains(expected), "{path}: {err}");
        assert!(!err.contains("panicked"), "{path}: {err}");
    }
    // Storage options on a local source are a spec error.
    let spec = root.join("local.yaml");
    std::fs::write(
        &spec,
        "version: 1\nname: l\nsources:\n  t:\n    path: x.parquet\n    storage: { region: eu }\nfields:\n  id: { dtype: i64, column: id }\n",
    )
    .expect("spec");
    let o = tessera()
        .args(["build", &spec.display().to_string()])
        .output()
        .expect("run");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sources.t.storage"), "{}", stderr(&o));
}

/// The names of the objects below `url`.
fn list(endpoint: &str, url: &str) -> Vec<String> {
    let (store, prefix) =
        tessera_reader::remote::object_store_for(url, &storage_options(endpoint)).expect("store");
    let rt = tessera_reader::remote::io_runtime().expect("runtime");
    rt.block_on(async {
        use futures::StreamExt;
        let mut out = Vec::new();
        let mut s = store.list(Some(&prefix));
        while let Some(m) = s.next().await {
            out.push(m.expect("listing").location.to_string());
        }
        out
    })
}

#[test]
fn a_work_directory_in_the_bucket_needs_no_shared_files() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = S3Server::start();
    let ep = server.endpoint();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write_parquet(&root.join("data"), &rows(60_000, 8), 3, 5000);
    upload(&ep, &root.join("data"), &server.url("raw/t"));
    let body = |path: &str| {
        format!(
            "version: 1\nname: w\nsources:\n  t: {{ path: \"{path}\" }}\nfilter: \"day >= 3\"\n{FIELDS}  \nchunks: {{ target_bytes: 64KiB }}\n"
        )
        .replace(
            "fields:\n  id:",
            "fields:\n  xs: { dtype: f32, column: x, fill_null: 0, transform: standardize }\n  id:",
        )
    };
    let local = root.join("local.yaml");
    std::fs::write(&local, body("data/*.parquet")).expect("spec");
    let a = build(&ep, &local, &root.join("cache-a"));

    // Planned on one "machine"; the spec file is gone before any task runs,
    // and tasks and commit use other directories: only the bucket is shared.
    let planning = root.join("planner");
    std::fs::create_dir_all(&planning).expect("dir");
    let spec = planning.join("remote.yaml");
    std::fs::write(&spec, body(&format!("{}/*.parquet", server.url("raw/t")))).expect("spec");
    let work = server.url("work/run1");
    let o = run_s3(
        &ep,
        &[
            "plan",
            &spec.display().to_string(),
            "--cache-dir",
            &planning.join("cache").display().to_string(),
            "--work-dir",
            &work,
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("plan");
    assert_eq!(plan["work_dir"], work.as_str());
    assert_eq!(plan["decision"]["plan"], "chunked");
    std::fs::remove_dir_all(&planning).expect("rm");
    let plan_url = format!("{work}/plan.json");
    // (The tasks below find neither the spec nor the planner's cache
    // directory, and must not create the latter.)
    let ids: Vec<String> = plan["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str().map(str::to_string))
        .collect();
    assert!(
        ids.iter().filter(|i| i.starts_with("shard-")).count() >= 3,
        "{ids:?}"
    );
    // A shard task before the freeze names what it waits for.
    let early = ids.iter().find(|i| i.starts_with("shard-")).expect("shard");
    let o = run_s3(&ep, &["task", &plan_url, early]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("frozen.json") && stderr(&o).contains("freeze"),
        "{}",
        stderr(&o)
    );
    for stage in ["stats-", "freeze", "shard-"] {
        let mut args = vec!["task", plan_url.as_str()];
        args.extend(
            ids.iter()
                .filter(|i| i.starts_with(stage))
                .map(String::as_str),
        );
        let o = run_s3(&ep, &args);
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
    }
    // A retried shard task rewrites the same objects.
    let o = run_s3(&ep, &["task", &plan_url, early]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!planning.exists(), "a task made the planner's directories");
    assert!(list(&ep, &work).iter().any(|k| k.contains("/shards/")));
    let o = run_s3(&ep, &["commit", &plan_url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = Built {
        json: serde_json::from_str(&stdout(&o)).expect("json"),
    };
    assert_eq!(c.json["rows"], a.json["rows"]);
    assert_eq!(c.shard_hashes(), a.shard_hashes());
    assert!(list(&ep, &work).is_empty(), "{:?}", list(&ep, &work));

    // A global query runs as stage tasks and its global task, through the
    // bucket too: each task fetches the shuffle files it reads.
    let global = |path: &str| {
        format!(
            "version: 1\nname: g\nsources:\n  t: {{ path: \"{path}\" }}\nquery: SELECT day, count(*) AS n, min(id) AS id FROM t GROUP BY day\nfields:\n  day: {{ dtype: i32, column: day }}\n  n: {{ dtype: i64, column: n }}\n  id: {{ dtype: i64, column: id }}\n"
        )
    };
    let gl = root.join("global-local.yaml");
    std::fs::write(&gl, global("data/*.parquet")).expect("spec");
    let ga = build(&ep, &gl, &root.join("cache-a"));
    let gr = root.join("global-remote.yaml");
    std::fs::write(&gr, global(&format!("{}/*.parquet", server.url("raw/t")))).expect("spec");
    let gwork = server.url("work/global");
    let o = run_s3(
        &ep,
        &[
            "plan",
            &gr.display().to_string(),
            "--cache-dir",
            &root.join("cache-g").display().to_string(),
            "--work-dir",
            &gwork,
            "--threads",
            "3",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let gplan: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("plan");
    assert_eq!(gplan["decision"]["plan"], "global");
    let gplan_url = format!("{gwork}/plan.json");
    let gids: Vec<String> = gplan["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str().map(str::to_string))
        .collect();
    assert!(gids.iter().any(|i| i.starts_with("stage")), "{gplan}");
    for id in &gids {
        let o = run_s3(&ep, &["task", &gplan_url, id]);
        assert!(o.status.success(), "{id}: {}", stderr(&o));
    }
    assert!(
        list(&ep, &gwork)
            .iter()
            .any(|k| k.contains("/shuffle/s000/"))
    );
    let o = run_s3(&ep, &["commit", &gplan_url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let gc = Built {
        json: serde_json::from_str(&stdout(&o)).expect("json"),
    };
    assert_eq!(gc.json["rows"], ga.json["rows"]);
    assert_eq!(gc.shard_hashes(), ga.shard_hashes());
    assert!(list(&ep, &gwork).is_empty());
}
