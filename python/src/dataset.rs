//! `tessera.Dataset`: an open shard set (or one split of it), record access
//! and loader construction.

use crate::errors::{argument, to_py};
use crate::field::Field;
use crate::loader::{Loader, LoaderArgs};
use crate::views::RecordView;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArray};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyUserWarning};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PySliceMethods};
use std::path::PathBuf;
use tessera_reader::{CacheOptions, MANIFEST_FILE, OpenOptions};

/// An open tessera shard set, or one split of it.
///
/// Opening maps the shard files and checks their headers against the
/// manifest; nothing is read until records are asked for. ``len(ds)`` is the
/// number of records.
///
/// ``ds[i]`` is record ``i`` as ``{field: array}``: read-only views straight
/// into the memory-mapped shard (no copy; ``.copy()`` them to modify); a
/// scalar field is a 0-d array. ``ds[a:b]``, ``ds[a:b:step]`` and
/// ``ds[[i, j, ...]]`` (a sequence or integer array of indices) copy those
/// records into one new buffer and return writable views of it with a
/// leading rows axis. Negative indices count from the end.
#[pyclass(frozen, module = "tessera._tessera", name = "Dataset")]
pub struct Dataset {
    ds: tessera_reader::Dataset,
    view: RecordView,
    transform: crate::transform::TransformCell,
}

impl Dataset {
    pub(crate) fn inner(&self) -> &tessera_reader::Dataset {
        &self.ds
    }

    fn wrap(py: Python<'_>, ds: tessera_reader::Dataset) -> PyResult<Self> {
        let view = RecordView::new(py, ds.layout())?;
        Ok(Dataset {
            ds,
            view,
            transform: Default::default(),
        })
    }
}

/// Opens the shard set in directory ``path``, or at an object-store URL.
///
/// Reads ``manifest.json``, memory-maps every shard and checks each shard's
/// header and size against the manifest. With ``verify=True`` it also checks
/// the blake3 checksum of every byte (reads the whole set once).
///
/// ``path`` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
/// ``http(s)://``, ``file://``): only the manifest is read at open (one
/// request), and shards are fetched, verified and kept in the local shard
/// cache as batches need them (``cache_dir``, default
/// ``$TESSERA_SHARD_CACHE`` or ``~/.cache/tessera/shards``), within
/// ``cache_bytes`` (default ``$TESSERA_SHARD_CACHE_BYTES``, else no limit;
/// it must hold the largest shard). A compressed set's shards are
/// decompressed into the same cache. ``storage_options`` are object-store
/// settings (``endpoint``, ``region``, ``allow_http``, ...) on top of the
/// environment's (``AWS_ENDPOINT``, ``AWS_REGION``, ...).
///
/// Raises ``NotFoundError`` (a ``FileNotFoundError``) when there is no shard
/// set at ``path``, ``FormatError`` (a ``ValueError``) when a file is corrupt or
/// does not match the manifest, ``ChecksumError`` when ``verify`` finds a
/// damaged shard, and ``StorageError`` when an object store cannot be read.
#[pyfunction]
#[pyo3(signature = (
    path, verify = false, *, cache_dir = None, cache_bytes = None, storage_options = None,
    fetch_threads = None
))]
pub fn open(
    py: Python<'_>,
    path: PathBuf,
    verify: bool,
    cache_dir: Option<PathBuf>,
    cache_bytes: Option<u64>,
    storage_options: Option<std::collections::BTreeMap<String, String>>,
    fetch_threads: Option<usize>,
) -> PyResult<Dataset> {
    let opts = OpenOptions {
        cache: CacheOptions {
            dir: cache_dir,
            budget: cache_bytes,
            fetch_threads,
        },
        storage_options: storage_options.unwrap_or_default().into_iter().collect(),
    };
    let text = path.to_string_lossy();
    let is_url = tessera_reader::is_store_url(&text) || text.starts_with("file://");
    let manifest = path.join(MANIFEST_FILE);
    if !is_url && !manifest.exists() {
        let what = if path.is_dir() {
            "not a tessera shard set (manifest.json is missing)"
        } else if path.exists() {
            "not a tessera shard set (a shard set is a directory)"
        } else {
            "no tessera shard set here (no such directory)"
        };
        return Err(crate::errors::NotFoundError::new_err((
            2,
            what.to_owned(),
            path.display().to_string(),
        )));
    }
    let ds = py
        .detach(|| {
            let ds = tessera_reader::Dataset::open_with(&path, &opts)?;
            if verify {
                ds.verify()?;
            }
            Ok(ds)
        })
        .map_err(to_py)?;
    if let Some(why) = ds.offline() {
        // Training goes on from the local copies, but the user must know
        // the store was not consulted.
        let msg = std::ffi::CString::new(format!("tessera.open: {why}").replace('\0', " "))
            .map_err(|e| argument(e.to_string()))?;
        PyErr::warn(py, &py.get_type::<PyUserWarning>(), &msg, 2)?;
    }
    Dataset::wrap(py, ds)
}

