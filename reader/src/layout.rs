//! Record layout: where each field sits inside a fixed-stride record.
//!
//! A record is `stride` bytes. Each field occupies `dtype.size() * prod(shape)`
//! bytes at an `offset` that is a multiple of `dtype.size()`; the stride is a
//! multiple of the largest field alignment, so every field of every record in a
//! page-aligned region is naturally aligned.

use crate::dtype::DType;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Largest record the format allows (1 GiB): guards size arithmetic against
/// hostile manifests.
pub const MAX_STRIDE: u64 = 1 << 30;

/// One field of a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldLayout {
    /// Field name, unique within the record.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Fixed shape of the field within one record; `[]` is a scalar.
    pub shape: Vec<u64>,
    /// Byte offset of the field from the start of the record.
    pub offset: u64,
}

impl FieldLayout {
    /// Number of elements (the product of the shape; 1 for a scalar).
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes the field occupies in a record.
    pub fn size(&self) -> u64 {
        self.elements() * self.dtype.size() as u64
    }
}

/// A field before it has been placed: what a writer asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Fixed shape; `[]` is a scalar.
    pub shape: Vec<u64>,
}

impl FieldSpec {
    /// A field named `name` of `dtype` and `shape`.
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[u64]) -> Self {
        FieldSpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }
}

/// The layout of one record: its fields (in declaration order) and stride.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordLayout {
    /// Bytes per record.
    pub stride: u64,
    /// Fields in declaration order (not necessarily offset order).
    pub fields: Vec<FieldLayout>,
}

impl RecordLayout {
    /// Places `fields` with as little padding as natural alignment allows:
    /// fields are assigned offsets in order of decreasing element size (ties
    /// keep declaration order), then the stride is rounded up to the largest
    /// element size. The returned layout lists fields in declaration order.
    pub fn packed(fields: &[FieldSpec]) -> Result<Self> {
        let mut order: Vec<usize> = (0..fields.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(fields[i].dtype.size()));
        let mut offsets = vec![0u64; fields.len()];
        let mut cursor = 0u64;
        let mut max_align = 1u64;
        for &i in &order {
            let f = &fields[i];
            let align = f.dtype.size() as u64;
            max_align = max_align.max(align);
            cursor = round_up(cursor, align);
            offsets[i] = cursor;
            let size = f
                .shape
                .iter()
                .try_fold(align, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| Error::Layout(format!("field {:?} is too large", f.name)))?;
            cursor = cursor
                .checked_add(size)
                .ok_or_else(|| Error::Layout("record is too large".into()))?;
        }
        let layout = RecordLayout {
            stride: round_up(cursor, max_align),
            fields: fields
                .iter()
                .zip(offsets)
                .map(|(f, offset)| FieldLayout {
                    name: f.name.clone(),
                    dtype: f.dtype,
                    shape: f.shape.clone(),
                    offset,
                })
                .collect(),
        };
        layout.validate()?;
        Ok(layout)
    }

