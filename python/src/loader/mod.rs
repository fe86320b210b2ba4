//! `tessera.Loader`: the configuration of a batch stream, its epoch and its
//! resumable position.
//!
//! Here: the `Loader` class; [`args`]: its arguments; [`state`]: its state
//! dict (save, check, restore).

mod args;
mod state;

pub(crate) use args::LoaderArgs;

use crate::dataset::Dataset;
use crate::errors::to_py;
use crate::iterator::BatchIterator;
use crate::mixture::Mixture;
use crate::views::RecordView;
use args::last_batch_name;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use state::{global_sample, history_to_py};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use tessera_reader::{Cursor, LoaderConfig};

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
    pub(super) pending: bool,
    /// Bumped whenever a new iteration starts or the state is replaced, so a
    /// stale iterator can no longer move `position`.
    pub(crate) generation: u64,
}

pub(crate) type SharedProgress = Arc<Mutex<Progress>>;

pub(crate) fn lock(p: &SharedProgress) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
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
        self.save_state(py)
    }

    /// Restores a position saved by ``state_dict``: the next iteration
    /// continues that epoch exactly where it stopped. The seed, shuffle flag
    /// and dataset size must match this loader; the batch size and world size
    /// may differ (the position is counted in records, at a step boundary).
    fn load_state_dict(&self, state: &Bound<'_, PyDict>) -> PyResult<()> {
        self.restore_state(state)
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
