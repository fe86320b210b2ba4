//! `tessera.Loader`: the configuration of a batch stream, its epoch and its
//! resumable position.

use crate::dataset::Dataset;
use crate::errors::{argument, to_py};
use crate::iterator::BatchIterator;
use crate::mixture::Mixture;
use crate::views::RecordView;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use tessera_reader::{Cursor, LastBatch, LoaderConfig, ScheduleChange, WeightStep};

/// Version tag stored in every state dict.
const STATE_FORMAT: &str = "tessera-loader/1";

/// Where the loader's stream is: shared between the loader and the iterator
/// it most recently started, which advances `position` after every batch it
/// yields.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) epoch: u64,
    /// Epoch position reached (all ranks together); see `tessera_reader::Cursor`.
    pub(crate) position: u64,
    /// True after `load_state_dict`: the next iteration continues at
    /// `position` instead of starting the epoch over.
    pending: bool,
    /// Bumped whenever a new iteration starts or the state is replaced, so a
    /// stale iterator can no longer move `position`.
    pub(crate) generation: u64,
}

pub(crate) type SharedProgress = Arc<Mutex<Progress>>;

pub(crate) fn lock(p: &SharedProgress) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Loader arguments as Python passes them, checked by [`LoaderArgs::config`].
pub(crate) struct LoaderArgs<'a> {
    pub(crate) batch_size: i64,
    pub(crate) shuffle: bool,
    pub(crate) seed: u64,
    pub(crate) rank: i64,
    pub(crate) world_size: i64,
    pub(crate) drop_last: bool,
    pub(crate) threads: i64,
    pub(crate) prefetch: i64,
    pub(crate) last_batch: Option<&'a str>,
    pub(crate) worker: i64,
    pub(crate) num_workers: i64,
    pub(crate) shuffle_window: i64,
    /// False: a sequential batch inside one shard is handed out as
    /// read-only views of the memory map (no copy).
    pub(crate) copy: bool,
}

impl LoaderArgs<'_> {
    fn config(&self) -> PyResult<LoaderConfig> {
        let last_batch = match self.last_batch {
            None if self.drop_last => LastBatch::Drop,
            None => LastBatch::Partial,
            Some(s) => parse_last_batch(s)?,
        };
        let rank = at_least("rank", self.rank, 0)?;
        let world_size = at_least("world_size", self.world_size, 1)?;
        if rank >= world_size {
            return Err(argument(format!(
                "rank {rank} is not in 0..world_size ({world_size})"
            )));
        }
        let worker = at_least("worker", self.worker, 0)?;
        let num_workers = at_least("num_workers", self.num_workers, 1)?;
        if worker >= num_workers {
            return Err(argument(format!(
                "worker {worker} is not in 0..num_workers ({num_workers})"
            )));
        }
        Ok(LoaderConfig {
            batch_size: at_least("batch_size", self.batch_size, 1)?,
            shuffle: self.shuffle,
            seed: self.seed,
            rank,
            world_size,
            last_batch,
            threads: at_least("threads", self.threads, 0)? as usize,
            prefetch: at_least("prefetch", self.prefetch, 1)? as usize,
            worker,
            num_workers,
            // NumPy gets writable views of a batch buffer of its own, or
            // with copy=False read-only views of the map where a batch lies
            // in one shard (see `Batch::into_dict`).
            zero_copy: !self.copy,
            shuffle_window: at_least("shuffle_window", self.shuffle_window, 0)?,
        })
    }
}

fn at_least(name: &str, value: i64, min: i64) -> PyResult<u64> {
    if value < min {
        return Err(argument(format!(
            "{name} must be at least {min}, got {value}"
        )));
    }
    Ok(value as u64)
}

fn parse_last_batch(s: &str) -> PyResult<LastBatch> {
    match s {
        "drop" => Ok(LastBatch::Drop),
        "partial" => Ok(LastBatch::Partial),
        "pad" => Ok(LastBatch::Pad),
        other => Err(argument(format!(
            "last_batch must be \"drop\", \"partial\" or \"pad\", got {other:?}"
        ))),
    }
}

