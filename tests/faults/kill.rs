//! SIGKILL of the `tessera` binary: at every named point of a build, at
//! moments spread over a build, during a cache hit, and while `cache gc`
//! deletes an artifact.

use super::report::Section;
use super::*;

/// The points of a chunked build, in the order a build reaches them, and
/// whether the artifact is published by then. `#n` is the n-th passage.
const CHUNKED_POINTS: &[(&str, bool)] = &[
    ("fingerprint.hashed", false),
    ("stat-cache.written", false),
    ("cache.locked", false),
    ("stage.created", false),
    ("build.planned", false),
    ("stage.stats.batch", false),
    ("stage.stats.chunk", false),
    ("stage.stats.done", false),
    ("stage.encode.batch", false),
    ("stage.encode.batch#3", false),
    ("stage.encode.chunk", false),
    ("stage.encode.chunk#2", false),
    ("stage.encode.done", false),
    ("build.shuffled", false),
    ("build.rechecked", false),
    ("publish.checked", false),
    ("publish.synced", false),
    ("publish.manifest-written", false),
    ("publish.renamed", true),
    ("publish.done", true),
];

/// The points only a global query passes, and one of its encode points.
const GLOBAL_POINTS: &[(&str, bool)] = &[
    ("stage.query.batch", false),
    ("stage.query.done", false),
    ("stage.encode.batch", false),
    ("publish.manifest-written", false),
];

fn build_cmd(spec: &Path, cache: &Path) -> Command {
    let mut cmd = tessera();
    cmd.arg("build")
        .arg(spec)
        .arg("--cache-dir")
        .arg(cache)
        .arg("-q");
    cmd
}

/// The points a build of `spec` passes, with how many times each.
fn trace(p: &Project, spec: &Path) -> Result<BTreeMap<String, usize>, String> {
    let cache = p.fresh_dir("trace");
    let file = cache.join("points.txt");
    let mut cmd = build_cmd(spec, &cache.join("cache"));
    cmd.env("TESSERA_FAULT_TRACE", &file);
    run(cmd)?;
    let mut seen = BTreeMap::new();
    for line in fs::read_to_string(&file)
        .map_err(|e| e.to_string())?
        .lines()
    {
        *seen.entry(line.to_string()).or_insert(0) += 1;
    }
    Ok(seen)
}

/// Every listed point is still on the build's path, as often as the kill
/// needs it.
fn check_on_path(seen: &BTreeMap<String, usize>, points: &[(&str, bool)]) -> Result<(), String> {
    for (point, _) in points {
        let (name, nth) = match point.split_once('#') {
            Some((n, k)) => (n, k.parse::<usize>().unwrap_or(1)),
            None => (*point, 1),
        };
        let count = seen.get(name).copied().unwrap_or(0);
        if count < nth {
            return Err(format!(
                "fault point {point} is not on the build's path (passed {count} times; \
                 trace: {seen:?})"
            ));
        }
    }
    Ok(())
}

/// Kills a build of `spec` at `point` and checks what it left; returns the
/// outcome in words.
fn kill_once(p: &Project, spec: &Path, point: &str, published: bool) -> Result<String, String> {
    let cache = p.fresh_dir("kill");
    kill_at(build_cmd(spec, &cache), point)?;
    let left = artifacts(&cache);
    if left.len() != usize::from(published) {
        return Err(format!(
            "killed at {point}: expected {} artifact(s), found {left:?}",
            usize::from(published)
        ));
    }
    all_verify(&cache)?;
    let staging = entries(&cache.join("tmp")).len();
    let stray_stat = entries(&cache)
        .iter()
        .any(|n| n.starts_with(".stat-cache.json."));
    let gc = gc_cli(&cache, &[])?;
    let tmp_left = entries(&cache.join("tmp"));
    if !tmp_left.is_empty() {
        return Err(format!("cache gc left {tmp_left:?} in tmp/: {gc}"));
    }
    let locks = entries(&cache.join("locks"));
    if locks.len() != usize::from(published) {
        return Err(format!("cache gc left lock files {locks:?}"));
    }
    let hit = rerun_identical(p, spec, &cache)?;
    if hit != published {
        return Err(format!(
            "killed at {point}: the rerun was a cache hit: {hit}"
        ));
    }
    let mut outcome = if published {
        "artifact complete and verified; the rerun is a cache hit".to_string()
    } else {
        "no artifact".to_string()
    };
    if staging > 0 {
        outcome.push_str("; `cache gc` removed the staging directory");
    }
    if stray_stat {
        outcome.push_str(
            "; a stat-cache temporary file is left (`cache gc` removes it after an hour)",
        );
    }
    if !published {
        outcome.push_str("; the rerun builds it, byte-identical");
    }
    Ok(outcome)
}

