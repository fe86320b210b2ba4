//! A build as data: `tessera plan`, `tessera task` and `tessera commit` run
//! by hand, in any order the plan allows, retried and duplicated, publish the
//! same bytes as a local `tessera build`.

mod common;

use common::{rows, run, stderr, stdout, write_parquet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SPEC: &str = r#"
version: 1
name: planned
sources:
  events: { path: data/*.parquet }
filter: "day >= 3"
fields:
  id:    { dtype: i64, column: id }
  x:     { dtype: f32, column: x, fill_null: 0, transform: [ { clip: { min: 0 } }, log1p, standardize ] }
  kv:    { dtype: i32, column: k, transform: { vocab: { min_count: 2 } } }
  kh:    { dtype: i32, column: k, transform: { hash_bucket: 31 } }
  raw:   { dtype: u8, column: b, bytes: 4 }
split: { key: id, weights: { train: 0.9, val: 0.1 } }
shards: { target_bytes: 64KiB }
chunks: { target_bytes: 8KiB }
"#;

fn spec_text() -> String {
    SPEC.to_string()
}

fn project(spec: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().to_path_buf();
    write_parquet(&root.join("data"), &rows(20000, 5), 4, 500);
    std::fs::write(root.join("spec.yaml"), spec).expect("spec");
    (tmp, root)
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stderr(out));
    let text = stdout(out);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every file of an artifact with the blake3 of its bytes.
fn files(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("artifact") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.file_type().expect("type").is_file() {
            continue;
        }
        let bytes = std::fs::read(e.path()).expect("read");
        out.insert(name, blake3::hash(&bytes).to_hex().to_string());
    }
    out
}

fn local_build(root: &Path, threads: &str) -> (String, PathBuf) {
    let spec = root.join("spec.yaml");
    let cache = root.join("local-cache");
    let r = json(&run(&[
        "build",
        spec.to_str().expect("utf8"),
        "--cache-dir",
        cache.to_str().expect("utf8"),
        "--threads",
        threads,
        "--json",
        "-q",
    ]));
    (
        r["hash"].as_str().expect("hash").to_string(),
        PathBuf::from(r["path"].as_str().expect("path")),
    )
}

fn plan(root: &Path, cache: &str, work: &str) -> serde_json::Value {
    json(&run(&[
        "plan",
        root.join("spec.yaml").to_str().expect("utf8"),
        "--cache-dir",
        root.join(cache).to_str().expect("utf8"),
        "--work-dir",
        root.join(work).to_str().expect("utf8"),
        "--json",
    ]))
}

fn task(plan: &Path, id: &str) {
    let out = run(&["task", plan.to_str().expect("utf8"), id]);
    assert!(out.status.success(), "task {id}: {}", stderr(&out));
}

/// Whether a task's chunk number is odd.
fn odd(id: &str) -> bool {
    id.bytes().last().is_some_and(|b| (b - b'0') % 2 == 1)
}

fn ids(plan: &serde_json::Value, prefix: &str) -> Vec<String> {
    plan["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .filter(|id| id.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn tasks_in_any_order_retried_and_duplicated_publish_the_local_bytes() {
    let (_tmp, root) = project(&spec_text());
    let (hash, local) = local_build(&root, "2");

    let p = plan(&root, "cluster-cache", "work");
    assert_eq!(p["hash"].as_str(), Some(hash.as_str()), "{p}");
    assert_eq!(p["decision"]["plan"].as_str(), Some("chunked"), "{p}");
    let stats = ids(&p, "stats-");
    let shards = ids(&p, "shard-");
    assert!(stats.len() >= 4, "several chunks: {p}");
    assert_eq!(stats.len(), shards.len());
    assert_eq!(ids(&p, "freeze"), ["freeze"]);
    let plan_file = root.join("work").join("plan.json");

    // Statistics tasks in reverse order, one of them twice; the odd ones in
    // one process (as a cluster executor batches them).
    for id in stats.iter().rev().filter(|id| !odd(id)) {
        task(&plan_file, id);
    }
    let mut batch = vec!["task", plan_file.to_str().expect("utf8")];
    batch.extend(stats.iter().filter(|id| odd(id)).map(String::as_str));
    let out = run(&batch);
    assert!(out.status.success(), "{}", stderr(&out));
    task(&plan_file, &stats[1]);
    // Freezing before a partial exists names the missing task.
    let missing = root
        .join("work")
        .join("stats")
        .join(format!("{:05}.json", 0));
    let saved = std::fs::read(&missing).expect("partial");
    std::fs::remove_file(&missing).expect("rm");
    let out = run(&["task", plan_file.to_str().expect("utf8"), "freeze"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("stats-00000"), "{}", stderr(&out));
    std::fs::write(&missing, saved).expect("restore");
    task(&plan_file, "freeze");
    // Shard tasks interleaved, each of the first two run again (a retry
    // after a lost worker: the same output, replaced).
    let mut order: Vec<&String> = shards.iter().step_by(2).collect();
    order.extend(shards.iter().skip(1).step_by(2));
    for id in order {
        task(&plan_file, id);
    }
    task(&plan_file, &shards[0]);
    task(&plan_file, &shards[1]);

    let exported = root.join("exported");
    let out = run(&[
        "commit",
        plan_file.to_str().expect("utf8"),
        "--json",
        "-o",
        exported.to_str().expect("utf8"),
    ]);
    let r = json(&out);
    assert_eq!(files(&exported), files(&local), "-o places the same files");
    assert_eq!(r["hash"].as_str(), Some(hash.as_str()));
    let published = PathBuf::from(r["path"].as_str().expect("path"));
    assert_eq!(files(&published), files(&local), "same files, same bytes");
    assert!(!root.join("work").exists(), "the work directory is removed");

    // Planning again is a cache hit: no tasks.
    let again = plan(&root, "cluster-cache", "work2");
    assert_eq!(again["cached"].as_str(), published.to_str(), "{again}");
    assert_eq!(again["tasks"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_global_query_runs_as_stage_tasks_with_the_local_bytes() {
    let spec = spec_text()
        .replace(
            "filter: \"day >= 3\"\n",
            "query: SELECT k, MIN(id) AS id, SUM(x) AS x, MAX(b) AS b FROM events WHERE day >= 3 \
         GROUP BY k\n",
        )
        .replace(
            "chunks: { target_bytes: 8KiB }",
            "chunks: { target_bytes: 8KiB, partitions: 3 }",
        );
    let (_tmp, root) = project(&spec);
    let (hash, local) = local_build(&root, "1");
    let p = plan(&root, "cluster-cache", "work");
    assert_eq!(p["hash"].as_str(), Some(hash.as_str()));
    assert_eq!(p["decision"]["plan"].as_str(), Some("global"), "{p}");
    assert_eq!(p["staged"]["partitions"].as_u64(), Some(3), "{p}");
    let stage_ids = ids(&p, "stage");
    assert!(stage_ids.len() >= 3, "{p}");
    assert_eq!(ids(&p, "global"), ["global"]);
    let plan_file = root.join("work").join("plan.json");
    // The global task refuses to run before the stages it reads.
    let out = run(&["task", plan_file.to_str().expect("utf8"), "global"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("has task stage"), "{}", stderr(&out));
    // Every stage task twice, in plan order (a retry writes the same bytes).
    for id in &stage_ids {
        task(&plan_file, id);
        task(&plan_file, id);
    }
    task(&plan_file, "global");
    let r = json(&run(&[
        "commit",
        plan_file.to_str().expect("utf8"),
        "--json",
    ]));
    let published = PathBuf::from(r["path"].as_str().expect("path"));
    assert_eq!(files(&published), files(&local));
}

#[test]
fn a_global_query_in_one_partition_is_one_task_with_the_local_bytes() {
    let spec = spec_text().replace(
        "filter: \"day >= 3\"\n",
        "query: SELECT id, x, k, b, day FROM events WHERE day >= 3 ORDER BY id DESC LIMIT 15000\n",
    )
    .replace("chunks: { target_bytes: 8KiB }", "chunks: { target_bytes: 8KiB, partitions: 1 }");
    let (_tmp, root) = project(&spec);
    let (hash, local) = local_build(&root, "1");
    let p = plan(&root, "cluster-cache", "work");
    assert_eq!(p["hash"].as_str(), Some(hash.as_str()));
    assert_eq!(ids(&p, ""), ["global"]);
    assert_eq!(p["unstaged"].as_str(), Some("one partition"), "{p}");
    let plan_file = root.join("work").join("plan.json");
    task(&plan_file, "global");
    task(&plan_file, "global");
    let r = json(&run(&[
        "commit",
        plan_file.to_str().expect("utf8"),
        "--json",
    ]));
    let published = PathBuf::from(r["path"].as_str().expect("path"));
    assert_eq!(files(&published), files(&local));
}

#[test]
fn a_stage_task_refuses_a_plan_cut_elsewhere_and_a_damaged_shuffle_file() {
    let spec = spec_text()
        .replace(
            "filter: \"day >= 3\"\n",
            "query: SELECT k, MIN(id) AS id, AVG(x) AS x, MIN(b) AS b FROM events GROUP BY k\n",
        )
        .replace(
            "chunks: { target_bytes: 8KiB }",
            "chunks: { target_bytes: 8KiB, partitions: 2 }",
        );
    let (_tmp, root) = project(&spec);
    let p = plan(&root, "cache", "work");
    let plan_file = root.join("work").join("plan.json");
    let first = ids(&p, "stage0-")[0].clone();
    task(&plan_file, &first);
    // A shuffle file whose bytes changed: the task that reads it says which.
    let dir = root.join("work").join("shuffle").join("s000");
    let victim = std::fs::read_dir(&dir)
        .expect("shuffle dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "arrow"))
        .expect("a shuffle file");
    let mut bytes = std::fs::read(&victim).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&victim, &bytes).expect("write");
    for id in ids(&p, "stage0-") {
        task(&plan_file, &id);
    }
    std::fs::write(&victim, &bytes).expect("damage again");
    let reader = p["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["kind"] == "stage" && !t["after"].as_array().expect("after").is_empty())
        .filter_map(|t| t["id"].as_str())
        .map(str::to_string)
        .collect::<Vec<_>>();
    let failed = reader
        .iter()
        .map(|id| run(&["task", plan_file.to_str().expect("utf8"), id]))
        .find(|o| !o.status.success())
        .expect("a reader of the damaged file fails");
    let name = victim
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    assert!(stderr(&failed).contains(&name), "{}", stderr(&failed));
    // A plan whose recorded cut is not what this machine cuts.
    let text = std::fs::read_to_string(&plan_file).expect("plan");
    let digest = p["staged"]["digest"].as_str().expect("digest");
    std::fs::write(&plan_file, text.replace(digest, &"0".repeat(64))).expect("write");
    let out = run(&["task", plan_file.to_str().expect("utf8"), &first]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("plans differently here"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_task_of_a_stale_plan_or_an_unknown_task_is_refused() {
    let (_tmp, root) = project(&spec_text());
    plan(&root, "cache", "work");
    let plan_file = root.join("work").join("plan.json");
    let out = run(&["task", plan_file.to_str().expect("utf8"), "shard-99999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no task \"shard-99999\""),
        "{}",
        stderr(&out)
    );
    // An unknown id among known ones: nothing runs.
    let out = run(&[
        "task",
        plan_file.to_str().expect("utf8"),
        "stats-00000",
        "stats-x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!root.join("work").join("stats").exists());
    // An input changes after planning: every task refuses to run.
    write_parquet(&root.join("data"), &rows(20000, 6), 4, 500);
    let out = run(&["task", plan_file.to_str().expect("utf8"), "stats-00000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("changed since the plan was made"),
        "{}",
        stderr(&out)
    );
    let out = run(&["commit", plan_file.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_compressed_set_built_by_tasks_is_the_local_build() {
    let spec = spec_text().replace(
        "shards: { target_bytes: 64KiB }",
        "shards: { target_bytes: 64KiB, compression: zstd, level: 3 }",
    );
    let (_tmp, root) = project(&spec);
    let (hash, local) = local_build(&root, "2");
    let p = plan(&root, "cluster-cache", "work");
    assert_eq!(p["hash"].as_str(), Some(hash.as_str()), "{p}");
    let plan_file = root.join("work").join("plan.json");
    // The plan lists its tasks in an order that runs.
    for id in ids(&p, "") {
        task(&plan_file, &id);
    }
    let r = json(&run(&[
        "commit",
        plan_file.to_str().expect("utf8"),
        "--json",
    ]));
    let published = PathBuf::from(r["path"].as_str().expect("path"));
    let got = files(&published);
    assert!(
        got.keys().any(|f| f.ends_with(".zst")),
        "compressed shards: {got:?}"
    );
    assert_eq!(got, files(&local), "same files, same bytes");
}
