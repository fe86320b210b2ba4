//! `tessera commit`: the outputs of every task of a plan assembled in chunk
//! order and the artifact published in the cache.

use super::*;

pub(super) fn frozen_of(plan: &BuildPlan, fields: usize) -> Result<Frozen, BuildError> {
    if plan.needs_stats {
        super::super::frozen_file::read(&plan.frozen_path())
    } else {
        Ok(vec![None; fields])
    }
}

/// Downloads every output a commit reads; returns their names.
pub(super) fn fetch_all_outputs(
    ws: &WorkStore,
    plan: &BuildPlan,
) -> Result<Vec<String>, BuildError> {
    let mut names = Vec::new();
    let mut outputs = Vec::new();
    match plan.decision {
        Some(Decision::Global { .. }) => {
            let path = ws.fetch("outputs/global.json", "task global")?;
            let g: GlobalOutput = read_json(&path)?;
            outputs.extend(g.outputs.into_iter().map(|(o, _)| o));
            names.push("outputs/global.json".to_string());
            ws.fetch("frozen.json", "task global")?;
            names.push("frozen.json".into());
            // The shuffle files, listed by their tasks' indexes, go with
            // the rest of the work directory.
            for st in plan.staged.iter().flat_map(|s| &s.stages) {
                for t in 0..st.tasks {
                    let rel = ShuffleDir::index_rel(st.id, t);
                    let what = format!("task {}", dag::stage_task_id(st.id, t));
                    ws.fetch(&rel, &what)?;
                    let index = read_index(&ShuffleDir::new(&ws.local), st.id, t)
                        .map_err(BuildError::Other)?;
                    for f in index.files.iter().flatten() {
                        names.push(ShuffleDir::file_rel(st.id, &f.file));
                    }
                    names.push(rel);
                }
            }
        }
        _ => {
            for c in &plan.chunks {
                let rel = format!("outputs/{:05}.json", c.index);
                let path = ws.fetch(&rel, &format!("task shard-{:05}", c.index))?;
                outputs.push(read_json::<(EncodeOutput, ScanMetrics)>(&path)?.0);
                names.push(rel);
                names.push(format!("stats/{:05}.json", c.index));
            }
            if plan.needs_stats {
                ws.fetch("frozen.json", "task freeze")?;
                names.push("frozen.json".into());
            }
        }
    }
    for rel in shards_listed(&outputs) {
        ws.fetch(&rel, "a shard task")?;
        names.push(rel);
    }
    Ok(names)
}

/// Assembles the outputs of every task of the plan at `plan_path` in chunk
/// order and publishes the artifact in the cache; removes the work
/// directory.
pub fn commit(plan_path: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let t0 = Instant::now();
    let (plan, remote) = open_plan(plan_path)?;
    let mut fetched = Vec::new();
    if let Some(ws) = &remote {
        fetched = fetch_all_outputs(ws, &plan)?;
    }
    let (spec, prepared) = load(&plan)?;
    let cache = prepared.cache;
    let layout = layout_of(&spec)?;
    let decision = plan
        .decision
        .clone()
        .ok_or_else(|| BuildError::Other("the plan has no query plan (a cache hit?)".into()))?;
    let (outputs, scan, chunks) = match decision {
        Decision::Global { .. } => {
            let g: GlobalOutput = read_json(&plan.global_path())?;
            let mut scan = g.scan;
            // The stage tasks scanned the inputs; the global task read
            // their files.
            let dir = ShuffleDir::new(&plan.work_dir);
            for st in plan.staged.iter().flat_map(|s| &s.stages) {
                for t in 0..st.tasks {
                    let index = read_index(&dir, st.id, t).map_err(BuildError::Other)?;
                    scan.add(&index.scan);
                }
            }
            (g.outputs, scan, g.chunks)
        }
        Decision::Chunked { .. } => {
            let mut outputs = Vec::with_capacity(plan.chunks.len());
            for c in &plan.chunks {
                outputs.push(read_json(&plan.output_path(c.index))?);
            }
            (outputs, ScanMetrics::default(), plan.chunks.len())
        }
    };
    let frozen = frozen_of(&plan, spec.fields.len()).or_else(|e| match decision {
        Decision::Global { .. } => {
            super::super::frozen_file::read(&plan.frozen_path()).map_err(|_| e)
        }
        Decision::Chunked { .. } => Err(e),
    })?;
    let mut built = None;
    let obtained = cache.get_or_build(
        &plan.hash,
        || {},
        |staging| {
            let (manifest, b) = Commit {
                spec: &spec,
                layout: &layout,
                hash: &plan.hash,
                files: &prepared.files,
                canonical: prepared.canonical.clone(),
                decision: decision.clone(),
                serial: plan.serial.clone(),
                chunks,
                frozen: &frozen,
                allow_empty: opts.allow_empty,
                scan,
                query_columns: plan.query_columns.clone(),
            }
            .assemble(outputs, &plan.shards_dir(), staging.path())?;
            let pool = super::run::thread_pool(plan.threads)?;
            let mut ignored = BTreeMap::new();
            let manifest = crate::compress::compress_staged(
                staging.path(),
                manifest,
                spec.shards.zstd_level,
                &pool,
                &mut ignored,
            )?;
            built = Some(b);
            Ok::<_, BuildError>(manifest)
        },
    )?;
    let _ = std::fs::remove_dir_all(&plan.work_dir);
    if let Some(ws) = &remote {
        fetched.push("plan.json".into());
        ws.delete(&fetched);
    }
    let mut seconds = BTreeMap::new();
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    Ok(match built {
        Some(b) => super::super::built_report(plan.hash.clone(), obtained.artifact, b, seconds),
        // Another commit of the same hash published it first.
        None => super::super::hit_report(plan.hash.clone(), obtained.artifact, t0, seconds),
    })
}
