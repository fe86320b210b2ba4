//! Builds at once in one cache: two and four on one hash (one of them
//! builds, the others wait and get its artifact), and on different hashes
//! (each builds its own), as `tessera build` processes and as threads
//! calling the shipped `tessera::build::build()`.

use super::report::Section;
use super::*;
use tessera::build::{BuildOptions, build};
use tessera::progress::ProgressMode;

/// The shard files of a snapshot (the manifest names the dataset, which
/// differs between the specs built side by side).
fn shards(s: &Snapshot) -> Vec<(&String, &String)> {
    s.iter().filter(|(f, _)| *f != "manifest.json").collect()
}

/// `copies` builds of each spec in `specs`, all started together.
type Plan = Vec<(PathBuf, usize)>;

/// Checks the results of one round: per spec, exactly one build did the
/// work, every result is that spec's artifact, byte-identical to its
/// reference (shards for renamed specs, every file for the reference spec).
fn check_round(
    p: &Project,
    cache: &Path,
    plan: &Plan,
    results: &[(PathBuf, Built)],
) -> Result<(), String> {
    let (_, reference) = p.reference(&p.chunked());
    for (spec, copies) in plan {
        let mine: Vec<&Built> = results
            .iter()
            .filter(|(s, _)| s == spec)
            .map(|(_, b)| b)
            .collect();
        if mine.len() != *copies {
            return Err(format!("{} results for {copies} builds", mine.len()));
        }
        let built = mine.iter().filter(|b| !b.cache_hit).count();
        if built != 1 {
            return Err(format!(
                "{copies} concurrent builds of {}: {built} did the work (expected 1)",
                spec.display()
            ));
        }
        if mine.iter().any(|b| b.path != mine[0].path) {
            return Err("concurrent builds of one spec returned different artifacts".into());
        }
        let got = snapshot(&mine[0].path);
        if shards(&got) != shards(&reference) {
            return Err("shards differ from the reference build".into());
        }
        if *spec == p.chunked() && got != reference {
            return Err("the artifact differs from the reference build".into());
        }
    }
    let n = all_verify(cache)?;
    if n != plan.len() {
        return Err(format!("{n} artifacts for {} specs", plan.len()));
    }
    let tmp = entries(&cache.join("tmp"));
    if !tmp.is_empty() {
        return Err(format!("concurrent builds left {tmp:?} in tmp/"));
    }
    Ok(())
}

/// Specs that differ only in their name: one hash each.
fn renamed(p: &Project, prefix: &str, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| p.spec(&format!("{prefix}{i}-{}", unique()), CHUNKED_SPEC))
        .collect()
}

fn plans(p: &Project, prefix: &str) -> Vec<(String, Plan)> {
    let two = renamed(p, prefix, 2);
    let four = renamed(p, prefix, 4);
    let mixed = renamed(p, prefix, 2);
    vec![
        ("2 on one hash".into(), vec![(p.chunked(), 2)]),
        ("4 on one hash".into(), vec![(p.chunked(), 4)]),
        (
            "2 on different hashes".into(),
            two.into_iter().map(|s| (s, 1)).collect(),
        ),
        (
            "4 on different hashes".into(),
            four.into_iter().map(|s| (s, 1)).collect(),
        ),
        (
            "4: 2 on each of 2 hashes".into(),
            mixed.into_iter().map(|s| (s, 2)).collect(),
        ),
    ]
}

pub fn processes(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "Concurrent `tessera build` processes in one cache",
        "The processes are started together. Builds of one hash take its lock in turn: \
         the first builds, the others wait, then find its artifact (`cache_hit` in \
         `--json`). Builds of different hashes run side by side.",
    );
    for (label, plan) in plans(p, "proc") {
        let cache = p.fresh_dir("concurrent");
        let children: Vec<(PathBuf, std::process::Child)> = plan
            .iter()
            .flat_map(|(spec, n)| std::iter::repeat_n(spec, *n))
            .map(|spec| {
                let mut cmd = tessera();
                cmd.arg("build")
                    .arg(spec)
                    .arg("--cache-dir")
                    .arg(&cache)
                    .args(["--json", "-q"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                (spec.clone(), cmd.spawn().unwrap())
            })
            .collect();
        let mut results = Vec::new();
        for (spec, child) in children {
            let out = wait_timeout(child)?;
            if !out.status.success() {
                return Err(format!(
                    "{label}: a build failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            results.push((spec, parse_built(&String::from_utf8_lossy(&out.stdout))?));
        }
        check_round(p, &cache, &plan, &results).map_err(|e| format!("{label}: {e}"))?;
        let n = results.len();
        s.row(
            format!("{label} (processes)"),
            n,
            "one build per hash did the work, the others returned its artifact; every \
             artifact verified and byte-identical to the reference; nothing left in `tmp/`",
        );
    }
    Ok(s)
}

pub fn threads(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "Concurrent `tessera::build::build()` calls in one process",
        "The same rounds, as threads of one process calling the library's `build()`, \
         the function `tessera build` runs.",
    );
    for (label, plan) in plans(p, "thread") {
        let cache = p.fresh_dir("threads");
        let specs: Vec<PathBuf> = plan
            .iter()
            .flat_map(|(spec, n)| std::iter::repeat_n(spec.clone(), *n))
            .collect();
        let barrier = std::sync::Barrier::new(specs.len());
        let results: Vec<Result<(PathBuf, Built), String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = specs
                .iter()
                .map(|spec| {
                    let (barrier, cache) = (&barrier, &cache);
                    scope.spawn(move || {
                        barrier.wait();
                        let opts = BuildOptions {
                            cache_dir: Some(cache.clone()),
                            threads: Some(1),
                            memory_limit: None,
                            progress: ProgressMode::Quiet,
                            ..Default::default()
                        };
                        build(spec, &opts)
                            .map(|r| {
                                let b = Built {
                                    hash: r.hash,
                                    path: r.path,
                                    cache_hit: r.cache_hit,
                                };
                                (spec.clone(), b)
                            })
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a build panicked".into())))
                .collect()
        });
        let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        check_round(p, &cache, &plan, &results).map_err(|e| format!("{label}: {e}"))?;
        s.row(
            format!("{label} (threads)"),
            results.len(),
            "one build per hash did the work, the others returned its artifact; every \
             artifact verified and byte-identical to the reference; nothing left in `tmp/`",
        );
    }
    Ok(s)
}
