//! Counting a vocabulary in bounded memory.
//!
//! A [`VocabCounter`] counts values in a hash map until the map's estimated
//! size passes its budget, then writes the counts sorted by value to a run
//! file and starts over. Freezing merges the runs (a k-way merge by value,
//! summing counts), keeps the values seen at least `min_count` times, and the
//! `max_size` most frequent of them (ties by value). The result is the same
//! as counting everything in memory, whatever the budget, the order of the
//! values or the way they were cut into tasks.

use crate::accumulators::Counts;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// Estimated bytes a counted value costs in the map, beyond its text.
const ENTRY_OVERHEAD: usize = 64;

/// Where and how much a counter may hold before it spills.
#[derive(Clone, Debug)]
pub struct SpillConfig {
    /// Directory for run files (removed with the build's work directory).
    pub dir: PathBuf,
    /// Bytes one counter may hold in memory.
    pub budget: usize,
}

static RUN_SEQ: AtomicU64 = AtomicU64::new(0);

/// Value counts, in memory up to a budget, then in sorted run files.
/// Serialized as its in-memory counts (sorted by value) and its run files.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct VocabCounter {
    #[serde(with = "sorted_map")]
    map: HashMap<String, u64>,
    #[serde(skip)]
    bytes: usize,
    runs: Vec<PathBuf>,
    #[serde(skip)]
    spill: Option<SpillConfig>,
}

/// A map written as a list of pairs sorted by key, so the JSON of a partial is
/// a function of its counts.
mod sorted_map {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::HashMap;

    pub fn serialize<S: Serializer>(m: &HashMap<String, u64>, s: S) -> Result<S::Ok, S::Error> {
        let mut v: Vec<(&String, &u64)> = m.iter().collect();
        v.sort_unstable();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<String, u64>, D::Error> {
        let v: Vec<(String, u64)> = Vec::deserialize(d)?;
        Ok(v.into_iter().collect())
    }
}

impl Clone for VocabCounter {
    fn clone(&self) -> Self {
        VocabCounter {
            map: self.map.clone(),
            bytes: self.bytes,
            runs: self.runs.clone(),
            spill: self.spill.clone(),
        }
    }
}

/// Why a vocabulary cannot be frozen.
#[derive(Debug)]
pub enum VocabError {
    /// More values than `max_values` pass `min_count`.
    TooLarge {
        /// Values that would be kept (at least this many).
        count: u64,
    },
    /// A run file could not be written or read.
    Io(PathBuf, std::io::Error),
}

impl VocabCounter {
    /// A counter that spills as `spill` says (or never, with `None`).
    pub fn new(spill: Option<SpillConfig>) -> Self {
        VocabCounter {
            spill,
            ..Default::default()
        }
    }

    /// Sets where the counter spills from now on (after deserializing).
    pub fn set_spill(&mut self, spill: Option<SpillConfig>) {
        self.bytes = self.map.keys().map(|k| k.len() + ENTRY_OVERHEAD).sum();
        self.spill = spill;
    }

    /// Counts one occurrence of `value`.
    #[inline]
    pub fn push(&mut self, value: &str) -> Result<(), VocabError> {
        if let Some(c) = self.map.get_mut(value) {
            *c += 1;
            return Ok(());
        }
        self.map.insert(value.to_owned(), 1);
        self.bytes += value.len() + ENTRY_OVERHEAD;
        self.maybe_spill()
    }

    fn maybe_spill(&mut self) -> Result<(), VocabError> {
        match &self.spill {
            Some(cfg) if self.bytes > cfg.budget => self.spill_now(),
            _ => Ok(()),
        }
    }

    /// Writes the in-memory counts to a run file, sorted by value.
    fn spill_now(&mut self) -> Result<(), VocabError> {
        let Some(cfg) = &self.spill else {
            return Ok(());
        };
        if self.map.is_empty() {
            return Ok(());
        }
        let n = RUN_SEQ.fetch_add(1, AtomicOrdering::Relaxed);
        let path = cfg
            .dir
            .join(format!("vocab-{}-{n}.run", std::process::id()));
        let mut entries: Vec<(String, u64)> = self.map.drain().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let io = |e| VocabError::Io(path.clone(), e);
        let mut w = BufWriter::new(File::create(&path).map_err(io)?);
        for (v, c) in &entries {
            w.write_all(&(v.len() as u32).to_le_bytes()).map_err(io)?;
            w.write_all(v.as_bytes()).map_err(io)?;
            w.write_all(&c.to_le_bytes()).map_err(io)?;
        }
        w.flush().map_err(io)?;
        self.bytes = 0;
        self.runs.push(path);
        Ok(())
    }

