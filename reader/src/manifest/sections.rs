//! The compiler's sections of the manifest, typed: `build` (what the build
//! did: [`BuildRecord`]) and `stats` (the frozen transform statistics: a list
//! of [`StatsEntry`] per field, one per stacked column, defined in
//! `stats.rs`).
//!
//! The manifest keeps both as JSON values: the format leaves them free-form
//! (docs/FORMAT.md, 3.2), other writers may store anything there
//! (`tessera.write_shard_set(stats=...)`), and a reader of records needs
//! neither. These types are what the compiler writes there and how every
//! reader of the sections reads them ([`Manifest::build_record`],
//! [`Manifest::stats_of`]). Written through a JSON value, their keys come out
//! sorted, as they always have.

use super::Manifest;
use super::stats::StatsEntry;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The manifest's `build` section: how the compiler ran the build.
///
/// Keys a compiler of an earlier version did not write read as absent (or
/// 0); keys this version does not know are ignored (and kept in the
/// manifest's JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The transform semantics version the records were made with.
    #[serde(default)]
    pub semantics_version: u64,
    /// `"chunked"` or `"global"` (the kind of `plan_detail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// How the query ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_detail: Option<PlanDecision>,
    /// For a global plan run in one partition, the operator that forced it
    /// (written as `null` otherwise).
    #[serde(default)]
    pub plan_serial: Option<String>,
    /// Build tasks (chunks, or row ranges of a global query's output).
    #[serde(default)]
    pub chunks: u64,
    /// Rows that passed the filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_kept: Option<u64>,
    /// Scan counters over the whole build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanMetrics>,
    /// With `pack:`, the packing figures per split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<BTreeMap<String, PackRecord>>,
    /// Rows left out per `image` field with `on_error: skip` (every such
    /// field, 0 included); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<BTreeMap<String, u64>>,
    /// The query's output columns and their Arrow types, which the serving
    /// transform converts new rows to (absent in builds before serving).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_columns: Option<Vec<QueryColumn>>,
}

/// How a build runs its query (`build.plan_detail`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "snake_case")]
pub enum PlanDecision {
    /// Cut into chunk tasks over `source`.
    Chunked {
        /// The chunked source.
        source: String,
    },
    /// One DataFusion execution over all inputs.
    Global {
        /// The operator that made the query global, as DataFusion names it.
        operator: String,
        /// Why that operator prevents chunking.
        reason: String,
    },
}

impl PlanDecision {
    /// `"chunked"` or `"global"`.
    pub fn kind(&self) -> &'static str {
        match self {
            PlanDecision::Chunked { .. } => "chunked",
            PlanDecision::Global { .. } => "global",
        }
    }

    /// One line for the build output.
    pub fn describe(&self) -> String {
        match self {
            PlanDecision::Chunked { source } => {
                format!("chunked over source {source:?}: the query works row by row on it")
            }
            PlanDecision::Global { operator, reason } => {
                format!("global ({operator}): {reason}")
            }
        }
    }
}

/// Counters read from an executed plan's metrics (`build.scan`). A counter
/// an earlier compiler did not record reads as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScanMetrics {
    /// Rows decoded by the scans: after file, row-group and page pruning,
    /// before row-level filtering (output rows plus rows the pushed-down
    /// filter removed inside the decoder).
    pub rows_scanned: u64,
    /// Parquet row groups skipped by min/max statistics.
    pub row_groups_pruned: u64,
    /// Parquet row groups read.
    pub row_groups_matched: u64,
    /// Whole Parquet files (or file ranges) skipped by their statistics.
    pub files_pruned: u64,
    /// Rows removed inside the Parquet decoder by pushed-down filters.
    pub rows_pruned_in_scan: u64,
    /// Bytes read from files.
    pub bytes_scanned: u64,
}

