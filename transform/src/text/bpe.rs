//! Byte-level BPE merging done here, for the pieces the direct
//! pre-tokenizer path hands over (raw bytes, each standing for its own
//! byte-level character).
//!
//! The library's model turns a piece into one `String` per character to
//! look each up in its vocabulary, merges through a heap, then builds a
//! token (another `String`) for every id; for a piece seen for the first
//! time that is most of the cost. Here a byte's token is a table lookup and
//! the merging is the plain loop: while some adjacent pair has a merge,
//! merge the pair of lowest rank, the leftmost one among equals. That is
//! the library's order: its heap pops the lowest (rank, position), and a
//! rank names one pair, so equal ranks are the same pair at several places.
//!
//! A piece longer than [`MAX_PIECE`] is merged through a heap ordered by
//! (rank, position), as the library merges. A piece that the library would
//! treat another way (a byte whose character is not in the vocabulary:
//! unknown token or byte fallback) is left to the library.

use rustc_hash::FxHashMap;

/// No token or no merge.
const NONE: u32 = u32::MAX;

/// The longest piece merged by the plain loop, in bytes. Longer ones (long
/// runs of spaces or of one character, which the split patterns keep
/// whole) take the heap, since the loop is quadratic.
const MAX_PIECE: usize = 128;

/// A byte-level BPE model's merges, in the form the loop wants.
pub(super) struct ByteMerges {
    /// Each byte's own token: the vocabulary's id of its byte-level
    /// character, or [`NONE`].
    byte_ids: [u32; 256],
    /// `(left << 32) | right` to `(rank << 32) | merged`: comparing two
    /// values compares ranks.
    merges: FxHashMap<u64, u64>,
    /// The model's `ignore_merges`: a piece that is a token of the
    /// vocabulary is that token, merges or not (the caller looks it up).
    pub(super) ignore_merges: bool,
}

impl ByteMerges {
    /// The merges of a model, from its vocabulary (no two tokens with one
    /// hash) and its merges as the [`token_hash`]es of their two parts and
    /// of the merged token, in rank order. `None` when a merge names a
    /// token that is not there (the library's build reports that; a text
    /// that is not a token but shares a token's hash would pass, one chance
    /// in 2^64 / 128,000 per lookup). Each byte's token is the table's id
    /// of its byte-level character.
    pub(super) fn new(
        table: &super::vocab::TokenTable,
        merges: &[[u64; 3]],
        ignore_merges: bool,
    ) -> Option<ByteMerges> {
        let mut map = FxHashMap::with_capacity_and_hasher(merges.len(), Default::default());
        for (rank, [a, b, joined]) in merges.iter().enumerate() {
            let (left, right) = (table.by_hash(*a)?, table.by_hash(*b)?);
            let merged = table.by_hash(*joined)?;
            let rank = u32::try_from(rank).ok()?;
            // As the library's map is collected: a pair listed twice keeps
            // its last rank.
            map.insert(
                pair_key(left, right),
                (u64::from(rank) << 32) | u64::from(merged),
            );
        }
        let mut byte_ids = [NONE; 256];
        for (id, c) in byte_ids.iter_mut().zip(crate::pretok::byte_chars()) {
            *id = table.get(c.encode_utf8(&mut [0u8; 4])).unwrap_or(NONE);
        }
        Some(ByteMerges {
            byte_ids,
            merges: map,
            ignore_merges,
        })
    }

    /// Appends the ids of `piece` (raw bytes) to `out`, or returns `false`
    /// and appends nothing when the piece is left to the library.
    pub(super) fn encode(&self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        let n = piece.len();
        if n > MAX_PIECE {
            return self.encode_long(piece, out);
        }
        let mut ids = [NONE; MAX_PIECE];
        for (id, &b) in ids.iter_mut().zip(piece) {
            *id = self.byte_ids[usize::from(b)];
            if *id == NONE {
                return false;
            }
        }
        // ranks[i]: the merge of ids[i] and ids[i + 1].
        let mut ranks = [u64::MAX; MAX_PIECE];
        let mut len = n;
        for i in 0..len.saturating_sub(1) {
            ranks[i] = self.merge(ids[i], ids[i + 1]);
        }
        while len > 1 {
            let (mut at, mut best) = (0, u64::MAX);
            for (i, &r) in ranks[..len - 1].iter().enumerate() {
                if r < best {
                    (at, best) = (i, r);
                }
            }
            if best == u64::MAX {
                break;
            }
            // The low half is the merged token's id.
            ids[at] = best as u32;
            ids.copy_within(at + 2..len, at + 1);
            ranks.copy_within(at + 1..len - 1, at);
            len -= 1;
            if at + 1 < len {
                ranks[at] = self.merge(ids[at], ids[at + 1]);
            }
            if at > 0 {
                ranks[at - 1] = self.merge(ids[at - 1], ids[at]);
            }
        }
        out.extend_from_slice(&ids[..len]);
        true
    }