impl Dataset {
    /// A loader over a whole set of several splits reads them as one
    /// (train and validation rows in the same batches): allowed, but said.
    fn warn_if_splits_mixed(&self, py: Python<'_>) -> PyResult<()> {
        let m = self.ds.manifest();
        let whole = self.ds.split_name().is_none() && self.ds.row_range() == (0..m.rows);
        if !whole || m.splits.len() < 2 {
            return Ok(());
        }
        let list: Vec<String> = m
            .splits
            .iter()
            .map(|s| format!("{} ({} records)", s.name, s.rows))
            .collect();
        let first = &m.splits[0].name;
        let msg = format!(
            "this loader reads all {} splits of {} as one stream: {}; to read one, use \
             ds.split({first:?}).loader(...) (or split={first:?} in \
             tessera.torch.IterableDataset)",
            m.splits.len(),
            self.ds.dir().display(),
            list.join(", ")
        );
        let msg =
            std::ffi::CString::new(msg.replace('\0', " ")).map_err(|e| argument(e.to_string()))?;
        PyErr::warn(py, &py.get_type::<PyUserWarning>(), &msg, 1)
    }
}

#[pymethods]
impl Dataset {
    fn __len__(&self) -> usize {
        self.ds.len() as usize
    }

    /// ``ds[key]``: see the class documentation.
    fn __getitem__<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let this = slf.get();
        let len = this.ds.len();
        if let Ok(s) = key.cast::<PySlice>() {
            let ix = s.indices(isize::try_from(len).unwrap_or(isize::MAX))?;
            if ix.step == 1 {
                return this.copy_run(slf.py(), ix.start as u64, ix.slicelength);
            }
            let rows: Vec<u64> = (0..ix.slicelength)
                .map(|k| (ix.start + k as isize * ix.step) as u64)
                .collect();
            return this.copy_rows(slf.py(), &rows);
        }
        if key.is_instance_of::<PyUntypedArray>() {
            let kind: String = key.getattr("dtype")?.getattr("kind")?.extract()?;
            if kind != "i" && kind != "u" {
                return Err(PyTypeError::new_err(format!(
                    "an index array must hold integers, not dtype {}",
                    key.getattr("dtype")?.str()?
                )));
            }
            let idx: PyReadonlyArray1<'py, i64> = key
                .call_method1("astype", ("int64",))?
                .extract()
                .map_err(|_| PyTypeError::new_err("an index array must be one-dimensional"))?;
            let rows = normalize(idx.as_array().iter().copied(), len)?;
            return this.copy_rows(slf.py(), &rows);
        }
        if let Ok(i) = key.extract::<i64>() {
            let i = normalize([i], len)?[0];
            if this.ds.is_cached() {
                // Through the shard cache: a copy, so no shard stays pinned.
                let d = this.copy_run(slf.py(), i, 1)?;
                for (k, v) in d.clone().iter() {
                    d.set_item(k, v.get_item(0)?)?;
                }
                return Ok(d);
            }
            let rec = this
                .ds
                .record(i)
                .ok_or_else(|| out_of_range(i as i64, len))?;
            let data = rec.as_ptr().cast_mut();
            // SAFETY: `rec` is one record inside a shard map, which the
            // dataset owns (through an Arc) and keeps mapped, unmoved and
            // unmodified for as long as `slf`, the arrays' base, is alive.
            // The map is read-only, so the views are made non-writeable, and
            // NumPy refuses to make them writeable because their base exposes
            // no writable buffer. Records are aligned to the stride, a multiple
            // of every field's element size. One record has no rows axis.
            return unsafe { this.view.dict(slf.as_any(), data, None, false) };
        }
        if let Ok(list) = key.extract::<Vec<i64>>() {
            let rows = normalize(list, len)?;
            return this.copy_rows(slf.py(), &rows);
        }
        Err(PyTypeError::new_err(format!(
            "dataset indices must be integers, slices or integer sequences, not {}",
            key.get_type().name()?
        )))
    }

    /// The fields of each record, in declaration order.
    #[getter]
    fn fields(&self) -> Vec<Field> {
        self.ds
            .layout()
            .fields
            .iter()
            .map(|f| Field::new(f.clone()))
            .collect()
    }

    /// ``{split name: number of records}`` for the whole shard set, in row order.
    #[getter]
    fn splits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for s in &self.ds.manifest().splits {
            d.set_item(&s.name, s.rows)?;
        }
        Ok(d)
    }

    /// The frozen transform statistics from the manifest (parsed JSON; ``None``
    /// when the set has none).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.ds.manifest().stats.to_string())
    }

    /// The whole manifest as parsed JSON (a fresh ``dict`` on each access).
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = String::from_utf8_lossy(&self.ds.manifest().to_json()).into_owned();
        json_to_py(py, &text)
    }

    /// The split named ``name`` as its own dataset (indices start at 0).
    fn split(&self, py: Python<'_>, name: &str) -> PyResult<Dataset> {
        let ds = self.ds.split(name).map_err(to_py)?;
        Dataset::wrap(py, ds)
    }

    /// Name of the split this dataset is, or ``None`` for the whole set.
    #[getter]
    fn split_name(&self) -> Option<&str> {
        self.ds.split_name()
    }

    /// ``(start, stop)``: the records of the whole set this dataset covers.
    #[getter]
    fn row_range(&self) -> (u64, u64) {
        let r = self.ds.row_range();
        (r.start, r.end)
    }

    /// The shard-set directory, or its URL.
    #[getter]
    fn path(&self) -> String {
        self.ds.dir().display().to_string()
    }

    /// True when shards come through the local shard cache (a set in an
    /// object store, or a compressed set) instead of being mapped in place.
    #[getter]
    fn is_cached(&self) -> bool {
        self.ds.is_cached()
    }

    /// What the shard cache has done for this set so far, as a dict
    /// (``fetched_shards``, ``fetched_bytes``, ``transferred_bytes``,
    /// ``reused_shards``, ``evicted_shards``, ``evicted_bytes``, ``retries``,
    /// ``hits``, ``misses``, ``fetch_seconds``, ``decompress_seconds``, plus
    /// ``cache_dir`` and ``cache_bytes``); ``None`` for a set mapped in place.
    fn cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let (Some(c), Some((dir, budget))) = (self.ds.cache_stats(), self.ds.cache_dir()) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("fetched_shards", c.fetched_shards)?;
        d.set_item("fetched_bytes", c.fetched_bytes)?;
        d.set_item("transferred_bytes", c.transferred_bytes)?;
        d.set_item("reused_shards", c.reused_shards)?;
        d.set_item("evicted_shards", c.evicted_shards)?;
        d.set_item("evicted_bytes", c.evicted_bytes)?;
        d.set_item("retries", c.retries)?;
        d.set_item("hits", c.hits)?;
        d.set_item("misses", c.misses)?;
        d.set_item("fetch_seconds", c.fetch_seconds)?;
        d.set_item("decompress_seconds", c.decompress_seconds)?;
        d.set_item("cache_dir", dir.display().to_string())?;
        d.set_item("cache_bytes", budget)?;
        Ok(Some(d))
    }

    /// Bytes per record.
    #[getter]
    fn stride(&self) -> usize {
        self.ds.stride()
    }

    /// Checks the blake3 checksum of every shard file against the manifest;
    /// raises ``ChecksumError`` naming the first damaged file.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.ds.verify()).map_err(to_py)
    }

    /// An iterable over batches of this dataset; see ``Loader``.
    ///
    /// ``drop_last=True`` drops the last, short global batch; ``False`` splits
    /// it across ranks (every record seen once). ``last_batch`` (``"drop"``,
    /// ``"partial"`` or ``"pad"``) overrides ``drop_last``; ``"pad"`` fills the
    /// last batch by wrapping around. ``threads`` prefetch threads each build
    /// up to ``prefetch`` batches ahead (``threads=0`` builds on the calling
    /// thread). ``worker`` of ``num_workers`` selects every ``num_workers``-th
    /// batch of this rank, for data-loader worker processes.
    /// ``shuffle_window=w`` (with ``shuffle``) shuffles the order of the
    /// shards and then the records inside each window of ``w`` shards, so an
    /// epoch needs one window of shards at a time: for sets read from an
    /// object store through a cache smaller than the set.
    /// ``copy=False`` hands out a sequential batch that lies inside one
    /// shard as read-only views of the memory map, with no copy at all
    /// (other batches are copied as usual, and also read-only); the
    /// default gives every batch writable arrays over a buffer of its own.
    #[pyo3(signature = (
        batch_size, shuffle = true, seed = 0, rank = 0, world_size = 1, drop_last = true,
        threads = 2, prefetch = 2, *, last_batch = None, worker = 0, num_workers = 1,
        shuffle_window = 0, copy = true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn loader(
        slf: &Bound<'_, Self>,
        batch_size: i64,
        shuffle: bool,
        seed: u64,
        rank: i64,
        world_size: i64,
        drop_last: bool,
        threads: i64,
        prefetch: i64,
        last_batch: Option<&str>,
        worker: i64,
        num_workers: i64,
        shuffle_window: i64,
        copy: bool,
    ) -> PyResult<Loader> {
        slf.get().warn_if_splits_mixed(slf.py())?;
        let args = LoaderArgs {
            shuffle_window,
            batch_size,
            shuffle,
            seed,
            rank,
            world_size,
            drop_last,
            threads,
            prefetch,
            last_batch,
            worker,
            num_workers,
            copy,
        };
        Loader::new(slf, args)
    }

    /// The artifact's transforms applied to new rows: ``{field: array}`` with
    /// a leading rows axis, the same arrays (dtypes, shapes, bytes) a loader
    /// yields for records the build would have made of these rows.
    ///
    /// ``rows`` holds the spec's query output columns that the fields read,
    /// as a dict of lists or NumPy arrays, a pandas DataFrame (NaN is a
    /// null there, as pyarrow reads it) or a pyarrow Table. Each column is
    /// first converted to the type the build read it as; the fields'
    /// expressions, fills, transforms with the frozen statistics and
    /// vocabularies, and the encoding are the compiler's own code. Every row
    /// is encoded; ``filter=True`` keeps only the rows the spec's filter
    /// accepts. The split is never applied. ``fields=["a", "b"]`` computes
    /// only those fields (the dict holds only them), so ``rows`` need only
    /// their inputs: a service passes the features, not the label. Raises
    /// ``TransformError`` naming the column or field and the row, or an
    /// unknown field.
    #[pyo3(signature = (rows, filter = false, fields = None))]
    fn transform<'py>(
        &self,
        py: Python<'py>,
        rows: &Bound<'py, PyAny>,
        filter: bool,
        fields: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        crate::transform::apply(
            py,
            &self.transform,
            &self.ds,
            &self.view,
            rows,
            filter,
            fields,
        )
    }

    /// For checking a reproduction of a build: the split each of ``rows``
    /// would go to (an index into ``list(ds.splits)``), for the rows
    /// ``transform(rows, filter)`` encodes.
    #[pyo3(signature = (rows, filter = false))]
    fn split_of<'py>(
        &self,
        py: Python<'py>,
        rows: &Bound<'py, PyAny>,
        filter: bool,
    ) -> PyResult<Bound<'py, numpy::PyArray1<u16>>> {
        crate::transform::split_of(py, &self.transform, &self.ds, rows, filter)
    }

    fn __repr__(&self) -> String {
        let split = match self.ds.split_name() {
            Some(s) => format!(", split={s:?}"),
            None => String::new(),
        };
        format!(
            "Dataset({:?}{split}, rows={}, stride={}, fields={})",
            self.ds.dir().display().to_string(),
            self.ds.len(),
            self.ds.stride(),
            self.ds.layout().fields.len()
        )
    }
}

