//! The loader's state dict: what `state_dict` saves (position, the
//! configuration it is valid for, a mixture's counts and schedule history)
//! and what `load_state_dict` checks and restores.

use super::args::last_batch_name;
use super::{Loader, Progress, Source, lock};
use crate::errors::{argument, to_py};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::PoisonError;
use tessera_reader::{ScheduleChange, WeightStep};

/// Version tag stored in every state dict.
const STATE_FORMAT: &str = "tessera-loader/1";

impl Loader {
    /// The body of `state_dict` (see there).
    pub(super) fn save_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (epoch, position) = {
            let p = lock(&self.progress);
            (p.epoch, p.position)
        };
        let cfg = self.cfg();
        let d = PyDict::new(py);
        d.set_item("format", STATE_FORMAT)?;
        d.set_item("seed", cfg.seed)?;
        d.set_item("epoch", epoch)?;
        d.set_item("position", position)?;
        d.set_item("shuffle", cfg.shuffle)?;
        if cfg.shuffle_window != 0 {
            d.set_item("shuffle_window", cfg.shuffle_window)?;
        }
        let inner = self.inner();
        d.set_item("rows", inner.epoch_len())?;
        d.set_item("batch_size", cfg.batch_size)?;
        d.set_item("world_size", cfg.world_size)?;
        d.set_item("last_batch", last_batch_name(cfg.last_batch))?;
        if let Some(counts) = self.counts_at(py, epoch, position)? {
            d.set_item("counts", counts)?;
        }
        if let Some(history) = self.schedule_history(py)? {
            d.set_item("schedule_history", history)?;
        }
        Ok(d)
    }

    /// The body of `load_state_dict` (see there).
    pub(super) fn restore_state(&self, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            state
                .get_item(key)?
                .ok_or_else(|| argument(format!("state dict has no key {key:?}")))
        };
        let int = |key: &str| -> PyResult<u64> {
            get(key)?.extract::<u64>().map_err(|_| {
                argument(format!(
                    "state dict key {key:?} must be a non-negative integer"
                ))
            })
        };
        if let Some(f) = state.get_item("format")? {
            let f: String = f.extract()?;
            if f != STATE_FORMAT {
                return Err(argument(format!(
                    "state dict format {f:?} is not {STATE_FORMAT:?}"
                )));
            }
        }
        let cfg = self.cfg();
        let seed = int("seed")?;
        if seed != cfg.seed {
            return Err(argument(format!(
                "state dict was saved with seed {seed}, this loader has seed {}",
                cfg.seed
            )));
        }
        if let Some(s) = state.get_item("shuffle")? {
            let s: bool = s.extract()?;
            if s != cfg.shuffle {
                return Err(argument(format!(
                    "state dict was saved with shuffle={s}, this loader has shuffle={}",
                    cfg.shuffle
                )));
            }
        }
        let window = match state.get_item("shuffle_window")? {
            Some(w) => w.extract::<u64>().map_err(|_| {
                argument("state dict key \"shuffle_window\" must be a non-negative integer")
            })?,
            None => 0,
        };
        if window != cfg.shuffle_window {
            return Err(argument(format!(
                "state dict was saved with shuffle_window={window}, this loader has \
                 shuffle_window={}",
                cfg.shuffle_window
            )));
        }
        let inner = self.inner();
        let rows = inner.epoch_len();
        if let Some(r) = state.get_item("rows")? {
            let r: u64 = r.extract()?;
            if r != rows {
                return Err(argument(format!(
                    "state dict was saved for {r} records, this dataset has {rows}"
                )));
            }
        }
        let epoch = int("epoch")?;
        let position = int("position")?;
        if position > rows {
            return Err(argument(format!(
                "state dict position {position} is past the end of the epoch ({rows} records)"
            )));
        }
        if let Source::Mix { names, mixture } = &self.source {
            self.restore_counts(state, names, &mixture.get().mix, &inner, epoch, position)?;
        }
        let mut p = lock(&self.progress);
        *p = Progress {
            epoch,
            position,
            pending: true,
            generation: p.generation + 1,
        };
        Ok(())
    }

    /// A mixture state carries each component's count at its position and
    /// the schedule history of the run that saved it. The history rebuilds
    /// that run's stream; if this loader's weights are not the ones the run
    /// last had, the stream continues from the counts with this loader's
    /// weights, so changing the weights between save and restore loses and
    /// repeats no component sample.
    fn restore_counts(
        &self,
        state: &Bound<'_, PyDict>,
        names: &[String],
        configured: &tessera_reader::Mixture,
        inner: &tessera_reader::Loader,
        epoch: u64,
        position: u64,
    ) -> PyResult<()> {
        let Some(counts) = state.get_item("counts")? else {
            return Ok(());
        };
        let values = counts_by_name(&counts, names, "state dict \"counts\"")?;
        let g = global_sample(epoch, inner.epoch_len(), position)?;
        let run = match state.get_item("schedule_history")? {
            Some(h) => {
                let history = parse_history(&h, names)?;
                let run = configured.with_history(history).map_err(to_py)?;
                let expect = run.counts_at(g);
                if expect != values {
                    return Err(argument(format!(
                        "state dict counts {} at sample {g} are not what its schedule_history \
                         gives there ({}); the state dict was changed or mixed from two runs",
                        show_counts(names, &values),
                        show_counts(names, &expect)
                    )));
                }
                run
            }
            // A state from before histories were saved: the samples before
            // `g` follow this loader's schedule.
            None => configured.clone(),
        };
        let anchored = run
            .anchored(g, &values, configured.schedule())
            .map_err(to_py)?;
        let fresh = inner.with_mixture(anchored).map_err(to_py)?;
        *self.loader.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(())
    }
}

