//! Reading records: one by index, a contiguous run, or a gather at given
//! indices, from the memory maps or through shards pinned in the cache.

use super::gather::gather_with;
use super::{Dataset, ShardSet, Storage, field_of, field_slice};
use crate::cache::{CachedShards, PinSet};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::header::HEADER_LEN;
use std::ops::Range;
use std::sync::Arc;

impl Dataset {
    /// The shard holding index `i` of this view (in range).
    #[inline]
    pub(crate) fn shard_of_index(&self, i: u64) -> usize {
        self.set.shard_of(self.rows.start + i)
    }

    /// The distinct shards (sorted) holding the view indices `indices`.
    pub(crate) fn shards_of(&self, indices: impl IntoIterator<Item = u64>) -> Vec<u32> {
        let per: Vec<u32> = indices
            .into_iter()
            .map(|i| self.shard_of_index(i) as u32)
            .collect();
        distinct_sorted(&per)
    }

    /// Pins the shards holding `indices` when the set is cached (`None`
    /// otherwise), for plan step `step` if given.
    pub(crate) fn pin(
        &self,
        indices: impl IntoIterator<Item = u64>,
        step: Option<(u64, usize)>,
    ) -> Result<Option<PinSet>> {
        match &self.set.storage {
            Storage::Mapped(_) => Ok(None),
            Storage::Cached(c) => c.acquire(&self.shards_of(indices), step).map(Some),
        }
    }

    /// Record `i` of this view, which the caller knows is in range, read
    /// through `pins` (which must hold its shard) when the set is cached.
    #[inline(always)]
    pub(crate) fn record_pinned<'a>(&'a self, pins: Option<&'a PinSet>, i: u64) -> &'a [u8] {
        match pins {
            None => self.record_in_range(i),
            Some(p) => self.set.record_from(p, self.rows.start + i),
        }
    }

    /// Record `i` of this view, which the caller knows is in range.
    #[inline(always)]
    pub(crate) fn record_in_range(&self, i: u64) -> &[u8] {
        self.set.record(self.rows.start + i)
    }

    /// The bytes of record `i` of this view, straight from the map. On a
    /// cached set this fetches the record's shard if needed and keeps it
    /// mapped (and out of eviction) as long as the set is open; it returns
    /// `None` if the shard cannot be fetched. Batches do not go through it.
    pub fn record(&self, i: u64) -> Option<&[u8]> {
        if i >= self.len() {
            return None;
        }
        let row = self.rows.start + i;
        match &self.set.storage {
            Storage::Mapped(_) => Some(self.set.record(row)),
            Storage::Cached(c) => {
                let s = self.set.shard_of(row);
                let map = c.sticky(s).ok()?;
                let off = HEADER_LEN + (row - self.set.starts[s]) as usize * self.set.stride;
                map.get(off..off + self.set.stride)
            }
        }
    }

    /// A typed, zero-copy view of field `name` of record `i`.
    pub fn field<T: Element>(&self, i: u64, name: &str) -> Result<&[T]> {
        let f = field_of::<T>(self.layout(), name)?;
        let rec = self.record(i).ok_or_else(|| {
            Error::InvalidArgument(format!("record {i} is out of range (len {})", self.len()))
        })?;
        field_slice(rec, f)
    }

    /// Records `range` of this view as one slice of the map, when they lie in
    /// one shard (zero copies); `None` when the range spans shards or is out
    /// of bounds.
    pub fn records(&self, range: Range<u64>) -> Option<&[u8]> {
        if range.start > range.end || range.end > self.len() {
            return None;
        }
        // An empty range may sit at the very end of the set (or the set may
        // have no shard at all), where no shard holds row `a`.
        if range.is_empty() {
            return Some(&[]);
        }
        let Storage::Mapped(maps) = &self.set.storage else {
            return None;
        };
        let a = self.rows.start + range.start;
        let b = self.rows.start + range.end;
        let s = self.set.shard_of(a);
        if b > self.set.starts[s + 1] {
            return None;
        }
        let off = HEADER_LEN + (a - self.set.starts[s]) as usize * self.set.stride;
        maps[s].get(off..off + (b - a) as usize * self.set.stride)
    }

