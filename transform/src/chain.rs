//! A field's transform chain, in one place: which columns the query must
//! produce for it, how its values are read (text, float, exact integer,
//! bytes), whether it needs statistics, and the per-value arithmetic. The
//! compiler's statistics pass and encoder and the serving path all go
//! through it, so they cannot disagree about what a value is.

use crate::field::{Field, FieldInput, NonFinite, Step as Transform};
use crate::semantics::{self as transform, FrozenStats};
use crate::sql::quote_ident;

/// How a field's values travel from the query output to the record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Path {
    /// Fixed-size binary copied as is (`bytes: n`).
    Bytes(usize),
    /// UTF-8 text cut at a character boundary or padded to `n` bytes
    /// (`text: n`).
    Utf8(usize),
    /// Text into token ids (`tokenize`), cut or padded to `length`.
    Tokens,
    /// Encoded images (bytes, or paths) into pixels (`image`).
    Image,
    /// The count of bytes, elements or tokens field `i` stored for the row
    /// (`length_of`).
    Length(usize),
    /// Text hashed (`hash_bucket`) or looked up (`vocab`) into an integer id.
    Text {
        /// `Some(n)` for `hash_bucket: n`, `None` for `vocab`.
        buckets: Option<u64>,
    },
    /// Floats: any float dtype without `one_hot`.
    Float,
    /// Exact integers: integer dtypes, and class indices for `one_hot`.
    Int,
}

/// What the statistics pass collects for a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsKind {
    /// Mean, variance, min and max (standardize, min_max).
    Moments,
    /// Value counts (vocab).
    Counts,
}

/// One field's chain.
#[derive(Clone, Debug)]
pub struct Chain {
    /// Field index in the spec.
    pub index: usize,
    /// The field.
    pub field: Field,
    /// How values are read.
    pub path: Path,
    /// `Some(k)` when the field ends in `one_hot: k`.
    pub one_hot: Option<u64>,
    /// The statistics the field needs, if any.
    pub stats: Option<StatsKind>,
}

impl Chain {
    /// The chain of field `index` of `fields` (a spec's fields, in order).
    pub fn new(fields: &[Field], index: usize) -> Chain {
        let field = fields[index].clone();
        let one_hot = field.transforms.iter().find_map(|t| match t {
            Transform::OneHot { classes } => Some(*classes),
            _ => None,
        });
        let path = if let FieldInput::LengthOf(target) = &field.input {
            // The spec checks the name; a manifest that names no field
            // gives a length field that reads nothing (the encoder says so).
            Path::Length(
                fields
                    .iter()
                    .position(|f| f.name == *target)
                    .unwrap_or(usize::MAX),
            )
        } else if let Some(n) = field.bytes {
            Path::Bytes(n as usize)
        } else if let Some(n) = field.text {
            Path::Utf8(n as usize)
        } else if matches!(field.transforms.first(), Some(Transform::Tokenize(_))) {
            Path::Tokens
        } else if matches!(field.transforms.first(), Some(Transform::Image(_))) {
            Path::Image
        } else {
            match field.transforms.first() {
                Some(Transform::HashBucket { buckets }) => Path::Text {
                    buckets: Some(*buckets),
                },
                Some(Transform::Vocab { .. }) => Path::Text { buckets: None },
                _ if one_hot.is_some() => Path::Int,
                _ if field.dtype.is_float() => Path::Float,
                _ => Path::Int,
            }
        };
        let stats = field.transforms.iter().find_map(|t| match t {
            Transform::Standardize | Transform::MinMax => Some(StatsKind::Moments),
            Transform::Vocab { .. } => Some(StatsKind::Counts),
            _ => None,
        });
        Chain {
            index,
            field,
            path,
            one_hot,
            stats,
        }
    }

    /// Every field's chain, in field order.
    pub fn all(fields: &[Field]) -> Vec<Chain> {
        (0..fields.len()).map(|i| Chain::new(fields, i)).collect()
    }

    /// The query output columns that feed the field: one per stacked column,
    /// else one.
    pub fn columns(&self) -> Vec<String> {
        match &self.field.input {
            FieldInput::LengthOf(_) => Vec::new(),
            FieldInput::Columns(cs) => (0..cs.len())
                .map(|j| format!("__f{}_{j}", self.index))
                .collect(),
            _ => vec![format!("__f{}", self.index)],
        }
    }

