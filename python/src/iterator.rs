//! `tessera.BatchIterator`: one epoch's batches, handed to Python as dicts of
//! NumPy views while Rust threads prefetch the next ones.

use crate::batch::Batch;
use crate::errors::to_py;
use crate::loader::{SharedProgress, lock};
use crate::views::RecordView;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tessera_reader::Batches;

/// The batches of one epoch, in order. Returned by ``iter(loader)``.
///
/// Dropping it (or exhausting it) stops its prefetch threads.
#[pyclass(module = "tessera._tessera", name = "BatchIterator")]
pub struct BatchIterator {
    /// `None` once exhausted. The mutex only makes the class `Sync` (the
    /// receivers inside are not); `&mut self` access never locks it.
    batches: Mutex<Option<Batches>>,
    view: Arc<RecordView>,
    progress: SharedProgress,
    generation: u64,
    /// Time spent in `__next__` with the GIL released (waiting for batches).
    waited: Duration,
}

impl BatchIterator {
    pub(crate) fn new(
        batches: Batches,
        view: Arc<RecordView>,
        progress: SharedProgress,
        generation: u64,
    ) -> Self {
        BatchIterator {
            batches: Mutex::new(Some(batches)),
            view,
            progress,
            generation,
            waited: Duration::ZERO,
        }
    }
}

#[pymethods]
impl BatchIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next batch as ``{field: array}``; the GIL is released while it is
    /// being waited for.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slot = self
            .batches
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(batches) = slot.as_mut() else {
            return Ok(None);
        };
        let t = Instant::now();
        let next = py.detach(|| batches.next());
        self.waited += t.elapsed();
        let Some(batch) = next else {
            // A shard of a remote or compressed set could not be fetched:
            // raise, keeping the position after the last batch delivered.
            if let Some(e) = batches.take_error() {
                let done = slot.take();
                py.detach(move || drop(done));
                return Err(to_py(e));
            }
            // Exhausted: the position is now the end of the epoch on every
            // rank. Stop the threads now rather than when Python drops us
            // (joining them needs no GIL).
            let position = batches.cursor().position;
            {
                let mut p = lock(&self.progress);
                if p.generation == self.generation {
                    p.position = position;
                }
            }
            let done = slot.take();
            py.detach(move || drop(done));
            return Ok(None);
        };
        let position = batches.cursor().position;
        {
            let mut p = lock(&self.progress);
            if p.generation == self.generation {
                p.position = position;
            }
        }
        Batch::into_dict(py, batch, &self.view).map(Some)
    }

    /// Seconds this iterator has spent waiting for batches with the GIL
    /// released (including taking the GIL back). Compared with the wall time
    /// of a loop, it shows how input-bound the loop is, and how little of the
    /// time the loader holds the GIL.
    #[getter]
    fn wait_seconds(&self) -> f64 {
        self.waited.as_secs_f64()
    }

    fn __length_hint__(&mut self) -> usize {
        let slot = self
            .batches
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        slot.as_ref().map_or(0, |b| b.remaining() as usize)
    }
}