impl ScanMetrics {
    /// Adds another task's counters.
    pub fn add(&mut self, o: &ScanMetrics) {
        self.rows_scanned += o.rows_scanned;
        self.row_groups_pruned += o.row_groups_pruned;
        self.row_groups_matched += o.row_groups_matched;
        self.files_pruned += o.files_pruned;
        self.rows_pruned_in_scan += o.rows_pruned_in_scan;
        self.bytes_scanned += o.bytes_scanned;
    }
}

/// What packing did to one split's documents (`build.pack.SPLIT`). A
/// figure an earlier compiler did not record reads as 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PackRecord {
    /// Documents read.
    pub documents: u64,
    /// Documents left out (`overflow: drop`).
    pub dropped_documents: u64,
    /// Documents without a token.
    pub empty_documents: u64,
    /// Padding slots over all slots.
    pub padding_fraction: f64,
    /// Padding slots.
    pub padding_tokens: u64,
    /// Conversations left out (`on_bad_mask: skip`).
    pub skipped_conversations: u64,
    /// Documents cut across windows.
    pub split_documents: u64,
    /// Tokens stored.
    pub tokens: u64,
    /// Documents cut short (`overflow: truncate`).
    pub truncated_documents: u64,
    /// Tokens those lost.
    pub truncated_tokens: u64,
    /// Windows (records) written.
    pub windows: u64,
}

/// One output column of the build's query (`build.query_columns[i]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryColumn {
    /// Column name.
    pub name: String,
    /// Arrow type name, as `arrow_schema::DataType` displays and parses it.
    #[serde(rename = "type")]
    pub data_type: String,
}

impl Manifest {
    /// The `build` section as the compiler writes it; `None` when the
    /// manifest has none (or `null`). An error names the key.
    pub fn build_record(&self) -> Result<Option<BuildRecord>> {
        if self.build.is_null() {
            return Ok(None);
        }
        BuildRecord::deserialize(&self.build)
            .map(Some)
            .map_err(|e| Error::manifest(super::MANIFEST_FILE, format!("key `build`: {e}")))
    }

    /// Sets the `build` section.
    pub fn set_build_record(&mut self, record: &BuildRecord) {
        // A struct of numbers, strings and maps with string keys.
        self.build = serde_json::to_value(record).unwrap_or_default();
    }