    /// Copies records `start..start + n` of this view (which may span shards)
    /// into `out`, which must be `n * stride` bytes.
    pub fn copy_records(&self, start: u64, out: &mut [u8]) -> Result<()> {
        self.copy_records_at(start, out, None)
    }

    /// `copy_records` for plan step `step` of a cached set.
    pub(crate) fn copy_records_at(
        &self,
        start: u64,
        out: &mut [u8],
        step: Option<(u64, usize)>,
    ) -> Result<()> {
        let stride = self.set.stride;
        let n = (out.len() / stride) as u64;
        if !out.len().is_multiple_of(stride) || start.checked_add(n).is_none_or(|e| e > self.len())
        {
            return Err(Error::InvalidArgument(format!(
                "copy of {} bytes from record {start} does not fit a view of {} records",
                out.len(),
                self.len()
            )));
        }
        let pins = self.pin(start..start + n, step)?;
        self.set
            .copy_run(pins.as_ref(), self.rows.start + start, out);
        Ok(())
    }

    /// Copies the records at `indices` (of this view) into consecutive slots of
    /// `out`, which must be `indices.len() * stride` bytes.
    pub fn gather(&self, indices: &[u64], out: &mut [u8]) -> Result<()> {
        self.gather_at(indices, out, None)
    }

    /// `gather` for plan step `step` of a cached set.
    pub(crate) fn gather_at(
        &self,
        indices: &[u64],
        out: &mut [u8],
        step: Option<(u64, usize)>,
    ) -> Result<()> {
        if out.len() != indices.len() * self.set.stride {
            return Err(Error::InvalidArgument(format!(
                "gather of {} records needs {} bytes, got {}",
                indices.len(),
                indices.len() * self.set.stride,
                out.len()
            )));
        }
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.len()) {
            return Err(Error::InvalidArgument(format!(
                "record {bad} is out of range (len {})",
                self.len()
            )));
        }
        match &self.set.storage {
            Storage::Mapped(_) => self.set.gather(self.rows.start, indices, out),
            Storage::Cached(c) => self.gather_cached(c, indices, out, step)?,
        }
        Ok(())
    }

    /// `gather_at` of a cached set. Each record's shard is found once (a
    /// division per record is a good part of a gather's cost) and kept for
    /// the copy, where a table indexed by shard hands out the pinned bytes
    /// without a search per record.
    fn gather_cached(
        &self,
        cache: &Arc<CachedShards>,
        indices: &[u64],
        out: &mut [u8],
        step: Option<(u64, usize)>,
    ) -> Result<()> {
        if let Some(planned) = step.and_then(|st| cache.planned(st))
            && self.gather_planned(cache, &planned, indices, out, step)?
        {
            return Ok(());
        }
        let base = self.rows.start;
        let per: Vec<u32> = indices
            .iter()
            .map(|&i| self.set.shard_of(base + i) as u32)
            .collect();
        let wanted = distinct_sorted(&per);
        let pins = cache.acquire(&wanted, step)?;
        let (Some(&lo), Some(&hi)) = (wanted.first(), wanted.last()) else {
            return Ok(());
        };
        let stride = self.set.stride;
        let starts = &self.set.starts;
        if hi - lo > MAX_SHARD_TABLE {
            // Shards spread over the whole set (a full shuffle of a huge
            // set): look each one up in the pins.
            gather_with(out, stride, |j| {
                let s = per[j] as usize;
                let off = HEADER_LEN + (base + indices[j] - starts[s]) as usize * stride;
                &pins.shard(s)[off..off + stride]
            });
            return Ok(());
        }
        let table = pinned_table(&pins, lo, hi);
        gather_with(out, stride, |j| {
            let s = per[j];
            let off = HEADER_LEN + (base + indices[j] - starts[s as usize]) as usize * stride;
            &table[(s - lo) as usize][off..off + stride]
        });
        Ok(())
    }

    /// `gather_cached` for a batch whose shards the plan names: those are
    /// pinned without a pass over the records, and each record's shard is
    /// found as for a mapped set, in the copy loop. `Ok(false)`, with `out`
    /// to be filled again, if a record lies outside the planned shards
    /// (a plan that does not match the batch: never by construction).
    fn gather_planned(
        &self,
        cache: &Arc<CachedShards>,
        planned: &[u32],
        indices: &[u64],
        out: &mut [u8],
        step: Option<(u64, usize)>,
    ) -> Result<bool> {
        let (Some(&lo), Some(&hi)) = (planned.first(), planned.last()) else {
            return Ok(indices.is_empty());
        };
        if hi - lo > MAX_SHARD_TABLE {
            return Ok(false);
        }
        let pins = cache.acquire(planned, step)?;
        let table = pinned_table(&pins, lo, hi);
        let (base, stride, set) = (self.rows.start, self.set.stride, &self.set);
        let zero = vec![0u8; stride];
        let mut strays = false;
        gather_with(out, stride, |j| {
            let row = base + indices[j];
            let s = set.shard_of(row);
            let off = HEADER_LEN + (row - set.starts[s]) as usize * stride;
            match table
                .get(s.wrapping_sub(lo as usize))
                .and_then(|t| t.get(off..off + stride))
            {
                Some(r) => r,
                None => {
                    strays = true;
                    &zero
                }
            }
        });
        Ok(!strays)
    }
}