    /// Checks the invariants every reader relies on: at least one field, unique
    /// non-empty names, no zero-sized dimension, every field aligned to its
    /// element size and inside the record, no two fields overlapping, and a
    /// stride that is a multiple of the largest alignment and at most
    /// [`MAX_STRIDE`].
    pub fn validate(&self) -> Result<()> {
        if self.fields.is_empty() {
            return Err(Error::Layout("a record needs at least one field".into()));
        }
        if self.stride == 0 || self.stride > MAX_STRIDE {
            return Err(Error::Layout(format!(
                "stride {} is outside 1..={MAX_STRIDE}",
                self.stride
            )));
        }
        let mut spans = Vec::with_capacity(self.fields.len());
        let mut max_align = 1u64;
        for (i, f) in self.fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(Error::Layout(format!("field #{i} has an empty name")));
            }
            if self.fields[..i].iter().any(|g| g.name == f.name) {
                return Err(Error::Layout(format!(
                    "field name {:?} is repeated",
                    f.name
                )));
            }
            if f.shape.contains(&0) {
                return Err(Error::Layout(format!(
                    "field {:?} has a zero-sized dimension {:?}",
                    f.name, f.shape
                )));
            }
            let align = f.dtype.size() as u64;
            max_align = max_align.max(align);
            if f.offset % align != 0 {
                return Err(Error::Layout(format!(
                    "field {:?} at offset {} is not aligned to {align} bytes",
                    f.name, f.offset
                )));
            }
            let size = f
                .shape
                .iter()
                .try_fold(align, |acc, &d| acc.checked_mul(d))
                .filter(|&s| s <= MAX_STRIDE)
                .ok_or_else(|| Error::Layout(format!("field {:?} is too large", f.name)))?;
            let end = f.offset.checked_add(size).filter(|&e| e <= self.stride);
            let Some(end) = end else {
                return Err(Error::Layout(format!(
                    "field {:?} (offset {}, {size} bytes) extends past the stride {}",
                    f.name, f.offset, self.stride
                )));
            };
            spans.push((f.offset, end, i));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(Error::Layout(format!(
                    "fields {:?} and {:?} overlap",
                    self.fields[w[0].2].name, self.fields[w[1].2].name
                )));
            }
        }
        if !self.stride.is_multiple_of(max_align) {
            return Err(Error::Layout(format!(
                "stride {} is not a multiple of the largest alignment {max_align}",
                self.stride
            )));
        }
        Ok(())
    }

    /// The largest element size of any field (the record's alignment).
    pub fn align(&self) -> u64 {
        self.fields
            .iter()
            .map(|f| f.dtype.size() as u64)
            .max()
            .unwrap_or(1)
    }

    /// Looks a field up by name.
    pub fn field(&self, name: &str) -> Option<&FieldLayout> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The blake3 digest of the layout's canonical text (see docs/FORMAT.md),
    /// stored in every shard header so a shard cannot be paired with the wrong
    /// manifest.
    pub fn digest(&self) -> [u8; 32] {
        *blake3::hash(self.canonical_text().as_bytes()).as_bytes()
    }

    /// The canonical text the digest is computed over.
    pub fn canonical_text(&self) -> String {
        let mut s = format!("tessera-layout/1\nstride={}\n", self.stride);
        for f in &self.fields {
            let dims: Vec<String> = f.shape.iter().map(u64::to_string).collect();
            s.push_str(&format!(
                "{}\t{}\t[{}]\t{}\n",
                f.name,
                f.dtype,
                dims.join(","),
                f.offset
            ));
        }
        s
    }
}

fn round_up(x: u64, align: u64) -> u64 {
    x.div_ceil(align) * align
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_sorts_by_alignment_and_pads_the_stride() {
        let l = RecordLayout::packed(&[
            FieldSpec::new("flag", DType::U8, &[]),
            FieldSpec::new("dense", DType::F32, &[13]),
            FieldSpec::new("id", DType::I64, &[]),
        ])
        .unwrap();
        assert_eq!(l.fields[0].name, "flag");
        assert_eq!(l.field("id").unwrap().offset, 0);
        assert_eq!(l.field("dense").unwrap().offset, 8);
        assert_eq!(l.field("flag").unwrap().offset, 60);
        assert_eq!(l.stride, 64);
        assert_eq!(l.align(), 8);
    }

    #[test]
    fn validation_rejects_broken_layouts() {
        let good = RecordLayout::packed(&[
            FieldSpec::new("a", DType::F32, &[2]),
            FieldSpec::new("b", DType::U16, &[]),
        ])
        .unwrap();
        assert_eq!(good.stride, 12);
        let mut l = good.clone();
        l.fields[1].offset = 6;
        assert!(l.validate().unwrap_err().to_string().contains("overlap"));
        let mut l = good.clone();
        l.fields[1].offset = 9;
        assert!(l.validate().unwrap_err().to_string().contains("aligned"));
        let mut l = good.clone();
        // 8 is a multiple of the alignment 4, but `b` (8..10) no longer fits.
        l.stride = 8;
        assert!(
            l.validate()
                .unwrap_err()
                .to_string()
                .contains("past the stride")
        );
        let mut l = good.clone();
        l.stride = 14;
        assert!(l.validate().unwrap_err().to_string().contains("multiple"));
        let mut l = good.clone();
        l.fields[1].name = "a".into();
        assert!(l.validate().unwrap_err().to_string().contains("repeated"));
        let mut l = good;
        l.fields[0].shape = vec![u64::MAX, 4];
        assert!(l.validate().unwrap_err().to_string().contains("too large"));
    }

    #[test]
    fn digest_changes_with_any_detail() {
        let a = RecordLayout::packed(&[FieldSpec::new("x", DType::F32, &[3])]).unwrap();
        let mut b = a.clone();
        b.fields[0].dtype = DType::I32;
        assert_ne!(a.digest(), b.digest());
        let mut c = a.clone();
        c.fields[0].name = "y".into();
        assert_ne!(a.digest(), c.digest());
        assert_eq!(a.digest(), a.clone().digest());
    }
}
