//! The packing algorithms: a sequence of documents (token id sequences) in,
//! fixed windows out. Pure functions of the document sequence and the
//! options, with no I/O, so the same documents give the same windows however
//! the build that produced them was cut, threaded or distributed.

use super::{Algorithm, Overflow, PackOptions};
use std::collections::BTreeSet;

/// What packing did to one split's documents.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackStats {
    /// Documents read (empty ones included).
    pub documents: u64,
    /// Documents with no tokens (nothing to pack; left out).
    pub empty_documents: u64,
    /// Windows written.
    pub windows: u64,
    /// Tokens stored in windows (a token shared by two consecutive `concat`
    /// windows with labels counts once).
    pub tokens: u64,
    /// Pad slots in the windows.
    pub padding_tokens: u64,
    /// Documents longer than a window that were cut into several pieces.
    pub split_documents: u64,
    /// Documents longer than a window that were cut short (`overflow: truncate`).
    pub truncated_documents: u64,
    /// Tokens cut off by `overflow: truncate` or left out by `overflow: drop`.
    pub truncated_tokens: u64,
    /// Documents left out by `overflow: drop`.
    pub dropped_documents: u64,
}

impl PackStats {
    /// Pad slots over all slots, 0 for no windows.
    pub fn padding_fraction(&self, capacity: u32) -> f64 {
        let slots = self.windows * u64::from(capacity);
        if slots == 0 {
            0.0
        } else {
            self.padding_tokens as f64 / slots as f64
        }
    }
}

/// One packed window: `capacity` token slots, each with the id, the
/// segment (1, 2, ... per document piece in the window; 0 for padding) and
/// the position within its piece (0 at each piece's start and for padding).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Token ids (`pad_id` in the padding).
    pub tokens: Vec<u32>,
    /// Segment ids.
    pub segments: Vec<u32>,
    /// Positions.
    pub positions: Vec<u32>,
    /// Per slot: 1 when a loss on predicting this token may count (all of a
    /// plain document; the assistant turns of a conversation), 0 otherwise
    /// and in padding.
    pub train: Vec<u8>,
}

impl Window {
    fn new(capacity: usize) -> Self {
        Window {
            tokens: Vec::with_capacity(capacity),
            segments: Vec::with_capacity(capacity),
            positions: Vec::with_capacity(capacity),
            train: Vec::with_capacity(capacity),
        }
    }

    fn clear(&mut self) {
        self.tokens.clear();
        self.segments.clear();
        self.positions.clear();
        self.train.clear();
    }

    /// Appends one piece as a new segment.
    fn put(&mut self, piece: &[u32], train: &[u8]) {
        let seg = self.segments.last().map_or(1, |s| s + 1);
        self.train.extend_from_slice(train);
        self.tokens.extend_from_slice(piece);
        self.segments.extend(std::iter::repeat_n(seg, piece.len()));
        self.positions.extend(0..piece.len() as u32);
    }

    /// Fills the rest with padding; returns the number of pad slots.
    fn pad(&mut self, capacity: usize, pad_id: u32) -> u64 {
        let n = capacity - self.tokens.len();
        self.tokens.resize(capacity, pad_id);
        self.segments.resize(capacity, 0);
        self.positions.resize(capacity, 0);
        self.train.resize(capacity, 0);
        n as u64
    }
}

/// Packs documents pushed one at a time, handing each finished window to a
/// sink in window order.
pub struct Packer {
    opts: PackOptions,
    capacity: usize,
    stats: PackStats,
    /// `concat`: the window being filled (a run of pieces).
    open: Window,
    /// `concat` with labels: whether `open` starts with the last token of the
    /// previous window (shared, so not counted again).
    open_shares_first: bool,
    /// `best_fit`: the group's documents, concatenated, and where each ends.
    group_tokens: Vec<u32>,
    group_train: Vec<u8>,
    group_ends: Vec<usize>,
    /// All ones, for documents without train bits.
    ones: Vec<u8>,
}