impl Dataset {
    /// Copies `n` records from `start` into a new buffer and views it.
    fn copy_run<'py>(&self, py: Python<'py>, start: u64, n: usize) -> PyResult<Bound<'py, PyDict>> {
        self.copy_with(py, n, |ds, out| ds.copy_records(start, out))
    }

    /// Gathers `rows` (already in range) into a new buffer and views it.
    fn copy_rows<'py>(&self, py: Python<'py>, rows: &[u64]) -> PyResult<Bound<'py, PyDict>> {
        self.copy_with(py, rows.len(), |ds, out| ds.gather(rows, out))
    }

    fn copy_with<'py>(
        &self,
        py: Python<'py>,
        n: usize,
        fill: impl FnOnce(&tessera_reader::Dataset, &mut [u8]) -> tessera_reader::Result<()> + Send,
    ) -> PyResult<Bound<'py, PyDict>> {
        let stride = self.ds.stride();
        let bytes = n
            .checked_mul(stride)
            .ok_or_else(|| argument(format!("{n} records do not fit in memory")))?;
        // Eight spare bytes let the records start 8-byte aligned whatever
        // alignment NumPy's allocator gives.
        let buf = PyArray1::<u8>::zeros(py, bytes + 8, false);
        let data = {
            let mut rw = buf.readwrite();
            let all = rw.as_slice_mut()?;
            let pad = all.as_ptr().align_offset(8).min(8);
            let out = &mut all[pad..pad + bytes];
            py.detach(|| fill(&self.ds, out)).map_err(to_py)?;
            out.as_mut_ptr()
        };
        // SAFETY: `data` points at `n * stride` bytes, 8-byte aligned, inside
        // the NumPy array `buf`, which owns them and is the views' base; a
        // NumPy array's data is never moved or freed while another array
        // references it as base. No Rust reference to the bytes outlives the
        // block above.
        unsafe { self.view.dict(buf.as_any(), data, Some(n), true) }
    }
}

/// Turns possibly negative indices into in-range record numbers.
fn normalize(indices: impl IntoIterator<Item = i64>, len: u64) -> PyResult<Vec<u64>> {
    indices
        .into_iter()
        .map(|i| {
            let r = if i < 0 {
                i128::from(len) + i128::from(i)
            } else {
                i128::from(i)
            };
            if r < 0 || r >= i128::from(len) {
                Err(out_of_range(i, len))
            } else {
                Ok(r as u64)
            }
        })
        .collect()
}

fn out_of_range(i: i64, len: u64) -> PyErr {
    PyIndexError::new_err(format!(
        "record {i} is out of range for a dataset of {len} records"
    ))
}

fn json_to_py<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}
