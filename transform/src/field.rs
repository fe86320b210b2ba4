//! The field model: where a field's values come from, its stored shape, what
//! happens to nulls, and its transform steps, as the spec states them.
//!
//! The compiler parses these from YAML (with line numbers for its errors);
//! an artifact stores them in its manifest as the canonical spec, which
//! [`Field::from_canonical`] reads back. The canonical JSON of a field is
//! written and read here, in one place, so what the compiler hashes and
//! stores is exactly what the serving path reconstructs.

use crate::image::ImageStep;
use crate::text::{ChatTemplateFile, Tokenize};
use serde_json::{Value, json};
use tessera_reader::DType;

/// Where a field's values come from.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldInput {
    /// One column.
    Column(String),
    /// Several scalar columns stacked into a vector of shape `[n]`.
    Columns(Vec<String>),
    /// A SQL expression over the query's columns.
    Expr(String),
    /// How many bytes, elements or tokens the named field stored for the
    /// row (`length_of:`), after truncation.
    LengthOf(String),
}

/// One transform step applied to a field's values, in list order (the
/// spec's `transform:` entries).
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `ln(1 + x)`.
    Log1p,
    /// Clamp into `[min, max]` (either bound optional).
    Clip {
        /// Lower bound.
        min: Option<f64>,
        /// Upper bound.
        max: Option<f64>,
    },
    /// `(x - mean) / std` with statistics from the training split.
    Standardize,
    /// `(x - min) / (max - min)` with statistics from the training split.
    MinMax,
    /// Stable hash of the value's string form modulo `buckets`.
    HashBucket {
        /// Number of buckets.
        buckets: u64,
    },
    /// Map values to ids by frequency in the training split.
    Vocab {
        /// Minimum count for a value to get its own id.
        min_count: u64,
        /// Largest vocabulary (most frequent kept).
        max_size: Option<u64>,
        /// Id for out-of-vocabulary values.
        oov: i64,
    },
    /// One-hot encode an integer id in `0..classes`, appending a dimension.
    OneHot {
        /// Number of classes.
        classes: u64,
    },
    /// Text into token ids with a tokenizer file (a list of ids, cut or
    /// padded to the field's `length`).
    Tokenize(Tokenize),
    /// Encoded images (bytes, or paths to files) decoded into `u8` pixels
    /// of a fixed shape (`[H, W, C]` or `[C, H, W]`).
    Image(ImageStep),
}

/// One output field.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// Field name (the YAML key).
    pub name: String,
    /// Stored element type.
    pub dtype: DType,
    /// Input column(s) or expression.
    pub input: FieldInput,
    /// For list columns: pad or truncate to this many elements.
    pub length: Option<u64>,
    /// Pad value for lists shorter than `length` (default 0).
    pub pad: f64,
    /// For fixed-size binary columns (`dtype: u8`): bytes per value.
    pub bytes: Option<u64>,
    /// For text stored as UTF-8 bytes (`dtype: u8`): bytes per value, longer
    /// values cut at a character boundary, shorter ones padded with `pad`.
    pub text: Option<u64>,
    /// Value used for nulls; a null with no fill_null is an error naming the row.
    pub fill_null: Option<f64>,
    /// Transform steps in application order.
    pub transforms: Vec<Step>,
    /// What `standardize`/`min_max` statistics do with NaN and infinities.
    pub nonfinite: NonFinite,
}

/// The policy for NaN and infinite values met by a statistics pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NonFinite {
    /// Stop the build with an error naming the field and the row (default).
    #[default]
    Error,
    /// Leave such values out of the statistics; they are stored transformed
    /// like any other value (and so stay NaN or infinite).
    Exclude,
}

impl Field {
    /// The stored shape of one value of this field.
    pub fn shape(&self) -> Vec<u64> {
        let mut shape = match (&self.input, self.length, self.bytes.or(self.text)) {
            (FieldInput::Columns(cs), _, _) => vec![cs.len() as u64],
            (_, Some(n), _) => vec![n],
            (_, _, Some(n)) => vec![n],
            _ => vec![],
        };
        if let Some(Step::Image(img)) = self.transforms.first() {
            return img.shape();
        }
        for t in &self.transforms {
            if let Step::OneHot { classes } = t {
                shape.push(*classes);
            }
        }
        shape
    }