impl Packer {
    /// A packer for one split.
    pub fn new(opts: &PackOptions) -> Self {
        let capacity = opts.capacity() as usize;
        Packer {
            opts: opts.clone(),
            capacity,
            stats: PackStats::default(),
            open: Window::new(capacity),
            open_shares_first: false,
            group_tokens: Vec::new(),
            group_train: Vec::new(),
            group_ends: Vec::new(),
            ones: Vec::new(),
        }
    }

    /// Token slots per window.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes one document (its token ids).
    pub fn push<E>(
        &mut self,
        doc: &[u32],
        sink: &mut impl FnMut(&Window) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.ones.len() < doc.len() {
            self.ones.resize(doc.len(), 1);
        }
        let ones = std::mem::take(&mut self.ones);
        let r = self.push_masked(doc, &ones[..doc.len()], sink);
        self.ones = ones;
        r
    }

    /// Takes one document with a train bit per token (1: a loss on
    /// predicting the token may count).
    pub fn push_masked<E>(
        &mut self,
        doc: &[u32],
        train: &[u8],
        sink: &mut impl FnMut(&Window) -> Result<(), E>,
    ) -> Result<(), E> {
        self.stats.documents += 1;
        if doc.is_empty() {
            self.stats.empty_documents += 1;
            return Ok(());
        }
        let (doc, train) = if doc.len() > self.capacity {
            match self.opts.overflow {
                Overflow::Split => {
                    self.stats.split_documents += 1;
                    (doc, train)
                }
                Overflow::Truncate => {
                    self.stats.truncated_documents += 1;
                    self.stats.truncated_tokens += (doc.len() - self.capacity) as u64;
                    (&doc[..self.capacity], &train[..self.capacity])
                }
                Overflow::Drop => {
                    self.stats.dropped_documents += 1;
                    self.stats.truncated_tokens += doc.len() as u64;
                    return Ok(());
                }
            }
        } else {
            (doc, train)
        };
        match self.opts.algorithm {
            Algorithm::Concat => self.concat(doc, train, sink),
            Algorithm::BestFit => {
                self.group_tokens.extend_from_slice(doc);
                self.group_train.extend_from_slice(train);
                self.group_ends.push(self.group_tokens.len());
                if self.group_ends.len() as u64 >= self.opts.group_docs {
                    self.flush_group(sink)?;
                }
                Ok(())
            }
        }
    }

    /// Emits what is left; returns the split's statistics.
    pub fn finish<E>(
        mut self,
        sink: &mut impl FnMut(&Window) -> Result<(), E>,
    ) -> Result<PackStats, E> {
        match self.opts.algorithm {
            Algorithm::Concat => {
                // A lone shared token was already stored as the previous
                // window's last slot: nothing new to emit.
                let only_shared = self.open_shares_first && self.open.tokens.len() == 1;
                if !self.open.tokens.is_empty() && !only_shared {
                    self.stats.padding_tokens += self.open.pad(self.capacity, self.opts.pad_id);
                    self.emit_open(sink)?;
                }
            }
            Algorithm::BestFit => self.flush_group(sink)?,
        }
        Ok(self.stats)
    }

    fn emit_open<E>(&mut self, sink: &mut impl FnMut(&Window) -> Result<(), E>) -> Result<(), E> {
        let real = self.open.segments.iter().filter(|s| **s != 0).count() as u64;
        self.stats.tokens += real - u64::from(self.open_shares_first);
        self.stats.windows += 1;
        sink(&self.open)
    }

    /// `concat`: appends the document to the stream and cuts full windows.
    /// With labels, consecutive windows share one token: the last slot of a
    /// window (a target only) is the first slot of the next (an input).
    fn concat<E>(
        &mut self,
        doc: &[u32],
        train: &[u8],
        sink: &mut impl FnMut(&Window) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut rest = doc;
        let mut rest_train = train;
        // The document's first piece in a window is a new segment; its
        // continuation after a shared token extends that token's segment.
        let mut extend = false;
        while !rest.is_empty() {
            let take = (self.capacity - self.open.tokens.len()).min(rest.len());
            if extend {
                self.extend_last(&rest[..take], &rest_train[..take]);
            } else {
                self.open.put(&rest[..take], &rest_train[..take]);
            }
            rest = &rest[take..];
            rest_train = &rest_train[take..];
            if self.open.tokens.len() == self.capacity {
                self.concat_full(sink)?;
                extend = self.opts.labels;
            } else {
                extend = true;
            }
        }
        Ok(())
    }