impl ShardSet {
    /// The shard holding global row `row` (which must be in range).
    #[inline(always)]
    fn shard_of(&self, row: u64) -> usize {
        match self.uniform_rows {
            Some(r) => ((row / r) as usize).min(self.manifest.shards.len() - 1),
            None => self.starts.partition_point(|&s| s <= row) - 1,
        }
    }

    /// The bytes of shard `s`: its map, or its pinned cache copy.
    #[inline(always)]
    fn shard<'a>(&'a self, pins: Option<&'a PinSet>, s: usize) -> &'a [u8] {
        match (&self.storage, pins) {
            (Storage::Mapped(maps), _) => &maps[s],
            (Storage::Cached(_), Some(p)) => p.shard(s),
            // Unreachable by construction: cached reads always pin first.
            (Storage::Cached(_), None) => &[],
        }
    }

    /// Global row `row` of a mapped set.
    #[inline(always)]
    fn record(&self, row: u64) -> &[u8] {
        let s = self.shard_of(row);
        let off = HEADER_LEN + (row - self.starts[s]) as usize * self.stride;
        &self.shard(None, s)[off..off + self.stride]
    }

    /// Global row `row` through pinned shards.
    #[inline(always)]
    fn record_from<'a>(&'a self, pins: &'a PinSet, row: u64) -> &'a [u8] {
        let s = self.shard_of(row);
        let off = HEADER_LEN + (row - self.starts[s]) as usize * self.stride;
        &self.shard(Some(pins), s)[off..off + self.stride]
    }

    /// Copies consecutive global rows starting at `row` into `out`.
    fn copy_run(&self, pins: Option<&PinSet>, mut row: u64, mut out: &mut [u8]) {
        while !out.is_empty() {
            let s = self.shard_of(row);
            let in_shard = (self.starts[s + 1] - row) as usize;
            let n = in_shard.min(out.len() / self.stride);
            let off = HEADER_LEN + (row - self.starts[s]) as usize * self.stride;
            let (head, tail) = out.split_at_mut(n * self.stride);
            head.copy_from_slice(&self.shard(pins, s)[off..off + n * self.stride]);
            out = tail;
            row += n as u64;
        }
    }

    /// Gathers rows `base + indices[j]` of a mapped set into slot `j` of `out`.
    fn gather(&self, base: u64, indices: &[u64], out: &mut [u8]) {
        let Storage::Mapped(maps) = &self.storage else {
            return;
        };
        gather_with(out, self.stride, |j| {
            let row = base + indices[j];
            let s = self.shard_of(row);
            let off = HEADER_LEN + (row - self.starts[s]) as usize * self.stride;
            &maps[s][off..off + self.stride]
        });
    }
}

/// The bytes of pinned shards `lo..=hi`, indexed by `shard - lo` (empty for
/// a shard in the range that is not pinned).
fn pinned_table(pins: &PinSet, lo: u32, hi: u32) -> Vec<&[u8]> {
    (lo..=hi).map(|s| pins.shard(s as usize)).collect()
}

/// Widest range of shard ids one cached gather indexes by table (beyond it,
/// each record's shard is searched among the pins).
const MAX_SHARD_TABLE: u32 = 1 << 16;