    /// `(sql, alias)` pairs selecting the field's inputs from the query.
    /// Text fields are cast to strings in SQL, so the hash covers the value's
    /// SQL text.
    pub fn select_items(&self) -> Vec<(String, String)> {
        let wrap = |e: String| match self.path {
            Path::Text { .. } => format!("CAST(({e}) AS VARCHAR)"),
            _ => e,
        };
        let names = self.columns();
        match &self.field.input {
            FieldInput::Column(c) => vec![(wrap(quote_ident(c)), names[0].clone())],
            FieldInput::Expr(e) => vec![(wrap(format!("({e})")), names[0].clone())],
            FieldInput::Columns(cs) => cs
                .iter()
                .zip(names)
                .map(|(c, n)| (wrap(quote_ident(c)), n))
                .collect(),
            FieldInput::LengthOf(_) => Vec::new(),
        }
    }

    /// The field's `tokenize` step, if it has one.
    pub fn tokenize(&self) -> Option<&crate::text::Tokenize> {
        self.field.transforms.iter().find_map(|t| match t {
            Transform::Tokenize(t) => Some(t),
            _ => None,
        })
    }

    /// The field's `image` step, if it has one.
    pub fn image(&self) -> Option<&crate::image::ImageStep> {
        self.field.transforms.iter().find_map(|t| match t {
            Transform::Image(i) => Some(i),
            _ => None,
        })
    }

    /// Elements one stored value takes (the one-hot width, else 1).
    pub fn per_value(&self) -> usize {
        self.one_hot.unwrap_or(1) as usize
    }

    /// The per-value transforms before the statistics transform: what the
    /// statistics pass sees, exactly as the encoder computes it.
    #[inline]
    pub fn before_stats(&self, mut x: f64) -> f64 {
        for t in &self.field.transforms {
            match t {
                Transform::Log1p => x = transform::log1p(x),
                Transform::Clip { min, max } => x = transform::clip(x, *min, *max),
                Transform::Standardize | Transform::MinMax => break,
                _ => {}
            }
        }
        x
    }

    /// The whole float chain with frozen statistics `stat`.
    #[inline]
    pub fn apply_float(&self, mut x: f64, stat: Option<&FrozenStats>) -> f64 {
        for t in &self.field.transforms {
            match t {
                Transform::Log1p => x = transform::log1p(x),
                Transform::Clip { min, max } => x = transform::clip(x, *min, *max),
                Transform::Standardize | Transform::MinMax => {
                    if let Some(s) = stat {
                        x = transform::apply_stat(s, x);
                    }
                }
                _ => {}
            }
        }
        x
    }

    /// The integer chain (`clip` only) on an exact integer.
    #[inline]
    pub fn apply_int(&self, mut v: i128) -> Result<i128, String> {
        for t in &self.field.transforms {
            if let Transform::Clip { min, max } = t {
                let bound = |b: f64| -> Result<i128, String> {
                    if b.fract() != 0.0 {
                        Err(format!(
                            "clip bound {b} is not a whole number, and the field stores integers"
                        ))
                    } else {
                        Ok(b as i128)
                    }
                };
                if let Some(m) = min
                    && (v as f64) < *m
                {
                    v = bound(*m)?;
                }
                if let Some(m) = max
                    && (v as f64) > *m
                {
                    v = bound(*m)?;
                }
            }
        }
        Ok(v)
    }

    /// The integer fill for a null, if the field has one.
    pub fn int_fill(&self) -> Result<Option<i128>, String> {
        match self.field.fill_null {
            None => Ok(None),
            Some(x) if x.fract() == 0.0 && x.is_finite() => Ok(Some(x as i128)),
            Some(x) => Err(format!(
                "fill_null {x} is not a whole number, and the field stores integers"
            )),
        }
    }