    /// The field's canonical JSON (docs/SPEC.md, "Canonical form"): every
    /// key present, numbers the user may write either way as floats.
    pub fn canonical_json(&self) -> Value {
        let input = match &self.input {
            FieldInput::Column(c) => json!({ "column": c }),
            FieldInput::Columns(cs) => json!({ "columns": cs }),
            FieldInput::Expr(e) => json!({ "expr": e }),
            FieldInput::LengthOf(f) => json!({ "length_of": f }),
        };
        json!({
            "bytes": self.bytes,
            "dtype": self.dtype.name(),
            "fill_null": self.fill_null,
            "input": input,
            "length": self.length,
            "name": self.name,
            "nonfinite": match self.nonfinite {
                NonFinite::Error => "error",
                NonFinite::Exclude => "exclude",
            },
            "pad": self.pad,
            "text": self.text,
            "transforms": self.transforms.iter().map(Step::canonical_json).collect::<Vec<_>>(),
        })
    }

    /// Reads a field back from its canonical JSON. The error names the key.
    pub fn from_canonical(v: &Value) -> Result<Field, String> {
        let name = str_key(v, "name")?.to_string();
        let at = |e: String| format!("field {name:?}: {e}");
        let dtype_name = str_key(v, "dtype").map_err(at)?;
        let dtype = dtype_name
            .parse::<DType>()
            .map_err(|_| at(format!("unknown dtype {dtype_name:?}")))?;
        let input = v.get("input").ok_or_else(|| at("lacks `input`".into()))?;
        let input = if let Some(c) = input.get("column").and_then(Value::as_str) {
            FieldInput::Column(c.to_string())
        } else if let Some(e) = input.get("expr").and_then(Value::as_str) {
            FieldInput::Expr(e.to_string())
        } else if let Some(f) = input.get("length_of").and_then(Value::as_str) {
            FieldInput::LengthOf(f.to_string())
        } else if let Some(cs) = input.get("columns").and_then(Value::as_array) {
            FieldInput::Columns(
                cs.iter()
                    .map(|c| c.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| at("`input.columns` holds a non-string".into()))?,
            )
        } else {
            return Err(at(
                "`input` has none of column, columns, expr, length_of".into()
            ));
        };
        let transforms = match v.get("transforms") {
            Some(Value::Array(items)) => items
                .iter()
                .map(Step::from_canonical)
                .collect::<Result<Vec<_>, _>>()
                .map_err(at)?,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(at("`transforms` is not a list".into())),
        };
        let nonfinite = match v.get("nonfinite").and_then(Value::as_str) {
            None | Some("error") => NonFinite::Error,
            Some("exclude") => NonFinite::Exclude,
            Some(other) => return Err(at(format!("unknown nonfinite policy {other:?}"))),
        };
        Ok(Field {
            dtype,
            input,
            length: opt_u64(v, "length").map_err(at)?,
            pad: opt_f64(v, "pad").map_err(at)?.unwrap_or(0.0),
            bytes: opt_u64(v, "bytes").map_err(at)?,
            text: opt_u64(v, "text").map_err(at)?,
            fill_null: opt_f64(v, "fill_null").map_err(at)?,
            transforms,
            nonfinite,
            name,
        })
    }
}