impl Loader {
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
fn global_sample(epoch: u64, epoch_len: u64, position: u64) -> PyResult<u64> {
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
fn history_to_py<'py>(
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

fn last_batch_name(l: LastBatch) -> &'static str {
    match l {
        LastBatch::Drop => "drop",
        LastBatch::Partial => "partial",
        LastBatch::Pad => "pad",
    }
}

/// An iterable over the batches of a dataset for one rank.
///
/// Each iteration (``for batch in loader``) runs one epoch: ``batch`` is a
/// ``dict`` mapping field names to NumPy arrays of shape
/// ``(rows, *field_shape)``, all strided, writable views into one contiguous
/// buffer (their common ``base`` is a ``Batch``). Prefetch threads build the
/// next batches while Python runs; the GIL is released while waiting.
///
/// The order is a function of ``(seed, epoch)`` only: the same for any number
/// of threads, prefetch depth or data-loader workers. The epoch does not
/// advance by itself: call ``set_epoch(e)`` before each epoch, as with
/// PyTorch's ``DistributedSampler``.
#[pyclass(frozen, module = "tessera._tessera", name = "Loader")]
pub struct Loader {
    /// Replaced only when a mixture's state is restored with other weights.
    loader: RwLock<tessera_reader::Loader>,
    cfg: LoaderConfig,
    view: Arc<RecordView>,
    progress: SharedProgress,
    source: Source,
}

/// What the loader reads, as Python sees it.
enum Source {
    Set(Py<Dataset>),
    Mix {
        mixture: Py<Mixture>,
        names: Vec<String>,
    },
}

impl Loader {
    pub(crate) fn new(ds: &Bound<'_, Dataset>, args: LoaderArgs<'_>) -> PyResult<Self> {
        let cfg = args.config()?;
        let inner = ds.get().inner();
        let loader = tessera_reader::Loader::new(inner, cfg.clone()).map_err(to_py)?;
        Ok(Loader {
            view: Arc::new(RecordView::new(ds.py(), inner.layout())?),
            loader: RwLock::new(loader),
            cfg,
            progress: SharedProgress::default(),
            source: Source::Set(ds.clone().unbind()),
        })
    }

    pub(crate) fn new_mixed(m: &Bound<'_, Mixture>, args: LoaderArgs<'_>) -> PyResult<Self> {
        let cfg = args.config()?;
        let this = m.get();
        let loader =
            tessera_reader::Loader::mixture(this.mix.clone(), cfg.clone()).map_err(to_py)?;
        Ok(Loader {
            view: Arc::new(RecordView::new(m.py(), this.mix.layout())?),
            loader: RwLock::new(loader),
            cfg,
            progress: SharedProgress::default(),
            source: Source::Mix {
                mixture: m.clone().unbind(),
                names: this
                    .mix
                    .components()
                    .iter()
                    .map(|c| c.name.clone())
                    .collect(),
            },
        })
    }

    fn cfg(&self) -> &LoaderConfig {
        &self.cfg
    }

