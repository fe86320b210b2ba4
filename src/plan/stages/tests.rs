use super::*;
use datafusion::arrow::array::{Float64Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};

/// Two tables cut into four partitions each: `t(k, v)` with 3,000 rows over
/// 700 keys, and `d(k, w)` with a row for every other key.
fn context(partitions: usize) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(partitions);
    let ctx = SessionContext::new_with_config(config);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
    ]));
    let parts: Vec<Vec<RecordBatch>> = (0..4)
        .map(|p| {
            let ks: Vec<i64> = (0..750).map(|i| (i * 3 + p * 13) % 700).collect();
            let vs: Vec<f64> = (0..750).map(|i| (i as f64) * 0.5 + p as f64).collect();
            vec![
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![
                        Arc::new(Int64Array::from(ks)),
                        Arc::new(Float64Array::from(vs)),
                    ],
                )
                .expect("batch"),
            ]
        })
        .collect();
    let t = MemTable::try_new(Arc::clone(&schema), parts).expect("table");
    ctx.register_table("t", Arc::new(t)).expect("register");
    let dschema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("w", DataType::Int64, false),
    ]));
    let dparts: Vec<Vec<RecordBatch>> = (0..4)
        .map(|p| {
            let ks: Vec<i64> = (0..88).map(|i| (i * 4 + p) * 2).collect();
            let ws: Vec<i64> = ks.iter().map(|k| k * 10).collect();
            vec![
                RecordBatch::try_new(
                    Arc::clone(&dschema),
                    vec![
                        Arc::new(Int64Array::from(ks)),
                        Arc::new(Int64Array::from(ws)),
                    ],
                )
                .expect("batch"),
            ]
        })
        .collect();
    let d = MemTable::try_new(dschema, dparts).expect("table");
    ctx.register_table("d", Arc::new(d)).expect("register");
    ctx
}

/// Runs `sql` whole and as stages (every task of every stage, children
/// first, then the top); returns both answers as text, and the cut.
async fn both(sql: &str, partitions: usize) -> (String, String, Vec<StageInfo>) {
    let ctx = context(partitions);
    let plan = plan_of(&ctx, sql).await;
    whole_and_staged(&ctx, plan).await
}

/// `plan` run whole and as stages: both answers as text, and the cut.
async fn whole_and_staged(
    ctx: &SessionContext,
    plan: Arc<dyn ExecutionPlan>,
) -> (String, String, Vec<StageInfo>) {
    let whole = collect(Arc::clone(&plan), ctx.task_ctx())
        .await
        .expect("whole");
    let work = tempfile::tempdir().expect("tempdir");
    let dir = ShuffleDir::new(work.path());
    let cut = cut(plan, &dir).expect("cut");
    for stage in &cut.stages {
        // Tasks in reverse order: no task depends on another of its stage.
        for task in (0..stage.info.tasks).rev() {
            write::run_task(stage, task, ctx.task_ctx(), &dir, u64::MAX)
                .await
                .expect("task");
        }
    }
    let staged = collect(Arc::clone(&cut.top), ctx.task_ctx())
        .await
        .expect("top");
    let text = |b: &[RecordBatch]| pretty_format_batches(b).expect("format").to_string();
    (text(&whole), text(&staged), cut.infos())
}

#[tokio::test]
async fn a_group_by_cut_at_its_hash_exchange_gives_the_whole_plans_answer() {
    let (whole, staged, infos) = both(
        "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM t GROUP BY k ORDER BY k",
        4,
    )
    .await;
    assert_eq!(whole, staged);
    assert!(whole.lines().count() > 700, "{}", &whole[..200]);
    // The partial aggregate's stage writes hash partitions; the final
    // aggregate's stage is sorted per partition and merged on top.
    assert!(
        infos.iter().any(|s| s.exchange == Exchange::Hash(4)),
        "{infos:?}"
    );
    assert!(
        infos.iter().any(|s| s.exchange == Exchange::Merge),
        "{infos:?}"
    );
}

#[tokio::test]
async fn a_join_distinct_and_window_give_the_whole_plans_answer() {
    for sql in [
        "SELECT t.k, d.w, COUNT(*) AS n FROM t JOIN d ON t.k = d.k GROUP BY t.k, d.w ORDER BY t.k",
        "SELECT DISTINCT k FROM t ORDER BY k",
        "SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS r FROM t ORDER BY k, v",
        "SELECT COUNT(*) AS n, SUM(v) AS s FROM t",
    ] {
        let (whole, staged, infos) = both(sql, 3).await;
        assert_eq!(whole, staged, "{sql}");
        assert!(!infos.is_empty(), "{sql}: no stage cut");
    }
}