impl Step {
    /// The step's name as the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Log1p => "log1p",
            Step::Clip { .. } => "clip",
            Step::Standardize => "standardize",
            Step::MinMax => "min_max",
            Step::HashBucket { .. } => "hash_bucket",
            Step::Vocab { .. } => "vocab",
            Step::OneHot { .. } => "one_hot",
            Step::Tokenize(_) => "tokenize",
            Step::Image(_) => "image",
        }
    }

    /// True for steps whose parameters come from the statistics pass.
    pub fn needs_stats(&self) -> bool {
        matches!(self, Step::Standardize | Step::MinMax | Step::Vocab { .. })
    }

    /// The step's canonical JSON: `{name: {arguments}}`.
    pub fn canonical_json(&self) -> Value {
        match self {
            Step::Log1p => json!({ "log1p": {} }),
            Step::Clip { min, max } => json!({ "clip": { "max": max, "min": min } }),
            Step::Standardize => json!({ "standardize": {} }),
            Step::MinMax => json!({ "min_max": {} }),
            Step::HashBucket { buckets } => json!({ "hash_bucket": { "buckets": buckets } }),
            Step::Vocab {
                min_count,
                max_size,
                oov,
            } => json!({ "vocab": { "max_size": max_size, "min_count": min_count, "oov": oov } }),
            Step::OneHot { classes } => json!({ "one_hot": { "classes": classes } }),
            // The file's path is left out (its bytes are the meaning).
            Step::Tokenize(t) => {
                let mut args = json!({
                    "add_special_tokens": t.add_special_tokens,
                    "blake3": t.blake3,
                    "bos": t.bos,
                    "eos": t.eos,
                    "library": t.library,
                    "special_tokens": t.special_tokens,
                });
                // Rank files and conversations only: other steps keep the
                // form they had.
                if let Some(encoding) = &t.encoding {
                    args["encoding"] = json!(encoding);
                }
                if let Some(chat) = &t.chat_template {
                    args["chat_template"] = json!({ "blake3": chat.blake3 });
                    args["on_bad_mask"] = json!(if t.skip_bad_masks { "skip" } else { "error" });
                }
                json!({ "tokenize": args })
            }
            Step::Image(i) => json!({ "image": i.canonical_json() }),
        }
    }

    /// Reads a step back from its canonical JSON.
    pub fn from_canonical(v: &Value) -> Result<Step, String> {
        let Some((name, args)) = v.as_object().and_then(|m| m.iter().next()) else {
            return Err(format!("transform {v} is not a one-key object"));
        };
        let at = |e: String| format!("transform {name}: {e}");
        Ok(match name.as_str() {
            "log1p" => Step::Log1p,
            "standardize" => Step::Standardize,
            "min_max" => Step::MinMax,
            "clip" => Step::Clip {
                min: opt_f64(args, "min").map_err(at)?,
                max: opt_f64(args, "max").map_err(at)?,
            },
            "hash_bucket" => Step::HashBucket {
                buckets: opt_u64(args, "buckets")
                    .map_err(at)?
                    .filter(|&b| b >= 1)
                    .ok_or_else(|| at("lacks a bucket count of at least 1".into()))?,
            },
            "one_hot" => Step::OneHot {
                classes: opt_u64(args, "classes")
                    .map_err(at)?
                    .filter(|&c| c >= 1)
                    .ok_or_else(|| at("lacks a class count of at least 1".into()))?,
            },
            "vocab" => Step::Vocab {
                min_count: opt_u64(args, "min_count").map_err(at)?.unwrap_or(1),
                max_size: opt_u64(args, "max_size").map_err(at)?,
                oov: match args.get("oov") {
                    None | Some(Value::Null) => 0,
                    Some(o) => o.as_i64().ok_or_else(|| at("oov is not an i64".into()))?,
                },
            },
            "tokenize" => {
                let text = |key: &str| -> Result<Option<String>, String> {
                    match args.get(key) {
                        None | Some(Value::Null) => Ok(None),
                        Some(Value::String(s)) => Ok(Some(s.clone())),
                        Some(_) => Err(at(format!("`{key}` is not a string"))),
                    }
                };
                let flag = |key: &str| -> Result<bool, String> {
                    match args.get(key) {
                        None | Some(Value::Null) => Ok(false),
                        Some(Value::Bool(b)) => Ok(*b),
                        Some(_) => Err(at(format!("`{key}` is not a boolean"))),
                    }
                };
                Step::Tokenize(Tokenize {
                    file: String::new(),
                    blake3: text("blake3")?,
                    library: text("library")?.unwrap_or_default(),
                    bos: text("bos")?,
                    eos: text("eos")?,
                    special_tokens: flag("special_tokens")?,
                    add_special_tokens: flag("add_special_tokens")?,
                    loaded: None,
                    chat_template: match args.get("chat_template") {
                        None | Some(Value::Null) => None,
                        Some(c) => Some(ChatTemplateFile {
                            file: String::new(),
                            blake3: match c.get("blake3") {
                                Some(Value::String(h)) => Some(h.clone()),
                                _ => return Err(at("chat_template lacks its blake3".into())),
                            },
                            loaded: None,
                        }),
                    },
                    encoding: text("encoding")?,
                    skip_bad_masks: match args.get("on_bad_mask") {
                        None | Some(Value::Null) => false,
                        Some(Value::String(v)) if v == "error" => false,
                        Some(Value::String(v)) if v == "skip" => true,
                        Some(v) => return Err(at(format!("on_bad_mask {v} is not error or skip"))),
                    },
                })
            }
            "image" => Step::Image(ImageStep::from_canonical(args).map_err(at)?),
            other => return Err(format!("unknown transform {other:?}")),
        })
    }
}

