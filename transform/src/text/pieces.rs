//! Each thread's memory of the ids of pieces it has encoded.
//!
//! Most pieces are words of a few bytes with one to three ids: those are
//! kept by value (the piece's bytes as one integer key, the ids inline),
//! so a lookup hashes sixteen bytes and compares two integers, with no
//! string to follow and compare. Longer pieces, and short ones with more
//! ids, are kept as strings.

use rustc_hash::FxHashMap;

/// The longest piece kept by value, in bytes (the key's last byte holds
/// the length).
const SHORT_BYTES: usize = 15;

/// The most ids kept inline.
const SHORT_IDS: usize = 3;

#[derive(Clone, Copy)]
struct Short {
    len: u32,
    ids: [u32; SHORT_IDS],
}

/// Pieces and their ids.
#[derive(Default)]
pub(super) struct PieceCache {
    short: FxHashMap<u128, Short>,
    long: FxHashMap<Box<str>, Box<[u32]>>,
    /// Short pieces kept in `long` (more than [`SHORT_IDS`] ids): while
    /// there are none, a short piece missing from `short` is not looked for
    /// there.
    short_in_long: usize,
}

impl PieceCache {
    /// The ids of `piece`, if it has been seen.
    pub(super) fn get(&self, piece: &str) -> Option<&[u32]> {
        if let Some(key) = short_key(piece) {
            if let Some(s) = self.short.get(&key) {
                return Some(&s.ids[..s.len as usize]);
            }
            if self.short_in_long == 0 {
                return None;
            }
        }
        self.long.get(piece).map(|ids| &ids[..])
    }

    /// Remembers the ids of `piece`.
    pub(super) fn insert(&mut self, piece: &str, ids: &[u32]) {
        if let Some(key) = short_key(piece) {
            if ids.len() <= SHORT_IDS {
                let mut s = Short {
                    len: ids.len() as u32,
                    ids: [0; SHORT_IDS],
                };
                s.ids[..ids.len()].copy_from_slice(ids);
                self.short.insert(key, s);
                return;
            }
            self.short_in_long += 1;
        }
        self.long.insert(piece.into(), ids.into());
    }

    /// How many pieces are kept.
    pub(super) fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    /// Forgets every piece.
    pub(super) fn clear(&mut self) {
        self.short.clear();
        self.long.clear();
        self.short_in_long = 0;
    }
}

/// A piece of at most [`SHORT_BYTES`] bytes as one integer: its bytes, then
/// zeros, then its length (so pieces that differ only by trailing zero
/// bytes differ).
fn short_key(piece: &str) -> Option<u128> {
    let bytes = piece.as_bytes();
    if bytes.len() > SHORT_BYTES {
        return None;
    }
    let mut key = [0u8; 16];
    key[..bytes.len()].copy_from_slice(bytes);
    key[SHORT_BYTES] = bytes.len() as u8;
    Some(u128::from_le_bytes(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_every_size_and_id_count_are_remembered_apart() {
        let mut cache = PieceCache::default();
        // Pieces that differ only in length or by a trailing NUL, at the
        // edges of the short form, with up to five ids.
        let pieces = [
            "",
            "a",
            "a\0",
            "\0",
            "ab",
            "abcdefghijklmno",
            "abcdefghijklmnop",
            "é",
            "東京",
            "abcdefghijklmn\0",
        ];
        for (i, p) in pieces.iter().enumerate() {
            assert_eq!(cache.get(p), None, "{p:?} before it is inserted");
            let ids: Vec<u32> = (0..(i % 6) as u32).map(|k| k * 100 + i as u32).collect();
            cache.insert(p, &ids);
        }
        assert_eq!(cache.len(), pieces.len());
        for (i, p) in pieces.iter().enumerate() {
            let want: Vec<u32> = (0..(i % 6) as u32).map(|k| k * 100 + i as u32).collect();
            assert_eq!(cache.get(p), Some(&want[..]), "{p:?}");
        }
        assert_eq!(cache.get("abcdefghijklmnopq"), None);
        assert_eq!(cache.get("b"), None);
        cache.clear();
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.get("a"), None);
    }
}
