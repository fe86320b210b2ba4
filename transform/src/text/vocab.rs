//! A BPE model's vocabulary and merges read without a string per token.
//!
//! The library's model wants its vocabulary as a map of owned strings and
//! its merges as pairs of owned strings: for a 128,000-token file, over
//! 400,000 allocations and a map of strings hashed twice, half of reading
//! the file. When [`super::bpe::ByteMerges`] does the merging, what is
//! needed is less: a token's id by its text (exact), and each merge's
//! tokens. Here the tokens' texts go into one string with an index by
//! [`token_hash`], and each merge is kept as the hashes of its two parts
//! and of the merged token.

use std::fmt;

use rustc_hash::FxHashMap;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::bpe::{HASH_START, token_hash};

/// Tokens and their ids, the texts in one string.
#[derive(Default)]
pub(super) struct TokenTable {
    text: String,
    /// Per distinct token: where its text is in `text`.
    entries: Vec<(u32, u32)>,
    /// [`token_hash`] of a token's text to its entry (high half) and id
    /// (low half): a lookup by hash reads no entry.
    index: FxHashMap<u64, u64>,
    /// Two distinct tokens with one hash: the table cannot answer.
    pub(super) clash: bool,
}

impl TokenTable {
    /// Adds a token; a token already there takes the new id (as a map
    /// read from JSON keeps a repeated key's last value).
    fn insert(&mut self, token: &str, id: u32) {
        use std::collections::hash_map::Entry;
        let (Ok(start), Ok(len)) = (u32::try_from(self.text.len()), u32::try_from(token.len()))
        else {
            self.clash = true;
            return;
        };
        match self.index.entry(token_hash(HASH_START, token.as_bytes())) {
            Entry::Occupied(mut e) => {
                let at = *e.get() >> 32;
                if text_at(&self.text, &self.entries, at) == token {
                    e.insert((at << 32) | u64::from(id));
                } else {
                    self.clash = true;
                }
            }
            Entry::Vacant(v) => {
                v.insert(((self.entries.len() as u64) << 32) | u64::from(id));
                self.entries.push((start, len));
                self.text.push_str(token);
            }
        }
    }

    /// The id of `token`.
    pub(super) fn get(&self, token: &str) -> Option<u32> {
        let v = *self.index.get(&token_hash(HASH_START, token.as_bytes()))?;
        // The high half is the entry, the low half the id.
        (self.text_of(v >> 32) == token).then_some(v as u32)
    }

    /// The id of the token whose [`token_hash`] is `hash`. Exact for the
    /// hash of a token in the table (the table has no clash); for another
    /// text it may answer a token that shares its hash.
    pub(super) fn by_hash(&self, hash: u64) -> Option<u32> {
        // The low half is the id.
        self.index.get(&hash).map(|&v| v as u32)
    }

    fn text_of(&self, entry: u64) -> &str {
        text_at(&self.text, &self.entries, entry)
    }

    /// How many distinct tokens.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every token and its id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.index
            .values()
            .map(|&v| (self.text_of(v >> 32), v as u32))
    }

    /// The largest id.
    pub(super) fn max_id(&self) -> Option<u32> {
        self.index.values().map(|&v| v as u32).max()
    }
}

/// The text of `entry` of `entries` in `text`.
fn text_at<'a>(text: &'a str, entries: &[(u32, u32)], entry: u64) -> &'a str {
    let (start, len) = entries[entry as usize];
    &text[start as usize..][..len as usize]
}

/// Reads a `vocab` object into a [`TokenTable`].
pub(super) struct TableVisitor;

impl<'de> Visitor<'de> for TableVisitor {
    type Value = TokenTable;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a vocabulary of tokens and ids")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TokenTable, A::Error> {
        let mut table = TokenTable::default();
        let mut key = String::new();
        while map.next_key_seed(StrInto(&mut key))?.is_some() {
            let id: u32 = map.next_value()?;
            table.insert(&key, id);
        }
        Ok(table)
    }
}

/// Reads a string into a reused buffer.
struct StrInto<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for StrInto<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for StrInto<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(s);
        Ok(())
    }
}

