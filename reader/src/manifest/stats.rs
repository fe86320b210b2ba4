//! The manifest's `stats` section, typed: the frozen transform statistics,
//! a list of [`StatsEntry`] per field (one per stacked column), and the
//! files that hold long vocabularies (docs/FORMAT.md, 3.7).
//! [`Manifest::stats_of`](super::Manifest::stats_of) reads them.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// Vocabularies longer than this go to a file of their own beside the
/// shards (docs/FORMAT.md, 3.7), so the manifest stays small.
pub const VOCAB_INLINE: usize = 4096;

/// One frozen statistic (`stats.FIELD[slot]`), tagged by `kind`.
///
/// `V` is how a vocabulary is held: as the manifest stores it
/// ([`VocabEntry`], inline or in a file of the set), or in memory
/// ([`InlineVocab`], what a transform applies; [`StatsEntry::into_inline`]
/// gets there from an inline entry). Both serialize the same way.
///
/// Floats travel as JSON numbers; serde_json reads them back to the same
/// bits because the workspace builds it with `float_roundtrip` (the tests
/// below and `tests/json_floats.rs` check it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatsEntry<V = VocabEntry> {
    /// For `standardize`: `(x - mean) / std`.
    Standardize {
        /// Mean over the statistics split.
        mean: f64,
        /// Population standard deviation.
        std: f64,
        /// Values the statistics were computed over.
        count: u64,
    },
    /// For `min_max`: `(x - min) / (max - min)`.
    MinMax {
        /// Smallest value.
        min: f64,
        /// Largest value.
        max: f64,
        /// Values the statistics were computed over.
        count: u64,
    },
    /// For `vocab`: the values in id order.
    Vocab(V),
}

/// A vocabulary in memory: the values in id order with their counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InlineVocab {
    /// Values in id order (id = position + 1).
    pub values: Vec<String>,
    /// Occurrences of each value in the statistics split.
    pub counts: Vec<u64>,
    /// Id given to values not in the vocabulary.
    pub oov: i64,
}

/// A frozen vocabulary as the manifest stores it: inline, or (more than
/// [`VOCAB_INLINE`] values) in a file of the set (docs/FORMAT.md, 3.7). An
/// entry with a `file` key is the second kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum VocabEntry {
    /// The values and their counts in the manifest.
    Inline(InlineVocab),
    /// The values in `file`, one `[value, count]` JSON array per line in id
    /// order ([`vocab_line`]).
    File {
        /// File name, listed in the manifest's `files`.
        file: String,
        /// Values in the file.
        size: u64,
        /// Id given to values not in the vocabulary.
        oov: i64,
    },
}

impl<'de> Deserialize<'de> for VocabEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct File {
            file: String,
            size: u64,
            #[serde(default)]
            oov: i64,
        }
        // Chosen by the `file` key, so that errors name the missing key.
        let v = serde_json::Value::deserialize(d)?;
        if v.get("file").is_some() {
            let f: File = serde_json::from_value(v).map_err(D::Error::custom)?;
            Ok(VocabEntry::File {
                file: f.file,
                size: f.size,
                oov: f.oov,
            })
        } else {
            serde_json::from_value(v)
                .map(VocabEntry::Inline)
                .map_err(D::Error::custom)
        }
    }
}

impl<V> StatsEntry<V> {
    /// The same statistic with its vocabulary (if any) held another way.
    pub fn map_vocab<W, E>(
        self,
        f: impl FnOnce(V) -> std::result::Result<W, E>,
    ) -> std::result::Result<StatsEntry<W>, E> {
        Ok(match self {
            StatsEntry::Standardize { mean, std, count } => {
                StatsEntry::Standardize { mean, std, count }
            }
            StatsEntry::MinMax { min, max, count } => StatsEntry::MinMax { min, max, count },
            StatsEntry::Vocab(v) => StatsEntry::Vocab(f(v)?),
        })
    }
}

impl StatsEntry {
    /// The statistic with its vocabulary in memory; an error (naming the
    /// file) for a vocabulary kept in a file of the set, which must be read
    /// from there first.
    pub fn into_inline(self) -> std::result::Result<StatsEntry<InlineVocab>, String> {
        self.map_vocab(|v| match v {
            VocabEntry::Inline(v) => Ok(v),
            VocabEntry::File { file, .. } => Err(format!(
                "the vocabulary is in {file}, a file of the set; it must be read from there"
            )),
        })
    }
}

impl From<StatsEntry<InlineVocab>> for StatsEntry {
    fn from(s: StatsEntry<InlineVocab>) -> Self {
        match s.map_vocab(|v| Ok::<_, std::convert::Infallible>(VocabEntry::Inline(v))) {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }
}

/// The name of the file holding the vocabulary of `field`'s slot `slot`.
pub fn vocab_file_name(field: &str, slot: usize) -> String {
    format!("vocab-{field}-{slot}.jsonl")
}

/// One line of a vocabulary file: `["value",count]` and a newline.
pub fn vocab_line(value: &str, count: u64) -> Vec<u8> {
    // Serializing a string and an integer cannot fail.
    let mut line = serde_json::to_vec(&(value, count)).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Parses one line of a vocabulary file (without its newline).
pub fn parse_vocab_line(line: &str) -> std::result::Result<(String, u64), serde_json::Error> {
    serde_json::from_str(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inline_vocabulary_in_memory_writes_the_manifest_entry() {
        let vocab = InlineVocab {
            values: vec!["x".into(), "y".into()],
            counts: vec![2, 1],
            oov: 0,
        };
        let entry = StatsEntry::Vocab(VocabEntry::Inline(vocab.clone()));
        let in_memory = entry.clone().into_inline().unwrap();
        assert_eq!(in_memory, StatsEntry::Vocab(vocab));
        // One JSON form for both, and back again.
        let text = serde_json::to_string(&in_memory).unwrap();
        assert_eq!(text, serde_json::to_string(&entry).unwrap());
        assert_eq!(StatsEntry::from(in_memory), entry);
        let m = StatsEntry::MinMax {
            min: -1.5,
            max: 2.0,
            count: 7,
        };
        assert_eq!(
            m.clone().into_inline().unwrap(),
            StatsEntry::MinMax {
                min: -1.5,
                max: 2.0,
                count: 7
            }
        );
        // A vocabulary in a file cannot be used before it is read.
        let file = StatsEntry::Vocab(VocabEntry::File {
            file: "vocab-k-0.jsonl".into(),
            size: 9,
            oov: 0,
        });
        let err = file.into_inline().unwrap_err();
        assert!(err.contains("vocab-k-0.jsonl"), "{err}");
    }

    #[test]
    fn vocabulary_lines_read_back() {
        for (v, c) in [("a", 1u64), ("", 0), ("x \"q\"\n\\", u64::MAX), ("é", 7)] {
            let line = vocab_line(v, c);
            assert_eq!(line.last(), Some(&b'\n'));
            let text = std::str::from_utf8(&line[..line.len() - 1]).unwrap();
            assert!(!text.contains('\n'));
            assert_eq!(parse_vocab_line(text).unwrap(), (v.to_string(), c));
        }
    }
}
