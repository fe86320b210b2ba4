//! `tessera._tessera.Mixture`: several datasets read as one weighted stream
//! (`tessera_reader::Mixture`). `tessera.mix` builds it from a dict and
//! keeps the configuration for pickling.

use crate::dataset::Dataset;
use crate::errors::to_py;
use crate::field::Field;
use crate::loader::{Loader, LoaderArgs};
use pyo3::prelude::*;
use tessera_reader::{MixComponent, WeightStep};

/// A weighted mixture of datasets with the same record layout; see
/// ``tessera.mix``.
#[pyclass(frozen, module = "tessera._tessera", name = "Mixture")]
pub struct Mixture {
    pub(crate) mix: tessera_reader::Mixture,
}

/// Builds a mixture: ``components`` as ``(name, dataset)`` pairs, and the
/// schedule as ``(first sample, weights in component order)`` steps.
#[pyfunction]
#[pyo3(signature = (components, schedule, seed, epoch_samples = None, shuffle = true))]
pub fn mixture(
    components: Vec<(String, PyRef<'_, Dataset>)>,
    schedule: Vec<(u64, Vec<f64>)>,
    seed: u64,
    epoch_samples: Option<u64>,
    shuffle: bool,
) -> PyResult<Mixture> {
    let comps = components
        .iter()
        .map(|(name, ds)| MixComponent {
            name: name.clone(),
            dataset: ds.inner().clone(),
        })
        .collect();
    let schedule: Vec<WeightStep> = schedule
        .into_iter()
        .map(|(start, weights)| WeightStep { start, weights })
        .collect();
    let mix = tessera_reader::Mixture::scheduled(comps, schedule, seed, epoch_samples, shuffle)
        .map_err(to_py)?;
    Ok(Mixture { mix })
}

#[pymethods]
impl Mixture {
    /// Samples in one mixture epoch.
    fn __len__(&self) -> usize {
        self.mix.epoch_samples() as usize
    }

    /// Component names, in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.mix
            .components()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// The common fields of every record.
    #[getter]
    fn fields(&self) -> Vec<Field> {
        self.mix
            .layout()
            .fields
            .iter()
            .map(|f| Field::new(f.clone()))
            .collect()
    }

    /// Bytes per record.
    #[getter]
    fn stride(&self) -> usize {
        self.mix.stride()
    }

    /// The mixture's seed.
    #[getter]
    fn seed(&self) -> u64 {
        self.mix.seed()
    }

    /// Whether components are read shuffled.
    #[getter]
    fn shuffle(&self) -> bool {
        self.mix.shuffle()
    }

    /// Samples each component contributed to global samples ``0..g``.
    fn counts_at(&self, g: u64) -> Vec<u64> {
        self.mix.counts_at(g)
    }

    /// Global sample ``g``: ``(component index, record index in it)``.
    fn pick(&self, g: u64) -> PyResult<(usize, u64)> {
        if g == u64::MAX {
            return Err(crate::errors::argument(
                "global sample numbers go up to 2**64 - 2",
            ));
        }
        Ok(self.mix.pick(g))
    }

    /// An iterable over batches of the mixture; arguments as for
    /// ``Dataset.loader`` (the seed and shuffle are the mixture's).
    #[pyo3(signature = (
        batch_size, rank = 0, world_size = 1, drop_last = true,
        threads = 2, prefetch = 2, *, last_batch = None, worker = 0, num_workers = 1
    ))]
    #[allow(clippy::too_many_arguments)]
    fn loader(
        slf: &Bound<'_, Self>,
        batch_size: i64,
        rank: i64,
        world_size: i64,
        drop_last: bool,
        threads: i64,
        prefetch: i64,
        last_batch: Option<&str>,
        worker: i64,
        num_workers: i64,
    ) -> PyResult<Loader> {
        let this = slf.get();
        let args = LoaderArgs {
            batch_size,
            shuffle: this.mix.shuffle(),
            seed: this.mix.seed(),
            rank,
            world_size,
            drop_last,
            threads,
            prefetch,
            last_batch,
            worker,
            num_workers,
            shuffle_window: 0,
            copy: true,
        };
        Loader::new_mixed(slf, args)
    }

    fn __repr__(&self) -> String {
        format!(
            "Mixture(components={:?}, seed={}, epoch_samples={})",
            self.names(),
            self.mix.seed(),
            self.mix.epoch_samples()
        )
    }
}