    /// Adds another counter's counts.
    pub fn merge(&mut self, other: VocabCounter) -> Result<(), VocabError> {
        self.runs.extend(other.runs);
        for (k, v) in other.map {
            match self.map.get_mut(&k) {
                Some(c) => *c += v,
                None => {
                    self.bytes += k.len() + ENTRY_OVERHEAD;
                    self.map.insert(k, v);
                }
            }
        }
        self.maybe_spill()
    }

    /// The frozen vocabulary: values seen at least `min_count` times, most
    /// frequent first, ties by value, at most `max_size` of them; an error if
    /// more than `max_values` would be kept.
    pub fn freeze(
        mut self,
        min_count: u64,
        max_size: Option<u64>,
        max_values: u64,
    ) -> Result<Vec<(String, u64)>, VocabError> {
        if self.runs.is_empty() {
            let counts = Counts(std::mem::take(&mut self.map));
            let kept = counts.0.values().filter(|&&c| c >= min_count).count() as u64;
            if max_size.unwrap_or(u64::MAX).min(kept) > max_values {
                return Err(VocabError::TooLarge { count: kept });
            }
            return Ok(counts.freeze(min_count, max_size));
        }
        // What is still in memory joins the merge as one more sorted run.
        let mut rest: Vec<(String, u64)> = self.map.drain().collect();
        rest.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let cap = max_size.unwrap_or(u64::MAX);
        let mut top = TopK::new(cap);
        let mut kept = 0u64;
        merge_runs(&self.runs, rest, |value, count| {
            if count >= min_count {
                kept += 1;
                if cap == u64::MAX && kept > max_values {
                    return Err(VocabError::TooLarge { count: kept });
                }
                top.push(value, count);
            }
            Ok(())
        })?;
        if cap.min(kept) > max_values {
            return Err(VocabError::TooLarge { count: kept });
        }
        Ok(top.into_sorted())
    }
}

/// The `k` largest `(count, value)` by count, ties to the smaller value.
struct TopK {
    k: u64,
    heap: BinaryHeap<Reverse<Ranked>>,
}

#[derive(PartialEq, Eq)]
struct Ranked(u64, String);

impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> Ordering {
        // Higher count ranks higher; for equal counts the smaller value does.
        self.0.cmp(&o.0).then_with(|| o.1.cmp(&self.1))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl TopK {
    fn new(k: u64) -> Self {
        TopK {
            k,
            heap: BinaryHeap::new(),
        }
    }

    fn push(&mut self, value: String, count: u64) {
        if self.k == 0 {
            return;
        }
        let r = Ranked(count, value);
        if (self.heap.len() as u64) < self.k {
            self.heap.push(Reverse(r));
        } else if let Some(Reverse(min)) = self.heap.peek()
            && r > *min
        {
            self.heap.pop();
            self.heap.push(Reverse(r));
        }
    }

    fn into_sorted(self) -> Vec<(String, u64)> {
        let mut v: Vec<Ranked> = self.heap.into_iter().map(|Reverse(r)| r).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.into_iter().map(|Ranked(c, s)| (s, c)).collect()
    }
}

/// One sorted run: a file, or the counts still in memory.
enum Run {
    File {
        reader: BufReader<File>,
        path: PathBuf,
    },
    Memory(std::vec::IntoIter<(String, u64)>),
}

impl Run {
    fn next(&mut self) -> Result<Option<(String, u64)>, VocabError> {
        match self {
            Run::Memory(it) => Ok(it.next()),
            Run::File { reader, path } => Self::next_from(reader, path),
        }
    }

    fn next_from(
        reader: &mut BufReader<File>,
        path: &std::path::Path,
    ) -> Result<Option<(String, u64)>, VocabError> {
        let io = |e| VocabError::Io(path.to_path_buf(), e);
        let mut len = [0u8; 4];
        match reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io(e)),
        }
        let mut buf = vec![0u8; u32::from_le_bytes(len) as usize];
        reader.read_exact(&mut buf).map_err(io)?;
        let mut count = [0u8; 8];
        reader.read_exact(&mut count).map_err(io)?;
        let value = String::from_utf8(buf)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Ok(Some((value, u64::from_le_bytes(count))))
    }
}