pub fn named_points(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "SIGKILL of `tessera build` at named points",
        "Each build runs in a fresh cache and is killed once, at the point named; the \
         artifact is published by one rename, after every shard and the manifest are \
         written and fsynced, so before that rename a kill leaves no artifact and after \
         it a complete one. `cache gc` then runs, and the same build again. The chunked \
         spec has statistics, a vocabulary, a split and a build-time shuffle; the global \
         one is a GROUP BY.",
    );
    for (spec, points) in [(p.chunked(), CHUNKED_POINTS), (p.global(), GLOBAL_POINTS)] {
        check_on_path(&trace(p, &spec)?, points)?;
        let kind = spec.file_stem().unwrap().to_string_lossy().into_owned();
        for (point, published) in points {
            let outcome = kill_once(p, &spec, point, *published)?;
            s.row(format!("{kind} build, `{point}`"), 1, outcome);
        }
    }
    Ok(s)
}

/// Kills at moments spread over a build's duration, wherever it then is.
pub fn moments(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "SIGKILL of `tessera build` at moments spread over a build",
        "The same chunked build, killed after a delay: one ninth of a build's measured \
         duration, two ninths, and so on (a build that finished first is not hurt). Where \
         it stood then differs from run to run; the outcome may not.",
    );
    let spec = p.chunked();
    let t = Instant::now();
    build_cli(&spec, &p.fresh_dir("timing"))?;
    let duration = t.elapsed();
    let kills = 8;
    let mut landed = 0;
    for i in 1..=kills {
        let cache = p.fresh_dir("moment");
        let mut child = build_cmd(&spec, &cache)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        std::thread::sleep(duration * i / (kills + 1));
        if child.try_wait().map_err(|e| e.to_string())?.is_none() {
            landed += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        all_verify(&cache)?;
        gc_cli(&cache, &[])?;
        if !entries(&cache.join("tmp")).is_empty() {
            return Err("cache gc left debris in tmp/".into());
        }
        rerun_identical(p, &spec, &cache)?;
    }
    println!("moments: {landed} of {kills} kills hit a running build ({duration:?} per build)");
    s.row(
        "chunked build, SIGKILL after 1/9 ... 8/9 of its duration",
        kills as usize,
        "every artifact left passed `verify`; `cache gc` removed every staging directory; \
         every rerun byte-identical",
    );
    Ok(s)
}

/// A kill during a cache hit, and during `cache gc`'s deletion.
pub fn hit_and_gc(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "SIGKILL of a cache hit and of `cache gc`",
        "A cache hit only reads the manifest and marks the artifact used; `cache gc` \
         renames an artifact into `tmp/` before deleting it, so the artifact's directory \
         is whole or absent.",
    );
    let spec = p.chunked();

    let cache = p.fresh_dir("hit");
    build_cli(&spec, &cache)?;
    kill_at(build_cmd(&spec, &cache), "cache.hit")?;
    if all_verify(&cache)? != 1 {
        return Err("the artifact is gone after a killed cache hit".into());
    }
    if !rerun_identical(p, &spec, &cache)? {
        return Err("the rerun after a killed cache hit was not a hit".into());
    }
    s.row(
        "`tessera build` killed at `cache.hit`",
        1,
        "artifact untouched and verified; the rerun is a cache hit",
    );

    let cache = p.fresh_dir("gc");
    build_cli(&spec, &cache)?;
    let mut gc = tessera();
    gc.args(["cache", "gc", "--older-than", "0s", "--cache-dir"])
        .arg(&cache);
    std::thread::sleep(Duration::from_millis(20)); // older than 0 s
    kill_at(gc, "cache.discard-renamed")?;
    if !artifacts(&cache).is_empty() {
        return Err("the artifact is still in place after gc renamed it".into());
    }
    if entries(&cache.join("tmp")).is_empty() {
        return Err("no half-deleted directory in tmp/".into());
    }
    gc_cli(&cache, &[])?;
    if !entries(&cache.join("tmp")).is_empty() {
        return Err("the next gc left the half-deleted directory".into());
    }
    if rerun_identical(p, &spec, &cache)? {
        return Err("the rerun after gc was a cache hit".into());
    }
    s.row(
        "`tessera cache gc` killed at `cache.discard-renamed` (artifact moved into `tmp/`, \
         not yet deleted)",
        1,
        "no artifact in place, never a partial one; the next `cache gc` removed the rest; \
         the rerun builds it, byte-identical",
    );
    Ok(s)
}