    /// Whether a statistics input `x` counts, under the field's policy for
    /// NaN and infinities: `Ok(true)` to count it, `Ok(false)` to leave it
    /// out, `Err` to stop the build.
    #[inline]
    pub fn admit(&self, x: f64) -> Result<bool, String> {
        if x.is_finite() {
            return Ok(true);
        }
        match self.field.nonfinite {
            NonFinite::Exclude => Ok(false),
            NonFinite::Error => Err(format!(
                "the value after the transforms before {} is {x}, which would make the \
                 statistics {x}; fix the data, or set `nonfinite: exclude` on the field to leave \
                 such values out of the statistics",
                self.stats_transform_name()
            )),
        }
    }

    fn stats_transform_name(&self) -> &'static str {
        if self
            .field
            .transforms
            .iter()
            .any(|t| matches!(t, Transform::MinMax))
        {
            "min_max"
        } else {
            "standardize"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::fields;
    use serde_json::json;

    #[test]
    fn paths_follow_dtype_and_transforms() {
        let s = fields(json!([
            { "name": "a", "dtype": "f32", "input": { "column": "a" },
              "transforms": [{ "log1p": {} }, { "standardize": {} }] },
            { "name": "b", "dtype": "i32", "input": { "column": "b" },
              "transforms": [{ "hash_bucket": { "buckets": 10 } }] },
            { "name": "c", "dtype": "i64", "input": { "column": "c" } },
            { "name": "d", "dtype": "f32", "input": { "column": "d" },
              "transforms": [{ "one_hot": { "classes": 3 } }] },
            { "name": "e", "dtype": "u8", "input": { "column": "e" }, "bytes": 4 },
            { "name": "f", "dtype": "i32", "input": { "column": "f" },
              "transforms": [{ "vocab": {} }] },
        ]));
        let c = Chain::all(&s);
        assert_eq!(c[0].path, Path::Float);
        assert_eq!(c[0].stats, Some(StatsKind::Moments));
        assert_eq!(c[1].path, Path::Text { buckets: Some(10) });
        assert_eq!(c[1].stats, None);
        assert_eq!(c[2].path, Path::Int);
        assert_eq!(c[3].path, Path::Int);
        assert_eq!(c[3].per_value(), 3);
        assert_eq!(c[4].path, Path::Bytes(4));
        assert_eq!(c[5].stats, Some(StatsKind::Counts));
        assert_eq!(c[5].select_items()[0].0, "CAST((\"f\") AS VARCHAR)");
    }

    #[test]
    fn before_stats_stops_at_the_statistics_transform() {
        let s = fields(json!([
            { "name": "a", "dtype": "f32", "input": { "column": "a" },
              "transforms": [{ "clip": { "min": 0 } }, { "log1p": {} }, { "standardize": {} }] },
        ]));
        let c = Chain::new(&s, 0);
        assert_eq!(c.before_stats(-5.0), 0.0);
        assert!((c.before_stats(1.0) - 2f64.ln()).abs() < 1e-12);
        let stat = FrozenStats::Standardize {
            mean: 1.0,
            std: 2.0,
            count: 3,
        };
        let x = c.apply_float(1.0, Some(&stat));
        assert!((x - (2f64.ln() - 1.0) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn integer_clip_and_fill() {
        let s = fields(json!([
            { "name": "a", "dtype": "i32", "input": { "column": "a" }, "fill_null": 7,
              "transforms": [{ "clip": { "min": 0, "max": 10 } }] },
        ]));
        let c = Chain::new(&s, 0);
        assert_eq!(c.apply_int(-3), Ok(0));
        assert_eq!(c.apply_int(12), Ok(10));
        assert_eq!(c.apply_int(5), Ok(5));
        assert_eq!(c.int_fill(), Ok(Some(7)));
    }

    #[test]
    fn nonfinite_policy() {
        let s = fields(json!([
            { "name": "a", "dtype": "f32", "input": { "column": "a" },
              "transforms": [{ "standardize": {} }] },
            { "name": "b", "dtype": "f32", "input": { "column": "b" },
              "transforms": [{ "standardize": {} }], "nonfinite": "exclude" },
        ]));
        let (a, b) = (Chain::new(&s, 0), Chain::new(&s, 1));
        assert_eq!(a.admit(1.0), Ok(true));
        assert!(
            a.admit(f64::INFINITY)
                .unwrap_err()
                .contains("nonfinite: exclude")
        );
        assert_eq!(b.admit(f64::NAN), Ok(false));
    }
}