/// Merges the sorted run files and the sorted in-memory `rest` by value,
/// calling `f` once per distinct value with its total count, in value order.
fn merge_runs(
    paths: &[PathBuf],
    rest: Vec<(String, u64)>,
    mut f: impl FnMut(String, u64) -> Result<(), VocabError>,
) -> Result<(), VocabError> {
    let mut runs = Vec::with_capacity(paths.len() + 1);
    for p in paths {
        let file = File::open(p).map_err(|e| VocabError::Io(p.clone(), e))?;
        runs.push(Run::File {
            reader: BufReader::with_capacity(64 << 10, file),
            path: p.clone(),
        });
    }
    runs.push(Run::Memory(rest.into_iter()));
    let mut heap: BinaryHeap<Reverse<(String, usize, u64)>> = BinaryHeap::new();
    for (i, r) in runs.iter_mut().enumerate() {
        if let Some((v, c)) = r.next()? {
            heap.push(Reverse((v, i, c)));
        }
    }
    let mut current: Option<(String, u64)> = None;
    while let Some(Reverse((v, i, c))) = heap.pop() {
        if let Some((nv, nc)) = runs[i].next()? {
            heap.push(Reverse((nv, i, nc)));
        }
        match &mut current {
            Some((cv, cc)) if *cv == v => *cc += c,
            _ => {
                if let Some((cv, cc)) = current.take() {
                    f(cv, cc)?;
                }
                current = Some((v, c));
            }
        }
    }
    if let Some((cv, cc)) = current {
        f(cv, cc)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<String> {
        // A skewed multiset: value i appears (i % 7) + 1 times.
        let mut out = Vec::new();
        for i in 0..n {
            for _ in 0..(i % 7) + 1 {
                out.push(format!("v{i}"));
            }
        }
        // Interleave deterministically.
        out.sort_by_key(|s| crate::accumulators::stable_hash(s.as_bytes()));
        out
    }

    #[test]
    fn spilled_counts_freeze_to_the_in_memory_answer() {
        let vals = values(3000);
        let mut mem = VocabCounter::new(None);
        for v in &vals {
            mem.push(v).expect("push");
        }
        let want = mem.clone().freeze(2, Some(500), u64::MAX).expect("freeze");
        let dir = tempfile::tempdir().expect("tmp");
        // Tiny budget: many runs; values cut into three tasks.
        let cfg = SpillConfig {
            dir: dir.path().to_path_buf(),
            budget: 2000,
        };
        let mut parts: Vec<VocabCounter> = (0..3)
            .map(|_| VocabCounter::new(Some(cfg.clone())))
            .collect();
        for (i, v) in vals.iter().enumerate() {
            parts[i % 3].push(v).expect("push");
        }
        // The build merges into a counter of its own; its in-memory counts
        // must join the spilled runs.
        let mut merged = VocabCounter::new(None);
        for p in parts {
            merged.merge(p).expect("merge");
        }
        assert!(merged.runs.len() > 10, "{} runs", merged.runs.len());
        let got = merged
            .clone()
            .freeze(2, Some(500), u64::MAX)
            .expect("freeze");
        assert_eq!(got, want);
        let all = merged.freeze(1, None, u64::MAX).expect("all");
        assert_eq!(all.len(), 3000);
        assert!(
            all.windows(2)
                .all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0))
        );
    }

    #[test]
    fn a_vocabulary_over_the_bound_is_an_error_unless_cut() {
        let mut c = VocabCounter::new(None);
        for i in 0..100 {
            c.push(&format!("x{i}")).expect("push");
        }
        assert!(matches!(
            c.clone().freeze(1, None, 50),
            Err(VocabError::TooLarge { count: 100 })
        ));
        assert_eq!(c.freeze(1, Some(50), 50).expect("cut").len(), 50);
    }
}
