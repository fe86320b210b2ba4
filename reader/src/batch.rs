//! Batches: one contiguous, 8-byte-aligned buffer of `rows x stride` bytes,
//! with typed views of each field into it.

use crate::dataset::{Dataset, field_of, field_slice};
use crate::dtype::Element;
use crate::error::Result;
use crate::layout::RecordLayout;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// A byte buffer whose start is aligned to 8 bytes, so every field of every
/// record in it is naturally aligned (the stride is a multiple of the largest
/// field alignment, which is at most 8).
#[derive(Default)]
pub(crate) struct AlignedBuf {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBuf {
    /// Makes the buffer exactly `len` bytes long, reusing its allocation.
    pub(crate) fn resize(&mut self, len: usize) {
        self.words.resize(len.div_ceil(8), 0);
        self.len = len;
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the words are initialized u64s; any initialized memory may be
        // read as u8 (alignment 1, no invalid values), and `len` never exceeds
        // the words' byte length (`resize` keeps it so).
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the exclusive borrow of `self` makes the
        // mutable byte view the only access to the words while it lives, and
        // every u8 written leaves the u64s valid.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// Recycles batch buffers: a batch hands its buffer back when dropped, so a
/// steady-state epoch allocates (and page-faults) nothing.
#[derive(Default)]
pub(crate) struct BufPool {
    free: Mutex<Vec<AlignedBuf>>,
    cap: usize,
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let free = self.free.lock().map(|v| v.len()).unwrap_or(0);
        f.debug_struct("BufPool")
            .field("free", &free)
            .field("cap", &self.cap)
            .finish()
    }
}

impl BufPool {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(BufPool {
            free: Mutex::new(Vec::new()),
            cap,
        })
    }

    pub(crate) fn take(&self) -> AlignedBuf {
        self.free
            .lock()
            .ok()
            .and_then(|mut v| v.pop())
            .unwrap_or_default()
    }

    fn give(&self, buf: AlignedBuf) {
        if let Ok(mut v) = self.free.lock()
            && v.len() < self.cap
        {
            v.push(buf);
        }
    }
}

/// One batch of records in a contiguous buffer.
///
/// ```
/// # use tessera_reader::*;
/// # let dir = tempfile::tempdir()?;
/// # let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::F32, &[2])])?;
/// # let mut w = ShardSetWriter::new(dir.path(), layout, 1 << 20)?;
/// # w.begin_split("all")?;
/// # for i in 0..8 { let v = i as f32; w.write_records(&[v.to_le_bytes(), (-v).to_le_bytes()].concat())?; }
/// # w.finish()?;
/// let ds = Dataset::open(dir.path())?;
/// let loader = Loader::new(&ds, LoaderConfig { batch_size: 4, shuffle: false, ..Default::default() })?;
/// let batch = loader.epoch(0).next().unwrap();
/// let x = batch.field::<f32>("x")?;
/// assert_eq!(x.row(1), &[1.0, -1.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Batch {
    buf: AlignedBuf,
    /// For a zero-copy batch: the view and the first of its records the
    /// batch borrows from the memory map (all in one shard); `buf` is empty.
    mapped: Option<(Dataset, u64)>,
    pool: Option<Arc<BufPool>>,
    rows: usize,
    layout: Arc<RecordLayout>,
    index: u64,
}

impl Batch {
    /// A batch borrowing records `start..start + rows` of `ds` from the map;
    /// the caller checked that they lie in one shard.
    pub(crate) fn mapped(
        ds: Dataset,
        start: u64,
        pool: Option<Arc<BufPool>>,
        rows: usize,
        layout: Arc<RecordLayout>,
        index: u64,
    ) -> Self {
        let mut batch = Batch::new(AlignedBuf::default(), pool, rows, layout, index);
        batch.mapped = Some((ds, start));
        batch
    }

    /// A batch of `rows` zeroed records of `layout` in a buffer of its own,
    /// for code that makes records rather than reading them (the serving
    /// transform): fill it through [`Batch::bytes_mut`], then read it like a
    /// loader's batch. Fails when `rows x stride` overflows.
    pub fn zeroed(layout: Arc<RecordLayout>, rows: usize) -> Result<Batch> {
        let len = usize::try_from(layout.stride)
            .ok()
            .and_then(|s| s.checked_mul(rows))
            .ok_or_else(|| {
                crate::Error::InvalidArgument(format!(
                    "{rows} records of {} bytes do not fit in memory",
                    layout.stride
                ))
            })?;
        let mut buf = AlignedBuf::default();
        buf.resize(len);
        Ok(Batch::new(buf, None, rows, layout, 0))
    }