    fn inner(&self) -> tessera_reader::Loader {
        self.loader
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[pymethods]
impl Loader {
    /// Starts an epoch (or continues the one a ``load_state_dict`` restored)
    /// and returns an iterator over its batches.
    fn __iter__(&self) -> PyResult<BatchIterator> {
        let (cursor, generation) = {
            let mut p = lock(&self.progress);
            if !p.pending {
                p.position = 0;
            }
            p.pending = false;
            p.generation += 1;
            let cursor = Cursor {
                seed: self.cfg().seed,
                epoch: p.epoch,
                position: p.position,
            };
            (cursor, p.generation)
        };
        let batches = self.inner().resume(cursor).map_err(to_py)?;
        Ok(BatchIterator::new(
            batches,
            Arc::clone(&self.view),
            Arc::clone(&self.progress),
            generation,
        ))
    }

    /// Number of batches in a whole epoch for this rank (and worker).
    fn __len__(&self) -> usize {
        self.inner().len() as usize
    }

    /// Sets the epoch the next iteration runs. Each epoch has its own
    /// shuffle. Setting the epoch that a ``load_state_dict`` restored keeps the
    /// restored position, so the usual ``set_epoch(e); for b in loader`` loop
    /// resumes correctly.
    fn set_epoch(&self, epoch: u64) {
        let mut p = lock(&self.progress);
        if p.pending && p.epoch == epoch {
            return;
        }
        *p = Progress {
            epoch,
            position: 0,
            pending: false,
            generation: p.generation + 1,
        };
    }

    /// The epoch of the current (or next) iteration.
    #[getter]
    fn epoch(&self) -> u64 {
        lock(&self.progress).epoch
    }

    /// The stream's position, to save in a checkpoint: ``seed``, ``epoch`` and
    /// ``position`` (epoch positions consumed by all ranks, counting the
    /// batches yielded so far), plus the configuration it is valid for.
    ///
    /// Only the iterator most recently started updates the position; with
    /// ``num_workers > 1`` this loader sees only its own sub-stream, so use
    /// ``tessera.torch.IterableDataset.state_dict`` there instead.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
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

    /// Restores a position saved by ``state_dict``: the next iteration
    /// continues that epoch exactly where it stopped. The seed, shuffle flag
    /// and dataset size must match this loader; the batch size and world size
    /// may differ (the position is counted in records, at a step boundary).
    fn load_state_dict(&self, state: &Bound<'_, PyDict>) -> PyResult<()> {
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

    /// For a mixture loader: ``{component: samples taken}`` after global
    /// sample ``epoch * len + position``; ``None`` for a dataset.
    fn counts_at<'py>(
        &self,
        py: Python<'py>,
        epoch: u64,
        position: u64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let (Source::Mix { names, .. }, inner) = (&self.source, self.inner()) else {
            return Ok(None);
        };
        let Some(m) = inner.mixture_source() else {
            return Ok(None);
        };
        let g = global_sample(epoch, inner.epoch_len(), position)?;
        let d = PyDict::new(py);
        for (name, c) in names.iter().zip(m.counts_at(g)) {
            d.set_item(name, c)?;
        }
        Ok(Some(d))
    }

    /// For a mixture loader: every change of weights of the stream it reads
    /// (``[{"at": sample, "counts": {component: count}, "steps": [[first
    /// sample, {component: weight}], ...]}, ...]``, the first being the
    /// mixture's schedule at sample 0), as ``state_dict`` saves it; ``None``
    /// for a dataset.
    fn schedule_history<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let (Source::Mix { names, .. }, inner) = (&self.source, self.inner()) else {
            return Ok(None);
        };
        let Some(m) = inner.mixture_source() else {
            return Ok(None);
        };
        history_to_py(py, names, m.history()).map(Some)
    }

    /// The dataset this loader reads (``None`` for a mixture).
    #[getter]
    fn dataset(&self, py: Python<'_>) -> Option<Py<Dataset>> {
        match &self.source {
            Source::Set(ds) => Some(ds.clone_ref(py)),
            Source::Mix { .. } => None,
        }
    }

    /// The mixture this loader reads (``None`` for a dataset).
    #[getter]
    fn mixture(&self, py: Python<'_>) -> Option<Py<Mixture>> {
        match &self.source {
            Source::Mix { mixture, .. } => Some(mixture.clone_ref(py)),
            Source::Set(_) => None,
        }
    }

    /// Records per batch on this rank.
    #[getter]
    fn batch_size(&self) -> u64 {
        self.cfg().batch_size
    }

    /// Whether each epoch is a seeded shuffle (else storage order).
    #[getter]
    fn shuffle(&self) -> bool {
        self.cfg().shuffle
    }

    /// The shuffle seed.
    #[getter]
    fn seed(&self) -> u64 {
        self.cfg().seed
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> u64 {
        self.cfg().rank
    }

    /// Number of ranks sharing each epoch.
    #[getter]
    fn world_size(&self) -> u64 {
        self.cfg().world_size
    }

    /// Policy for the last, short global batch: ``"drop"``, ``"partial"`` or ``"pad"``.
    #[getter]
    fn last_batch(&self) -> &'static str {
        last_batch_name(self.cfg().last_batch)
    }

    /// False when sequential batches inside one shard are read-only views
    /// of the memory map (``copy=False``).
    #[getter]
    fn copy(&self) -> bool {
        !self.cfg().zero_copy
    }

    /// Prefetch threads.
    #[getter]
    fn threads(&self) -> usize {
        self.cfg().threads
    }

    /// Batches each prefetch thread may build ahead.
    #[getter]
    fn prefetch(&self) -> usize {
        self.cfg().prefetch
    }

    /// Which of ``num_workers`` interleaved sub-streams this loader yields.
    #[getter]
    fn worker(&self) -> u64 {
        self.cfg().worker
    }

    /// Number of interleaved sub-streams (data-loader worker processes).
    #[getter]
    fn num_workers(&self) -> u64 {
        self.cfg().num_workers
    }

    /// The shards each of this loader's batches of epoch ``epoch`` reads, in
    /// order, as lists of shard numbers (``and_next=True`` appends the next
    /// epoch's): the sequence the shard cache of a set at a URL fetches
    /// along and evicts by. With ``shuffle_window``, a batch's entry is the
    /// shards of the windows it overlaps (a batch that takes only a few
    /// positions of a window may not read all of them). Empty for a mixture.
    #[pyo3(signature = (epoch, and_next = false))]
    fn access_plan(&self, epoch: u64, and_next: bool) -> Vec<Vec<u32>> {
        let cursor = Cursor {
            seed: self.cfg().seed,
            epoch,
            position: 0,
        };
        let plan = self.inner().access_plan(cursor, and_next);
        plan.steps().map(<[u32]>::to_vec).collect()
    }

    /// Shards per shuffle window (0: the whole dataset is shuffled).
    #[getter]
    fn shuffle_window(&self) -> u64 {
        self.cfg().shuffle_window
    }

    fn __repr__(&self) -> String {
        let c = self.cfg();
        format!(
            "Loader(batch_size={}, shuffle={}, seed={}, rank={}, world_size={}, last_batch={:?}, \
             threads={}, prefetch={}, worker={}, num_workers={}, epoch={})",
            c.batch_size,
            if c.shuffle { "True" } else { "False" },
            c.seed,
            c.rank,
            c.world_size,
            last_batch_name(c.last_batch),
            c.threads,
            c.prefetch,
            c.worker,
            c.num_workers,
            self.epoch()
        )
    }
}