    /// Emits a full `open` window and starts the next (shared token carried).
    fn concat_full<E>(&mut self, sink: &mut impl FnMut(&Window) -> Result<(), E>) -> Result<(), E> {
        self.emit_open(sink)?;
        let last = self.open.tokens[self.capacity - 1];
        let last_train = self.open.train[self.capacity - 1];
        self.open.clear();
        self.open_shares_first = false;
        if self.opts.labels {
            self.open.put(&[last], &[last_train]);
            self.open_shares_first = true;
        }
        Ok(())
    }

    /// Extends the last segment of `open` with more of the same document.
    fn extend_last(&mut self, more: &[u32], train: &[u8]) {
        let seg = self.open.segments.last().copied().unwrap_or(1);
        let start = self.open.positions.last().map_or(0, |p| p + 1);
        self.open.train.extend_from_slice(train);
        self.open.tokens.extend_from_slice(more);
        self.open
            .segments
            .extend(std::iter::repeat_n(seg, more.len()));
        self.open.positions.extend(start..start + more.len() as u32);
    }

    /// `best_fit`: packs the buffered group by best-fit decreasing and emits
    /// its windows in the order they were opened.
    fn flush_group<E>(&mut self, sink: &mut impl FnMut(&Window) -> Result<(), E>) -> Result<(), E> {
        if self.group_ends.is_empty() {
            return Ok(());
        }
        let cap = self.capacity;
        // Pieces: (start, len) in document order; a document longer than a
        // window gives full windows and a remainder.
        let mut pieces: Vec<(usize, usize)> = Vec::with_capacity(self.group_ends.len());
        let mut start = 0;
        for &end in &self.group_ends {
            let mut a = start;
            while end - a > cap {
                pieces.push((a, cap));
                a += cap;
            }
            pieces.push((a, end - a));
            start = end;
        }
        // Longest first; ties keep document order (a stable sort).
        let mut by_len: Vec<usize> = (0..pieces.len()).collect();
        by_len.sort_by(|&x, &y| pieces[y].1.cmp(&pieces[x].1));
        // Each window's room and its pieces; open windows by (room, index),
        // so the fullest window that fits is the first with room >= len.
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut room_of: Vec<usize> = Vec::new();
        let mut open: BTreeSet<(usize, usize)> = BTreeSet::new();
        for p in by_len {
            let len = pieces[p].1;
            let fit = open.range((len, 0)..).next().copied();
            let w = match fit {
                Some(key) => {
                    open.remove(&key);
                    key.1
                }
                None => {
                    members.push(Vec::new());
                    room_of.push(cap);
                    members.len() - 1
                }
            };
            members[w].push(p);
            room_of[w] -= len;
            if room_of[w] > 0 {
                open.insert((room_of[w], w));
            }
        }
        let mut win = Window::new(cap);
        for mut ps in members {
            // Within a window, pieces in document order.
            ps.sort_unstable();
            win.clear();
            for p in ps {
                let (a, len) = pieces[p];
                win.put(
                    &self.group_tokens[a..a + len],
                    &self.group_train[a..a + len],
                );
                self.stats.tokens += len as u64;
            }
            self.stats.padding_tokens += win.pad(cap, self.opts.pad_id);
            self.stats.windows += 1;
            sink(&win)?;
        }
        self.group_tokens.clear();
        self.group_train.clear();
        self.group_ends.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(algorithm: Algorithm, length: u32, labels: bool, overflow: Overflow) -> PackOptions {
        PackOptions {
            field: "tokens".into(),
            length,
            algorithm,
            labels,
            overflow,
            group_docs: 1000,
            pad_id: 0,
        }
    }

    fn pack(o: &PackOptions, docs: &[Vec<u32>]) -> (Vec<Window>, PackStats) {
        let mut p = Packer::new(o);
        let mut out = Vec::new();
        let mut sink = |w: &Window| -> Result<(), ()> {
            out.push(w.clone());
            Ok(())
        };
        for d in docs {
            p.push(d, &mut sink).expect("push");
        }
        let stats = p.finish(&mut sink).expect("finish");
        (out, stats)
    }

    /// Documents of varied lengths, tokens numbered so each is unique.
    fn docs(lens: &[usize]) -> Vec<Vec<u32>> {
        let mut next = 1u32;
        lens.iter()
            .map(|&n| {
                let d: Vec<u32> = (next..next + n as u32).collect();
                next += n as u32;
                d
            })
            .collect()
    }

    /// The input positions of a window: all slots, or all but the last with labels.
    fn inputs(w: &Window, labels: bool) -> usize {
        w.tokens.len() - usize::from(labels)
    }

    #[test]
    fn concat_without_labels_cuts_the_stream_and_pads_the_last_window() {
        let o = opts(Algorithm::Concat, 4, false, Overflow::Split);
        let d = docs(&[3, 6, 1]);
        let (w, s) = pack(&o, &d);
        let stream: Vec<u32> = d.concat();
        let got: Vec<u32> = w
            .iter()
            .flat_map(|w| {
                w.tokens
                    .iter()
                    .zip(&w.segments)
                    .filter(|(_, s)| **s != 0)
                    .map(|(t, _)| *t)
            })
            .collect();
        assert_eq!(got, stream);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].segments, vec![1, 1, 1, 2]);
        assert_eq!(w[0].positions, vec![0, 1, 2, 0]);
        assert_eq!(w[1].segments, vec![1, 1, 1, 1]);
        assert_eq!(w[1].positions, vec![0, 1, 2, 3]);
        assert_eq!(w[2].segments, vec![1, 2, 0, 0]);
        assert_eq!(w[2].positions, vec![0, 0, 0, 0]);
        assert_eq!(s.tokens, 10);
        assert_eq!(s.padding_tokens, 2);
        assert_eq!(s.windows, 3);
        assert_eq!(s.split_documents, 1);
    }

    #[test]
    fn concat_with_labels_shares_one_token_between_windows() {
        // length 4 with labels: 5 slots; window k holds stream[4k..4k+5].
        let o = opts(Algorithm::Concat, 4, true, Overflow::Split);
        let d = docs(&[3, 6, 4]); // 13 tokens
        let (w, s) = pack(&o, &d);
        let stream: Vec<u32> = d.concat();
        for (k, win) in w.iter().enumerate() {
            let real: Vec<u32> = win
                .tokens
                .iter()
                .zip(&win.segments)
                .filter(|(_, s)| **s != 0)
                .map(|(t, _)| *t)
                .collect();
            let lo = 4 * k;
            let hi = (lo + 5).min(stream.len());
            assert_eq!(real, stream[lo..hi].to_vec(), "window {k}");
        }
        // 13 tokens: windows start at 0, 4, 8, 12; the one at 12 has 1 real
        // token, which window 2 already holds as its target.
        assert_eq!(w.len(), 3);
        assert_eq!(s.tokens, 13);
        // Every input slot's token, over all windows, is the stream minus its last.
        let inputs_all: Vec<u32> = w
            .iter()
            .flat_map(|win| win.tokens[..inputs(win, true)].to_vec())
            .zip(w.iter().flat_map(|win| win.segments[..4].to_vec()))
            .filter(|(_, s)| *s != 0)
            .map(|(t, _)| t)
            .collect();
        assert_eq!(inputs_all, stream[..12].to_vec());
        // A document continuing over a window boundary keeps its segment,
        // and positions restart at the window.
        assert_eq!(w[1].segments, vec![1, 1, 1, 1, 1]);
        assert_eq!(w[1].positions, vec![0, 1, 2, 3, 4]);
        assert_eq!(w[2].segments, vec![1, 2, 2, 2, 2]);
    }

    #[test]
    fn concat_with_labels_emits_a_final_window_with_two_or_more_tokens() {
        let o = opts(Algorithm::Concat, 4, true, Overflow::Split);
        let (w, s) = pack(&o, &docs(&[6]));
        // Windows at 0 (tokens 1..=5) and 4 (tokens 5, 6 + pad).
        assert_eq!(w.len(), 2);
        assert_eq!(w[1].tokens, vec![5, 6, 0, 0, 0]);
        assert_eq!(w[1].segments, vec![1, 1, 0, 0, 0]);
        assert_eq!(s.tokens, 6);
        assert_eq!(s.padding_tokens, 3);
    }

    #[test]
    fn best_fit_keeps_documents_whole_and_fills_windows() {
        let o = opts(Algorithm::BestFit, 10, false, Overflow::Split);
        let d = docs(&[6, 4, 5, 5, 3, 7, 2, 8]);
        let (w, s) = pack(&o, &d);
        // 40 tokens in windows of 10: a perfect fit exists and BFD finds it.
        assert_eq!(s.windows, 4);
        assert_eq!(s.padding_tokens, 0);
        assert_eq!(s.split_documents, 0);
        let mut seen: Vec<u32> = Vec::new();
        for win in &w {
            // Each segment is one whole document, in document order.
            let mut segs: Vec<Vec<u32>> = Vec::new();
            for (t, sg) in win.tokens.iter().zip(&win.segments) {
                if *sg == 0 {
                    continue;
                }
                if segs.len() < *sg as usize {
                    segs.push(Vec::new());
                }
                segs[*sg as usize - 1].push(*t);
            }
            for seg in segs {
                assert!(d.contains(&seg), "{seg:?} is not a whole document");
                seen.extend(seg);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, d.concat());
    }

    #[test]
    fn best_fit_splits_only_documents_longer_than_a_window() {
        let o = opts(Algorithm::BestFit, 4, false, Overflow::Split);
        let (w, s) = pack(&o, &docs(&[9, 2, 3]));
        assert_eq!(s.split_documents, 1);
        // 9 -> 4 + 4 + 1; then 3 + 1 and 2: four windows.
        assert_eq!(s.windows, 4);
        assert_eq!(s.tokens, 14);
        assert_eq!(s.padding_tokens, 2);
        assert_eq!(w[0].tokens, vec![1, 2, 3, 4]);
    }

    #[test]
    fn overflow_truncate_and_drop_are_counted() {
        for alg in [Algorithm::Concat, Algorithm::BestFit] {
            let t = opts(alg, 4, false, Overflow::Truncate);
            let (_, s) = pack(&t, &docs(&[7, 2]));
            assert_eq!(
                (s.truncated_documents, s.truncated_tokens, s.tokens),
                (1, 3, 6)
            );
            let d = opts(alg, 4, false, Overflow::Drop);
            let (_, s) = pack(&d, &docs(&[7, 2, 0]));
            assert_eq!(
                (s.dropped_documents, s.truncated_tokens, s.tokens),
                (1, 7, 2)
            );
            assert_eq!((s.documents, s.empty_documents), (3, 1));
        }
    }

    #[test]
    fn best_fit_groups_depend_on_the_document_sequence_only() {
        // The same documents give the same windows whatever the pushes are
        // interleaved with (there is nothing else): a group holds group_docs
        // documents, and a smaller group size changes the windows.
        let lens: Vec<usize> = (0..50).map(|i| 1 + (i * 7919) % 9).collect();
        let d = docs(&lens);
        let mut o = opts(Algorithm::BestFit, 10, true, Overflow::Split);
        o.group_docs = 20;
        let (a, sa) = pack(&o, &d);
        let (b, sb) = pack(&o, &d);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        o.group_docs = 50;
        let (c, sc) = pack(&o, &d);
        assert!(sc.windows <= sa.windows);
        assert_eq!(sc.tokens, sa.tokens);
        assert_ne!(a, c);
    }
}