/// Global sample `epoch * epoch_len + position`, or a clear error where it
/// would not fit in 64 bits.
pub(super) fn global_sample(epoch: u64, epoch_len: u64, position: u64) -> PyResult<u64> {
    epoch
        .checked_mul(epoch_len)
        .and_then(|s| s.checked_add(position))
        .ok_or_else(|| {
            argument(format!(
                "epoch {epoch} of {epoch_len} samples, position {position}: the global sample \
                 number does not fit in 64 bits"
            ))
        })
}

/// `{name: count}` in component order; every component named once.
fn counts_by_name(d: &Bound<'_, PyAny>, names: &[String], what: &str) -> PyResult<Vec<u64>> {
    let d = d
        .cast::<PyDict>()
        .map_err(|_| argument(format!("{what} must be a dict {{component: count}}")))?;
    if d.len() != names.len() {
        return Err(argument(format!(
            "{what} names {} components, this mixture has {} ({})",
            d.len(),
            names.len(),
            names.join(", ")
        )));
    }
    let mut values = Vec::with_capacity(names.len());
    for name in names {
        let v = d.get_item(name)?.ok_or_else(|| {
            argument(format!(
                "{what} has no component {name:?} (this mixture: {})",
                names.join(", ")
            ))
        })?;
        values.push(v.extract::<u64>().map_err(|_| {
            argument(format!(
                "{what}: the count of {name:?} must be a non-negative integer"
            ))
        })?);
    }
    Ok(values)
}

fn show_counts(names: &[String], counts: &[u64]) -> String {
    let parts: Vec<String> = names
        .iter()
        .zip(counts)
        .map(|(n, c)| format!("{n}: {c}"))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// The state dict's ``schedule_history``: a list of
/// ``{"at": sample, "counts": {name: count}, "steps": [[start, {name: weight}], ...]}``.
fn parse_history(h: &Bound<'_, PyAny>, names: &[String]) -> PyResult<Vec<ScheduleChange>> {
    let bad = |i: usize, m: &str| argument(format!("state dict schedule_history[{i}]: {m}"));
    let list: Vec<Bound<'_, PyAny>> = h
        .extract()
        .map_err(|_| argument("state dict key \"schedule_history\" must be a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let d = item
            .cast::<PyDict>()
            .map_err(|_| bad(i, "must be a dict with keys at, counts, steps"))?;
        let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
            d.get_item(k)?
                .ok_or_else(|| bad(i, &format!("has no key {k:?}")))
        };
        let at: u64 = get("at")?
            .extract()
            .map_err(|_| bad(i, "\"at\" must be a non-negative integer"))?;
        let counts = counts_by_name(
            &get("counts")?,
            names,
            &format!("state dict schedule_history[{i}].counts"),
        )?;
        let shape = "\"steps\" must be a list of [first sample, {component: weight}]";
        let raw: Vec<Vec<Bound<'_, PyAny>>> = get("steps")?.extract().map_err(|_| bad(i, shape))?;
        let mut steps = Vec::with_capacity(raw.len());
        for pair in raw {
            let [start, w] = pair.as_slice() else {
                return Err(bad(i, shape));
            };
            let start: u64 = start.extract().map_err(|_| bad(i, shape))?;
            let w = w.cast::<PyDict>().map_err(|_| {
                bad(
                    i,
                    &format!("the weights of the step at {start} must be a dict"),
                )
            })?;
            let mut weights = Vec::with_capacity(names.len());
            for name in names {
                let v = w.get_item(name)?.ok_or_else(|| {
                    bad(
                        i,
                        &format!("the step at {start} has no weight for {name:?}"),
                    )
                })?;
                weights.push(v.extract::<f64>().map_err(|_| {
                    bad(
                        i,
                        &format!("the weight of {name:?} at {start} must be a number"),
                    )
                })?);
            }
            if w.len() != names.len() {
                return Err(bad(
                    i,
                    &format!("the step at {start} names components this mixture does not have"),
                ));
            }
            steps.push(WeightStep { start, weights });
        }
        out.push(ScheduleChange { at, counts, steps });
    }
    Ok(out)
}

/// A mixture's history as the state dict holds it (see [`parse_history`]).
pub(super) fn history_to_py<'py>(
    py: Python<'py>,
    names: &[String],
    history: &[ScheduleChange],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for c in history {
        let d = PyDict::new(py);
        d.set_item("at", c.at)?;
        let counts = PyDict::new(py);
        for (n, v) in names.iter().zip(&c.counts) {
            counts.set_item(n, v)?;
        }
        d.set_item("counts", counts)?;
        let steps = PyList::empty(py);
        for s in &c.steps {
            let w = PyDict::new(py);
            for (n, v) in names.iter().zip(&s.weights) {
                w.set_item(n, v)?;
            }
            let step = PyList::empty(py);
            step.append(s.start)?;
            step.append(w)?;
            steps.append(step)?;
        }
        d.set_item("steps", steps)?;
        list.append(d)?;
    }
    Ok(list)
}
