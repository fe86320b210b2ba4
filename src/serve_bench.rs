//! `tessera bench-transform`: the serving transform's latency per call, one
//! row and batches, as a serving process would call it (rows already in
//! memory as Arrow, the artifact opened once). The transform runs without
//! DataFusion unless a field's SQL needs it; then the embedded session of
//! `tessera transform` evaluates those fields, and the report names them.

use crate::error::BuildError;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_transform::Transform;

/// The latency of one batch size.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// The fields evaluated by the embedded DataFusion session (empty: none).
    pub datafusion: Vec<String>,
    /// Rows per call.
    pub rows: usize,
    /// Calls timed.
    pub calls: usize,
    /// Median microseconds per call.
    pub p50_us: f64,
    /// 99th percentile microseconds per call.
    pub p99_us: f64,
    /// Records per second at the median.
    pub rows_per_s: f64,
}

/// Times `Transform::apply` on the first rows of `input` for each size in
/// `sizes`: calls on consecutive slices of the input, about `seconds` per
/// size (at least 200 calls, at most 200,000).
pub fn latency(
    artifact: &Path,
    input: &Path,
    sizes: &[usize],
    seconds: f64,
) -> Result<Vec<Latency>, BuildError> {
    let mut t = Transform::from_artifact(artifact)
        .map_err(|e| BuildError::Other(format!("{}: {e}", artifact.display())))?;
    let datafusion: Vec<String> = t
        .needs_engine()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("fields."))
        .collect();
    if !datafusion.is_empty() {
        t = crate::serve::open(artifact)?;
    }
    let csv = crate::serve::input_csv_options(artifact)?;
    let batches = crate::plan::rows::read_rows(input, 1 << 16, &csv)?;
    let Some(first) = batches.first() else {
        return Err(BuildError::Other(format!("{}: no rows", input.display())));
    };
    let rows = datafusion::arrow::compute::concat_batches(&first.schema(), &batches)
        .map_err(|e| BuildError::Other(format!("{}: {e}", input.display())))?;
    let fail = |e: tessera_transform::TransformError| {
        BuildError::Other(format!("{}: {e}", input.display()))
    };
    let mut out = Vec::with_capacity(sizes.len());
    for &size in sizes {
        if size == 0 || size > rows.num_rows() {
            return Err(BuildError::Other(format!(
                "batch size {size}: the input has {} rows",
                rows.num_rows()
            )));
        }
        let slices = rows.num_rows() / size;
        // Warm up (first-use allocations, caches).
        for i in 0..slices.min(20) {
            t.apply(&rows.slice(i * size, size)).map_err(fail)?;
        }
        let budget = Duration::from_secs_f64(seconds);
        let start = Instant::now();
        let mut times = Vec::new();
        let mut i = 0;
        while times.len() < 200_000 && (times.len() < 200 || start.elapsed() < budget) {
            let slice = rows.slice((i % slices) * size, size);
            let t0 = Instant::now();
            let enc = t.apply(&slice).map_err(fail)?;
            times.push(t0.elapsed());
            std::hint::black_box(enc);
            i += 1;
        }
        times.sort_unstable();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        let p50 = at(0.50).as_secs_f64() * 1e6;
        out.push(Latency {
            datafusion: datafusion.clone(),
            rows: size,
            calls: times.len(),
            p50_us: p50,
            p99_us: at(0.99).as_secs_f64() * 1e6,
            rows_per_s: size as f64 / (p50 / 1e6),
        });
    }
    Ok(out)
}