#[tokio::test]
async fn a_task_run_twice_writes_the_same_files() {
    let ctx = context(4);
    let plan = ctx
        .sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY k")
        .await
        .expect("sql")
        .create_physical_plan()
        .await
        .expect("plan");
    let work = tempfile::tempdir().expect("tempdir");
    let dir = ShuffleDir::new(work.path());
    let cut = cut(plan, &dir).expect("cut");
    let first = &cut.stages[0];
    let a = write::run_task(first, 1, ctx.task_ctx(), &dir, u64::MAX)
        .await
        .expect("first run");
    let b = write::run_task(first, 1, ctx.task_ctx(), &dir, u64::MAX)
        .await
        .expect("second run");
    assert_eq!(a, b);
    assert!(a.files.iter().flatten().count() > 1, "{a:?}");
    // A damaged file is refused by name, never read.
    let f = a.files.iter().flatten().next().expect("a file");
    let path = dir.stage_dir(0).join(&f.file);
    let mut bytes = std::fs::read(&path).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).expect("write");
    let err = read::read_file(&path, f).expect_err("a damaged file");
    assert!(err.contains(&f.file) && err.contains("damaged"), "{err}");
}

/// `context(3)` plus `one(k, w)`: the rows of `d` in a single partition,
/// and hash joins told to collect any side of fewer than 10^8 bytes or rows
/// (as DataFusion does with small inputs once it knows their sizes). With
/// `global`, the session is a global query's (`exec::session`, with its
/// join rule), else a plain DataFusion one.
async fn collecting_context(global: bool) -> SessionContext {
    let ctx = if global {
        crate::plan::exec::global_session(3)
    } else {
        context(3)
    };
    if global {
        let plain = context(3);
        for name in ["t", "d"] {
            let t = plain.table_provider(name).await.expect("table");
            ctx.register_table(name, t).expect("register");
        }
    }
    let rows = ctx
        .sql("SELECT k, w FROM d")
        .await
        .expect("sql")
        .collect()
        .await
        .expect("rows");
    let one = MemTable::try_new(rows[0].schema(), vec![rows]).expect("table");
    ctx.register_table("one", Arc::new(one)).expect("register");
    for set in [
        "SET datafusion.optimizer.hash_join_single_partition_threshold = 100000000",
        "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 100000000",
    ] {
        ctx.sql(set)
            .await
            .expect("set")
            .collect()
            .await
            .expect("set");
    }
    ctx
}

async fn plan_of(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
    ctx.sql(sql)
        .await
        .expect("sql")
        .create_physical_plan()
        .await
        .expect("plan")
}

fn collect_left_joins(plan: &Arc<dyn ExecutionPlan>) -> Vec<datafusion::common::JoinType> {
    let mut out = Vec::new();
    if let Some(j) = plan.downcast_ref::<HashJoinExec>()
        && *j.partition_mode() == PartitionMode::CollectLeft
    {
        out.push(*j.join_type());
    }
    for c in plan.children() {
        out.extend(collect_left_joins(c));
    }
    out
}

#[tokio::test]
async fn a_collected_one_partition_side_runs_once_as_its_own_stage() {
    let ctx = collecting_context(false).await;
    let sql = "SELECT t.k, one.w, COUNT(*) AS n FROM t JOIN one ON t.k = one.k \
               GROUP BY t.k, one.w ORDER BY t.k";
    let plan = plan_of(&ctx, sql).await;
    assert_eq!(
        collect_left_joins(&plan),
        vec![datafusion::common::JoinType::Inner]
    );
    let (whole, staged, infos) = whole_and_staged(&ctx, plan).await;
    // The collected side is a stage of one task gathered by the probe
    // tasks, not a subtree each probe task runs again.
    assert!(
        infos.iter().any(|s| s.exchange == Exchange::Gather
            && s.tasks == 1
            && s.root.contains("DataSource")),
        "{infos:?}"
    );
    assert_eq!(whole, staged);
}

#[tokio::test]
async fn a_join_that_emits_unmatched_collected_rows_is_not_split_over_tasks() {
    let sql = "SELECT one.k, t.v FROM one LEFT JOIN t ON one.k = t.k ORDER BY one.k, t.v";
    // DataFusion alone collects `one` and emits its unmatched rows once all
    // partitions of `t` are done: cut into tasks, each task would emit them.
    let plain = collecting_context(false).await;
    let plan = plan_of(&plain, sql).await;
    assert_eq!(
        collect_left_joins(&plan),
        vec![datafusion::common::JoinType::Left]
    );
    let work = tempfile::tempdir().expect("tempdir");
    let Err(err) = cut(plan, &ShuffleDir::new(work.path())) else {
        panic!("a collected LEFT join was cut into tasks");
    };
    assert!(err.contains("unmatched rows"), "{err}");
    // A global query's session hashes both sides instead, and its stages
    // give the whole plan's answer.
    let ctx = collecting_context(true).await;
    let plan = plan_of(&ctx, sql).await;
    assert!(
        collect_left_joins(&plan).is_empty(),
        "{}",
        displayable(plan.as_ref()).indent(true)
    );
    let (whole, staged, _) = whole_and_staged(&ctx, plan).await;
    assert_eq!(whole, staged);
    assert!(whole.lines().count() > 350, "{whole}");
}