    /// [`ByteMerges::encode`] for a long piece: the pairs in a heap ordered
    /// by (rank, position), the symbols in a linked list. An entry whose
    /// pair has changed since it was pushed is stale and skipped (the two
    /// symbols at a position only grow, so a changed pair is another
    /// merge).
    fn encode_long(&self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        use std::cmp::Reverse;
        let n = piece.len();
        let mut ids = Vec::with_capacity(n);
        for &b in piece {
            let id = self.byte_ids[usize::from(b)];
            if id == NONE {
                return false;
            }
            ids.push(id);
        }
        // next[i] == n: the last symbol; prev[i] == usize::MAX: the first.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = std::collections::BinaryHeap::with_capacity(n);
        for i in 0..n.saturating_sub(1) {
            let m = self.merge(ids[i], ids[i + 1]);
            if m != u64::MAX {
                heap.push(Reverse((m, i)));
            }
        }
        while let Some(Reverse((m, i))) = heap.pop() {
            let j = next[i];
            if !alive[i] || j >= n || self.merge(ids[i], ids[j]) != m {
                continue;
            }
            // The low half is the merged token's id.
            ids[i] = m as u32;
            alive[j] = false;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            let p = prev[i];
            if p != usize::MAX {
                let pm = self.merge(ids[p], ids[i]);
                if pm != u64::MAX {
                    heap.push(Reverse((pm, p)));
                }
            }
            if next[i] < n {
                let nm = self.merge(ids[i], ids[next[i]]);
                if nm != u64::MAX {
                    heap.push(Reverse((nm, i)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(ids[i]);
            i = next[i];
        }
        true
    }

    /// The merge of `left` then `right`, or `u64::MAX`.
    fn merge(&self, left: u32, right: u32) -> u64 {
        self.merges
            .get(&pair_key(left, right))
            .copied()
            .unwrap_or(u64::MAX)
    }
}

/// FNV-1a over `bytes`, continuing from `seed` ([`HASH_START`] for a
/// whole string): the hash of `a` then `b` is the hash of their
/// concatenation, so a merged token's hash needs no joined copy.
pub(super) fn token_hash(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Where [`token_hash`] starts.
pub(super) const HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

#[cfg(test)]
mod tests {
    use super::super::{Inner, load, merge_into, model_ids};
    use crate::pretok::{Searchers, map_bytes, split_pieces};

    /// The library model's ids for a raw piece, and ours (`None`: left to
    /// the library).
    fn both(
        inner: &Inner,
        merges: &super::ByteMerges,
        piece: &str,
    ) -> (Vec<u32>, Option<Vec<u32>>) {
        let mut mapped = String::new();
        let mut ours = Vec::new();
        let ours = merge_into(inner, merges, piece, &mut mapped, &mut ours).then_some(ours);
        map_bytes(piece, &mut mapped);
        (model_ids(inner, &mapped).expect("the library's ids"), ours)
    }

    fn parsed(bytes: &[u8]) -> (Inner, super::ByteMerges) {
        let parsed = load::fast(bytes).unwrap_or_else(|e| panic!("the fast parse: {e}"));
        let merges = parsed
            .merges
            .expect("a plain byte-level model has merges here");
        (parsed.inner, merges)
    }

    /// Pairs that overlap, a token reached by two merges, a merge listed
    /// twice, a byte outside the vocabulary, and `ignore_merges`.
    #[test]
    fn merging_gives_the_librarys_ids_on_the_hard_cases() {
        // "Ġ" is the space byte's character.
        let vocab = r#"{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"bc":5,"abc":6,"aa":7,"aaa":8,"aaaa":9,"Ġa":10,"cab":11,"ca":12,"<unk>":13}"#;
        let merges = r#""b c","a b","a a","ab c","a bc","aa a","aa aa","Ġ a","c a","a b""#;
        for ignore in [false, true] {
            let file = format!(
                r#"{{"version":"1.0","model":{{"type":"BPE","unk_token":"<unk>","ignore_merges":{ignore},"vocab":{vocab},"merges":[{merges}]}}}}"#
            );
            let (inner, merges) = parsed(file.as_bytes());
            let mut handled = 0;
            for piece in [
                "a", "ab", "abc", "bca", "aaaaa", "aaaaaaa", "abcabc", "aabbcc", "cab", "cabab",
                " a", " aaa", "ca", "cccc", "bcbc", "abz", "zz", "é",
            ] {
                let (lib, ours) = both(&inner, &merges, piece);
                if let Some(ours) = ours {
                    assert_eq!(ours, lib, "ignore_merges {ignore}: {piece:?}");
                    handled += 1;
                } else {
                    // Only a byte without its own token is left to the
                    // library (its unknown token).
                    assert!(
                        piece.contains('z') || !piece.is_ascii(),
                        "{piece:?} was left to the library"
                    );
                }
            }
            assert_eq!(handled, 15, "ignore_merges {ignore}");
            // With ignore_merges a piece that is a token is that token,
            // though the merges would give c + ab.
            let (lib, ours) = both(&inner, &merges, "cab");
            assert_eq!(ours.as_ref(), Some(&lib));
            assert_eq!(lib, if ignore { vec![11] } else { vec![12, 1] });
            // Past the plain loop's limit: the heap, with long runs of one
            // pair.
            for piece in [
                "a".repeat(300),
                "abc".repeat(60),
                format!("{}c", "ab".repeat(100)),
            ] {
                let (lib, ours) = both(&inner, &merges, &piece);
                assert_eq!(ours.as_ref(), Some(&lib), "{} bytes", piece.len());
            }
        }
        // A token listed twice keeps its last id, as in the library's map.
        let twice = r#"{"version":"1.0","model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"a":3},"merges":["a b"]}}"#;
        let (inner, merges) = parsed(twice.as_bytes());
        assert!(matches!(
            inner.get_model(),
            super::super::model::Model::Lazy(_)
        ));
        for piece in ["a", "ab", "ba", "aab"] {
            let (lib, ours) = both(&inner, &merges, piece);
            assert_eq!(ours.as_ref(), Some(&lib), "{piece:?}");
        }
        assert_eq!(both(&inner, &merges, "a").0, vec![3]);
    }

    /// Every piece of real text (this crate's sources and docs, split by
    /// the file's own patterns) and random strings of every length up to
    /// past the longest merged here, on the DeepSeek-V3 and Claude files.
    #[test]
    fn merging_gives_the_librarys_ids_on_real_files() {
        let texts = [
            include_str!("../pretok.rs"),
            include_str!("mod.rs"),
            include_str!("../../../docs/SPEC.md"),
            "東京は日本の首都です。😀👩‍💻 Ünïcödé   \t\n\n  x",
        ];
        // Long runs that the split patterns keep whole, past the plain
        // loop's limit: the heap's ties between equal pairs.
        let runs: Vec<String> = [" ", "\n", "a", "=-", "ab"]
            .iter()
            .flat_map(|s| [129, 257, 1000].map(|n| s.repeat(n)))
            .collect();
        let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
        let mut random = Vec::new();
        let lengths = (1..=super::MAX_PIECE + 8).chain([300, 1000, 5000]);
        for len in lengths {
            for _ in 0..4 {
                let s: String = (0..len)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        // Mostly a few ASCII letters (long merges), some
                        // spaces, and characters of 2 to 4 bytes.
                        match rng % 16 {
                            0 => ' ',
                            1 => 'é',
                            2 => '語',
                            3 => '🙂',
                            r => char::from(b'a' + (r % 5) as u8),
                        }
                    })
                    .collect();
                random.push(s);
            }
        }
        for name in ["deepseek_tokenizer.json", "anthropic_tokenizer.json"] {
            let (inner, merges) = parsed(&super::super::tests::litellm_tokenizer(name));
            let patterns = inner
                .get_pre_tokenizer()
                .and_then(|p| p.direct())
                .unwrap_or_else(|| panic!("{name} takes the direct path"));
            let mut searchers = Searchers::new(patterns);
            let mut pieces = Vec::new();
            let (mut handled, mut total) = (0, 0);
            for text in texts
                .iter()
                .copied()
                .chain(random.iter().chain(&runs).map(String::as_str))
            {
                split_pieces(patterns, &mut searchers, text, &mut pieces);
                for piece in pieces.iter().copied().chain([text]) {
                    let (lib, ours) = both(&inner, &merges, piece);
                    total += 1;
                    if let Some(ours) = ours {
                        assert_eq!(ours, lib, "{name}: {piece:?}");
                        handled += 1;
                    } else {
                        panic!("{name}: {piece:?} left to the library");
                    }
                }
            }
            assert_eq!(handled, total, "{name}");
        }
    }
}