/// Assignment of rows to named splits.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// SQL expression whose value (as a string) is hashed to pick the split.
    pub key: String,
    /// Split names and weights in YAML order (weights sum to 1 after normalizing).
    pub weights: Vec<(String, f64)>,
    /// Split whose rows feed transform statistics (default: `train` if present,
    /// else the first split).
    pub stats_split: String,
}

impl Split {
    /// The split's canonical JSON.
    pub fn canonical_json(&self) -> Value {
        json!({
            "key": self.key,
            "stats_from": self.stats_split,
            "weights": self.weights.iter().map(|(n, w)| json!([n, w])).collect::<Vec<_>>(),
        })
    }

    /// Reads a split back from its canonical JSON.
    pub fn from_canonical(v: &Value) -> Result<Split, String> {
        let key = str_key(v, "key")?.to_string();
        let stats_split = str_key(v, "stats_from")?.to_string();
        let weights = v
            .get("weights")
            .and_then(Value::as_array)
            .ok_or_else(|| "split lacks `weights`".to_string())?
            .iter()
            .map(|pair| match pair.as_array().map(Vec::as_slice) {
                Some([Value::String(n), w]) => w
                    .as_f64()
                    .map(|w| (n.clone(), w))
                    .ok_or_else(|| format!("split weight of {n:?} is not a number")),
                _ => Err(format!("split weight {pair} is not [name, weight]")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Split {
            key,
            weights,
            stats_split,
        })
    }
}

fn str_key<'v>(v: &'v Value, key: &str) -> Result<&'v str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("lacks the string `{key}`"))
}

fn opt_u64(v: &Value, key: &str) -> Result<Option<u64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not an unsigned integer")),
    }
}

fn opt_f64(v: &Value, key: &str) -> Result<Option<f64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_round_trips() {
        let f = Field {
            name: "x".into(),
            dtype: DType::F32,
            input: FieldInput::Columns(vec!["a".into(), "b".into()]),
            length: None,
            pad: 0.0,
            bytes: None,
            text: None,
            fill_null: Some(0.5),
            transforms: vec![
                Step::Clip {
                    min: Some(0.0),
                    max: None,
                },
                Step::Log1p,
                Step::Standardize,
            ],
            nonfinite: NonFinite::Exclude,
        };
        assert_eq!(Field::from_canonical(&f.canonical_json()), Ok(f));
        let g = Field {
            name: "k".into(),
            dtype: DType::U8,
            input: FieldInput::Expr("a || b".into()),
            length: Some(3),
            pad: -1.0,
            bytes: None,
            text: None,
            fill_null: None,
            transforms: vec![
                Step::Vocab {
                    min_count: 2,
                    max_size: Some(5),
                    oov: 0,
                },
                Step::OneHot { classes: 6 },
            ],
            nonfinite: NonFinite::Error,
        };
        assert_eq!(Field::from_canonical(&g.canonical_json()), Ok(g));
        let s = Split {
            key: "id".into(),
            weights: vec![("train".into(), 0.75), ("val".into(), 0.25)],
            stats_split: "train".into(),
        };
        assert_eq!(Split::from_canonical(&s.canonical_json()), Ok(s));
    }

    #[test]
    fn bad_canonical_json_names_the_key() {
        let e = Field::from_canonical(&json!({"name": "x", "dtype": "f33", "input": {}}));
        assert!(e.unwrap_err().contains("unknown dtype \"f33\""));
        let e = Step::from_canonical(&json!({"hash_bucket": {"buckets": 0}}));
        assert!(e.unwrap_err().contains("bucket count"));
    }
}