/// The distinct values of `shards`, sorted. A batch's shards lie in a narrow
/// range (one window's): they are marked in a table over that range, with no
/// branch per entry that depends on the data (the shards of a shuffled batch
/// alternate at random, and a branch on them mispredicts half the time).
fn distinct_sorted(shards: &[u32]) -> Vec<u32> {
    if shards.is_empty() {
        return Vec::new();
    }
    // By value, not `iter().min()`: that compares references, and compiles
    // to a branch per entry that mispredicts on shuffled shards (measured:
    // 13% of a cached epoch's time, against under 1% for this fold).
    let (lo, hi) = shards
        .iter()
        .fold((u32::MAX, 0), |(lo, hi), &s| (lo.min(s), hi.max(s)));
    if hi - lo > MAX_SHARD_TABLE {
        let mut v = shards.to_vec();
        v.sort_unstable();
        v.dedup();
        return v;
    }
    let mut seen = vec![false; (hi - lo) as usize + 1];
    for &s in shards {
        seen[(s - lo) as usize] = true;
    }
    (lo..=hi).filter(|&s| seen[(s - lo) as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheOptions;
    use crate::dataset::OpenOptions;
    use crate::layout::RecordLayout;
    use std::path::Path;

    #[test]
    fn distinct_shards_are_sorted_and_deduplicated_at_any_spread() {
        // The table path (a narrow range), the sorting path (a wide one) and
        // nothing: each against a plain sort and dedup.
        let mut x = 0x9E37_79B9u32;
        let mut next = move |m: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % m
        };
        for (n, spread, base) in [
            (4096, 3, 70),
            (4096, 200, 0),
            (50, MAX_SHARD_TABLE * 3, 5),
            (0, 1, 0),
        ] {
            let shards: Vec<u32> = (0..n).map(|_| base + next(spread)).collect();
            let mut want = shards.clone();
            want.sort_unstable();
            want.dedup();
            assert_eq!(distinct_sorted(&shards), want, "n {n} spread {spread}");
        }
    }

    /// A set of `rows` 8-byte records holding their own index, in shards
    /// of 100 records, plain or compressed.
    #[cfg(feature = "zstd")]
    fn numbered(dir: &Path, rows: u64, zstd: bool) -> Dataset {
        use crate::dtype::DType;
        use crate::layout::FieldSpec;
        let layout = RecordLayout::packed(&[FieldSpec::new("i", DType::U64, &[])]).expect("layout");
        let mut w = crate::writer::ShardSetWriter::new(dir, layout, HEADER_LEN as u64 + 800)
            .expect("writer");
        if zstd {
            w = w.with_zstd(1).expect("zstd");
        }
        w.begin_split("train").expect("split");
        let bytes: Vec<u8> = (0..rows).flat_map(|i| i.to_le_bytes()).collect();
        w.write_records(&bytes).expect("write");
        w.finish().expect("finish");
        let opts = OpenOptions {
            cache: CacheOptions {
                dir: Some(dir.with_extension("cache")),
                ..Default::default()
            },
            ..Default::default()
        };
        Dataset::open_with(dir, &opts).expect("open")
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn a_planned_gather_copies_the_records_and_survives_a_plan_that_does_not_match() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plain = numbered(&tmp.path().join("plain"), 1000, false);
        let packed = numbered(&tmp.path().join("packed"), 1000, true);
        let cache = Arc::clone(packed.cached().expect("a compressed set is cached"));
        // Step 0 plans shards 2 and 5, step 1 plans shard 7 only.
        let plan = crate::cache::AccessPlan::new(10, vec![vec![5, 2], vec![7]]);
        let handle = cache.follow(plan);
        let read = |idx: &[u64], step: usize| {
            let mut out = vec![0u8; idx.len() * 8];
            packed
                .gather_at(idx, &mut out, Some((handle.id(), step)))
                .expect("gather");
            let mut want = vec![0u8; idx.len() * 8];
            plain.gather(idx, &mut want).expect("gather");
            assert_eq!(out, want);
            out.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect::<Vec<u64>>()
        };
        // As planned: records of shards 5 and 2, shuffled.
        assert_eq!(
            read(&[512, 250, 599, 200, 555], 0),
            [512, 250, 599, 200, 555]
        );
        // Not as planned (shards 0 and 9 besides 7): the records all the same.
        assert_eq!(read(&[701, 3, 950, 799], 1), [701, 3, 950, 799]);
        drop(handle);
    }
}