    /// The frozen statistics of field `name`, one entry per slot; `None`
    /// when the manifest has none for it. An error names the key.
    pub fn stats_of(&self, name: &str) -> Result<Option<Vec<StatsEntry>>> {
        let Some(list) = self.stats.get(name) else {
            return Ok(None);
        };
        let bad = |reason: String| Error::manifest(super::MANIFEST_FILE, reason);
        let list = list
            .as_array()
            .ok_or_else(|| bad(format!("key `stats.{name}` is not a list")))?;
        list.iter()
            .enumerate()
            .map(|(j, e)| {
                StatsEntry::deserialize(e)
                    .map_err(|err| bad(format!("key `stats.{name}[{j}]`: {err}")))
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// Sets the `stats` section: per field, its entries.
    pub fn set_stats(&mut self, stats: &BTreeMap<String, Vec<StatsEntry>>) {
        // Numbers (finite, as statistics are), strings and string-keyed maps.
        self.stats = serde_json::to_value(stats).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::layout::{FieldSpec, RecordLayout};
    use crate::manifest::stats::{InlineVocab, VocabEntry, vocab_file_name};
    use crate::manifest::{Compression, ShardInfo, SplitInfo};
    use std::path::Path;

    fn manifest() -> Manifest {
        let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::F32, &[])]).unwrap();
        Manifest::new(
            layout,
            vec![ShardInfo {
                file: "s.bin".into(),
                rows: 2,
                bytes: 4096 + 8,
                blake3: "ab".repeat(32),
                compression: Compression::None,
                stored_bytes: None,
                stored_blake3: None,
            }],
            vec![SplitInfo {
                name: "all".into(),
                start: 0,
                rows: 2,
            }],
        )
        .unwrap()
    }

    fn reread(m: &Manifest) -> Manifest {
        Manifest::parse(&m.to_json(), Path::new("m.json")).unwrap()
    }

    /// xorshift64*: doubles of every magnitude and bit pattern.
    fn doubles(n: usize) -> Vec<f64> {
        let mut s: u64 = 0x2545_F491_4F6C_DD1D;
        (0..n)
            .map(|i| {
                s ^= s >> 12;
                s ^= s << 25;
                s ^= s >> 27;
                let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
                match i % 2 {
                    0 => Some(f64::from_bits(r))
                        .filter(|x| x.is_finite())
                        .unwrap_or(r as f64),
                    _ => ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e3,
                }
            })
            .collect()
    }

    #[test]
    fn frozen_floats_survive_the_manifest_bit_for_bit() {
        // 255.27502614907138 is a standard deviation serde_json read one unit
        // in the last place off before the workspace enabled float_roundtrip.
        let mut xs = vec![
            "255.27502614907138".parse::<f64>().unwrap(),
            -1.5e-3,
            1.351_520_738_636_859_7,
            5e-324,
            -0.0,
            f64::MAX,
        ];
        xs.extend(doubles(20_000));
        let entries: Vec<StatsEntry> = xs
            .chunks(2)
            .enumerate()
            .map(|(i, p)| {
                let (a, b) = (p[0], p.get(1).copied().unwrap_or(1.0));
                if i % 2 == 0 {
                    StatsEntry::Standardize {
                        mean: a,
                        std: b,
                        count: i as u64,
                    }
                } else {
                    StatsEntry::MinMax {
                        min: a,
                        max: b,
                        count: i as u64,
                    }
                }
            })
            .collect();
        let mut m = manifest();
        m.set_stats(&BTreeMap::from([("x".to_string(), entries.clone())]));
        let back = reread(&m).stats_of("x").unwrap().unwrap();
        assert_eq!(back.len(), entries.len());
        let bits = |e: &StatsEntry| match *e {
            StatsEntry::Standardize { mean, std, .. } => [mean.to_bits(), std.to_bits()],
            StatsEntry::MinMax { min, max, .. } => [min.to_bits(), max.to_bits()],
            StatsEntry::Vocab(_) => unreachable!(),
        };
        for (a, b) in entries.iter().zip(&back) {
            assert_eq!(bits(a), bits(b), "{a:?} read back as {b:?}");
        }
    }

    #[test]
    fn stats_entries_keep_the_keys_and_bytes_earlier_compilers_wrote() {
        // The entries as the compiler wrote them with `serde_json::json!`.
        let text = r#"{"k":[{"counts":[3,1],"kind":"vocab","oov":0,"values":["a",""]}],"v":[{"file":"vocab-v-0.jsonl","kind":"vocab","oov":-1,"size":5000}],"x":[{"count":3,"kind":"standardize","mean":0.5,"std":2.0},{"count":3,"kind":"min_max","max":1e+300,"min":-0.1}]}"#;
        let mut m = manifest();
        m.stats = serde_json::from_str(text).unwrap();
        let m = reread(&m);
        let k = m.stats_of("k").unwrap().unwrap();
        assert_eq!(
            k,
            [StatsEntry::Vocab(VocabEntry::Inline(InlineVocab {
                values: vec!["a".into(), String::new()],
                counts: vec![3, 1],
                oov: 0
            }))]
        );
        let v = m.stats_of("v").unwrap().unwrap();
        assert_eq!(
            v,
            [StatsEntry::Vocab(VocabEntry::File {
                file: vocab_file_name("v", 0),
                size: 5000,
                oov: -1
            })]
        );
        let x = m.stats_of("x").unwrap().unwrap();
        assert_eq!(x.len(), 2);
        assert!(m.stats_of("nope").unwrap().is_none());
        // Written back through the types: the same text.
        let mut again = manifest();
        again.set_stats(&BTreeMap::from([
            ("k".to_string(), k),
            ("v".to_string(), v),
            ("x".to_string(), x),
        ]));
        assert_eq!(serde_json::to_string(&again.stats).unwrap(), text);
    }

    #[test]
    fn a_bad_stats_entry_is_an_error_naming_its_key() {
        let mut m = manifest();
        m.stats = serde_json::json!({
            "a": {"mean": [0.0]},
            "b": [{"kind": "vocab", "file": "f.jsonl", "oov": 0}],
            "c": [{"kind": "standardize", "mean": 1.0, "std": 1.0, "count": 1}, {"kind": "vocab", "oov": 0}],
            "d": [{"kind": "median"}],
        });
        let err = |name: &str| m.stats_of(name).unwrap_err().to_string();
        assert!(
            err("a").contains("key `stats.a` is not a list"),
            "{}",
            err("a")
        );
        assert!(
            err("b").contains("`stats.b[0]`") && err("b").contains("size"),
            "{}",
            err("b")
        );
        assert!(
            err("c").contains("`stats.c[1]`") && err("c").contains("values"),
            "{}",
            err("c")
        );
        assert!(
            err("d").contains("`stats.d[0]`") && err("d").contains("median"),
            "{}",
            err("d")
        );
    }

    #[test]
    fn build_records_of_every_compiler_version_read() {
        let mut m = manifest();
        assert_eq!(m.build_record().unwrap(), None);
        // The first compilers wrote four keys, and fewer scan counters.
        m.build = serde_json::json!({
            "semantics_version": 1,
            "chunks": 4,
            "rows_kept": 10,
            "scan": {"rows_scanned": 12, "row_groups_pruned": 1, "row_groups_matched": 2,
                     "rows_pruned_in_scan": 2, "bytes_scanned": 300},
            "a_later_key": [1, 2],
        });
        let b = reread(&m).build_record().unwrap().unwrap();
        assert_eq!(b.chunks, 4);
        assert_eq!(b.rows_kept, Some(10));
        assert_eq!(b.plan, None);
        assert_eq!(b.plan_detail, None);
        let scan = b.scan.unwrap();
        assert_eq!(
            (scan.rows_scanned, scan.files_pruned, scan.bytes_scanned),
            (12, 0, 300)
        );
        // The unknown key stays in the manifest.
        assert_eq!(reread(&m).build["a_later_key"], serde_json::json!([1, 2]));
        // A pack record from before `skipped_conversations`.
        m.build = serde_json::json!({"pack": {"all": {"documents": 3, "tokens": 7, "padding_fraction": 0.25}}});
        let b = m.build_record().unwrap().unwrap();
        let p = &b.pack.unwrap()["all"];
        assert_eq!((p.documents, p.tokens, p.skipped_conversations), (3, 7, 0));
        assert_eq!(p.padding_fraction, 0.25);
        m.build = serde_json::json!({"chunks": "four"});
        assert!(
            m.build_record()
                .unwrap_err()
                .to_string()
                .contains("key `build`")
        );
    }

    #[test]
    fn a_build_record_is_written_with_sorted_keys_and_a_null_serial_plan() {
        let b = BuildRecord {
            semantics_version: 3,
            plan: Some("chunked".into()),
            plan_detail: Some(PlanDecision::Chunked { source: "t".into() }),
            plan_serial: None,
            chunks: 2,
            rows_kept: Some(5),
            scan: Some(ScanMetrics::default()),
            pack: None,
            skipped: Some(BTreeMap::from([("img".to_string(), 1)])),
            query_columns: Some(vec![QueryColumn {
                name: "x".into(),
                data_type: "Int64".into(),
            }]),
        };
        let mut m = manifest();
        m.set_build_record(&b);
        let text = serde_json::to_string(&m.build).unwrap();
        assert_eq!(
            text,
            r#"{"chunks":2,"plan":"chunked","plan_detail":{"plan":"chunked","source":"t"},"plan_serial":null,"query_columns":[{"name":"x","type":"Int64"}],"rows_kept":5,"scan":{"bytes_scanned":0,"files_pruned":0,"row_groups_matched":0,"row_groups_pruned":0,"rows_pruned_in_scan":0,"rows_scanned":0},"semantics_version":3,"skipped":{"img":1}}"#
        );
        assert_eq!(reread(&m).build_record().unwrap(), Some(b));
    }
}