    pub(crate) fn new(
        buf: AlignedBuf,
        pool: Option<Arc<BufPool>>,
        rows: usize,
        layout: Arc<RecordLayout>,
        index: u64,
    ) -> Self {
        Batch {
            buf,
            mapped: None,
            pool,
            rows,
            layout,
            index,
        }
    }

    /// Records in the batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes per record.
    pub fn stride(&self) -> usize {
        self.layout.stride as usize
    }

    /// The batch's index `k` in this rank's batch sequence for the epoch.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The record layout.
    pub fn layout(&self) -> &RecordLayout {
        &self.layout
    }

    /// The whole buffer, `rows x stride` bytes, 8-byte aligned.
    pub fn bytes(&self) -> &[u8] {
        match &self.mapped {
            // In range by construction (checked when the batch was made).
            Some((ds, start)) => ds.records(*start..*start + self.rows as u64).unwrap_or(&[]),
            None => self.buf.bytes(),
        }
    }

    /// True when the batch borrows its records from the memory map (a
    /// sequential batch inside one shard) instead of holding a copy.
    pub fn is_zero_copy(&self) -> bool {
        self.mapped.is_some()
    }

    /// The whole buffer, writable. A zero-copy batch is first copied into a
    /// buffer of its own (the shard files are never written).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if let Some((ds, start)) = self.mapped.take() {
            let mut buf = self.pool.as_ref().map(|p| p.take()).unwrap_or_default();
            buf.resize(self.rows * self.stride());
            // In range by construction; a failure leaves zeros, never a panic.
            let _ = ds.copy_records(start, buf.bytes_mut());
            self.buf = buf;
        }
        self.buf.bytes_mut()
    }

    /// The bytes of record `j` of the batch.
    pub fn record(&self, j: usize) -> Option<&[u8]> {
        let s = self.stride();
        self.bytes().get(j * s..(j + 1) * s)
    }

    /// A typed view of field `name` across the batch (no copy).
    pub fn field<T: Element>(&self, name: &str) -> Result<FieldView<'_, T>> {
        let f = field_of::<T>(&self.layout, name)?;
        // Type-check and bounds-check through the first record once.
        if let Some(rec) = self.record(0) {
            field_slice::<T>(rec, f)?;
        }
        Ok(FieldView {
            bytes: self.bytes(),
            stride: self.stride(),
            offset: f.offset as usize,
            elems: f.elements() as usize,
            rows: self.rows,
            _t: PhantomData,
        })
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take()
            && self.mapped.is_none()
        {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("index", &self.index)
            .field("rows", &self.rows)
            .field("stride", &self.stride())
            .finish()
    }
}

/// A strided, typed view of one field across the records of a batch: record
/// `j`'s elements start at byte `j * stride + offset` of the batch buffer.
#[derive(Clone, Copy, Debug)]
pub struct FieldView<'a, T> {
    bytes: &'a [u8],
    stride: usize,
    offset: usize,
    elems: usize,
    rows: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Element> FieldView<'a, T> {
    /// Records in the view.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Elements per record (the product of the field's shape).
    pub fn elements(&self) -> usize {
        self.elems
    }

    /// Byte distance between consecutive records' values (the stride).
    pub fn byte_stride(&self) -> usize {
        self.stride
    }

    /// Byte offset of the field inside a record.
    pub fn byte_offset(&self) -> usize {
        self.offset
    }

    /// The field's elements in record `j` (panics if `j >= len()`).
    pub fn row(&self, j: usize) -> &'a [T] {
        let start = j * self.stride + self.offset;
        let bytes = &self.bytes[start..start + self.elems * std::mem::size_of::<T>()];
        // Alignment was established when the view was made: the buffer is
        // 8-aligned and stride and offset are multiples of the element size.
        crate::dtype::cast_slice(bytes).unwrap_or(&[])
    }

    /// Iterates over the records' values.
    pub fn iter(&self) -> impl Iterator<Item = &'a [T]> + '_ {
        (0..self.rows).map(move |j| self.row(j))
    }

    /// Copies the field into a dense `rows x elements` vector.
    pub fn to_vec(&self) -> Vec<T> {
        let mut v = Vec::with_capacity(self.rows * self.elems);
        for r in self.iter() {
            v.extend_from_slice(r);
        }
        v
    }
}