/// Reads `merges` (either of the library's forms, as
/// [`super::load`]'s string reading accepts them) as the hashes of each
/// merge's parts and merged token.
pub(super) struct HashedMergesVisitor;

impl<'de> Visitor<'de> for HashedMergesVisitor {
    type Value = Vec<[u64; 3]>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of merges")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<[u64; 3]>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut legacy = None;
        let mut line = String::new();
        while let Some(form) = seq.next_element_seed(MergeSeed(&mut line))? {
            let (is_legacy, hashes) = form;
            if *legacy.get_or_insert(is_legacy) != is_legacy {
                return Err(A::Error::custom("merges of both forms"));
            }
            out.extend(hashes);
        }
        Ok(out)
    }
}

fn merge_hashes(a: &str, b: &str) -> [u64; 3] {
    let left = token_hash(HASH_START, a.as_bytes());
    [
        left,
        token_hash(HASH_START, b.as_bytes()),
        token_hash(left, b.as_bytes()),
    ]
}

/// One merge: whether it is a legacy line, and its hashes (none for a
/// `#version` line).
struct MergeSeed<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for MergeSeed<'_> {
    type Value = (bool, Option<[u64; 3]>);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MergeSeed<'_> {
    type Value = (bool, Option<[u64; 3]>);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a merge")
    }

    fn visit_str<E: serde::de::Error>(self, line: &str) -> Result<Self::Value, E> {
        if line.starts_with("#version") {
            return Ok((true, None));
        }
        let mut parts = line.split(' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), None) => Ok((true, Some(merge_hashes(a, b)))),
            _ => Err(E::custom("a merge line without exactly two parts")),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut a = String::new();
        if seq.next_element_seed(StrInto(&mut a))?.is_none() {
            return Err(A::Error::custom("a merge pair without parts"));
        }
        if seq.next_element_seed(StrInto(self.0))?.is_none() {
            return Err(A::Error::custom("a merge pair of one part"));
        }
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(A::Error::custom("a merge of more than two parts"));
        }
        Ok((false, Some(merge_hashes(&a, self.0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_answers_as_the_map_of_the_same_json() {
        let json = r#"{"a":0,"ab":1,"Ġthe":2,"a":3,"":4,"東京":5}"#;
        use serde::Deserializer as _;
        let table = (&mut serde_json::Deserializer::from_str(json))
            .deserialize_map(TableVisitor)
            .expect("a vocabulary");
        let map: std::collections::HashMap<String, u32> =
            serde_json::from_str(json).expect("a map");
        assert!(!table.clash);
        assert_eq!(table.len(), map.len());
        for (token, id) in &map {
            assert_eq!(table.get(token), Some(*id), "{token:?}");
            assert_eq!(
                table.by_hash(token_hash(HASH_START, token.as_bytes())),
                Some(*id)
            );
        }
        let mut all: Vec<(String, u32)> = table.iter().map(|(t, id)| (t.to_string(), id)).collect();
        all.sort();
        let mut want: Vec<(String, u32)> = map.into_iter().collect();
        want.sort();
        assert_eq!(all, want);
        assert_eq!(table.get("b"), None);
        assert_eq!(table.get("the"), None);
    }

    #[test]
    fn merges_of_both_forms_hash_alike_and_bad_ones_are_errors() {
        use serde::Deserializer as _;
        let hashes = |json: &str| {
            (&mut serde_json::Deserializer::from_str(json))
                .deserialize_seq(HashedMergesVisitor)
                .map_err(|e| e.to_string())
        };
        let legacy = hashes(r##"["#version: 0.2","a b","ab c"]"##).expect("legacy");
        let pairs = hashes(r#"[["a","b"],["ab","c"]]"#).expect("pairs");
        assert_eq!(legacy, pairs);
        assert_eq!(legacy[0], merge_hashes("a", "b"));
        // The merged token's hash is the hash of the joined text.
        assert_eq!(legacy[1][2], token_hash(HASH_START, b"abc"));
        for bad in [
            r#"["a b",["a","b"]]"#,
            r#"["a b c"]"#,
            r#"[["a"]]"#,
            r#"[["a","b","c"]]"#,
        ] {
            assert!(hashes(bad).is_err(), "{bad}");
        }
    }
}
