//! Writing one input column of a field into the records, by the path its
//! chain takes (bytes, text, tokens, images, vocabulary ids or hashes,
//! floats, integers, and lists of numbers), checked against the stored
//! dtype. Errors name the field and the row.

use super::{EncodeError, Skipped, SlotStats};
use crate::chain::Chain;
use crate::semantics::{self, NULL_KEY};
use crate::text;
use crate::values::{Binaries, Floats, Ints, Lists, Strings, ValueError, put_float, put_int};
use arrow_array::ArrayRef;
use rayon::prelude::*;
use tessera_reader::DType;

/// One input column of one field, and where its values go.
pub(super) struct ColumnEncoder<'a> {
    pub(super) chain: &'a Chain,
    pub(super) w: Writer,
    pub(super) col: &'a ArrayRef,
    /// Byte offset of this column's values within the field.
    pub(super) slot: usize,
    pub(super) stats: &'a SlotStats,
    pub(super) rows: usize,
}

impl ColumnEncoder<'_> {
    /// The error for a bad value, naming the field.
    fn fail(&self, error: ValueError) -> EncodeError {
        EncodeError::Value {
            field: self.chain.field.name.clone(),
            error,
        }
    }

    /// `fail` for a message about row `row`.
    fn at_row(&self, row: usize) -> impl Fn(String) -> EncodeError + '_ {
        move |message| self.fail(ValueError { row, message })
    }

    /// A `bytes` field: exactly `len` bytes per row.
    pub(super) fn bytes(&self, len: usize, recs: &mut [u8]) -> Result<(), EncodeError> {
        let w = self.w;
        let bin = Binaries::read(self.col).map_err(|e| self.fail(e))?;
        for r in 0..self.rows {
            let v = bin.get(r).ok_or_else(|| {
                self.at_row(r)(format!(
                    "the value is null; a bytes field holds exactly {len} bytes \
                     in every record (filter such rows out, or give a value in an \
                     expr)"
                ))
            })?;
            if v.len() != len {
                return Err(self.at_row(r)(format!(
                    "the value has {} bytes; the field holds exactly {len}",
                    v.len()
                )));
            }
            let at = r * w.stride + w.off;
            recs[at..at + len].copy_from_slice(v);
        }
        Ok(())
    }

    /// A text field of up to `len` bytes per row (cut at a character
    /// boundary, padded); returns the bytes each row stored.
    pub(super) fn utf8(&self, len: usize, recs: &mut [u8]) -> Result<Vec<u64>, EncodeError> {
        let w = self.w;
        let s = Strings::read(self.col).map_err(|e| self.fail(e))?;
        let pad = self.chain.field.pad as u8;
        let mut stored = Vec::with_capacity(self.rows);
        for r in 0..self.rows {
            let v = s
                .get(r)
                .ok_or_else(|| self.at_row(r)(text_null("text", len)))?;
            let t = text::truncate_utf8(v, len).as_bytes();
            let at = r * w.stride + w.off;
            recs[at..at + t.len()].copy_from_slice(t);
            if pad != 0 {
                recs[at + t.len()..at + len].fill(pad);
            }
            stored.push(t.len() as u64);
        }
        Ok(stored)
    }

    /// A tokenize field: token ids, truncated and padded to the field's
    /// length; returns the tokens each row stored.
    pub(super) fn tokens(&self, recs: &mut [u8]) -> Result<Vec<u64>, EncodeError> {
        let (w, f, n) = (self.w, &self.chain.field, self.rows);
        let tokenizer = self
            .chain
            .tokenize()
            .and_then(|t| t.loaded.clone())
            .ok_or_else(|| self.at_row(0)("the tokenizer file has not been loaded".to_string()))?;
        let s = Strings::read(self.col).map_err(|e| self.fail(e))?;
        let len = f.length.unwrap_or(0) as usize;
        for r in 0..n {
            if s.get(r).is_none() {
                return Err(self.at_row(r)(text_null("tokenize", len)));
            }
        }
        // Documents are tokenized in parallel on the current
        // pool (the build's); the ids are written in row order.
        let ids: Vec<Result<Vec<u32>, String>> = (0..n)
            .into_par_iter()
            .map(|r| tokenizer.encode(s.get(r).unwrap_or_default()))
            .collect();
        let mut stored = Vec::with_capacity(n);
        for (r, ids) in ids.into_iter().enumerate() {
            let ids = ids.map_err(self.at_row(r))?;
            let k = ids.len().min(len);
            for (i, &id) in ids[..k].iter().enumerate() {
                w.int(recs, r, i * w.dtype.size(), i128::from(id))
                    .map_err(self.at_row(r))?;
            }
            w.pad(recs, r, k, len, f.pad).map_err(self.at_row(r))?;
            stored.push(k as u64);
        }
        Ok(stored)
    }

    /// An image field: decoded and resized pixels; a row that fails is an
    /// error, or skipped (recorded in `skipped`) as the field asks.
    pub(super) fn image(
        &self,
        recs: &mut [u8],
        skipped: &mut Vec<Skipped>,
    ) -> Result<(), EncodeError> {
        let w = self.w;
        let step = self
            .chain
            .image()
            .ok_or_else(|| self.at_row(0)("the field has no image step".to_string()))?;
        let bad = crate::image::rows::encode(step, self.col, recs, w.stride, w.off)
            .map_err(|e| self.fail(e))?;
        for (row, message) in bad {
            match step.on_error {
                crate::image::OnError::Error => {
                    return Err(self.fail(ValueError { row, message }));
                }
                crate::image::OnError::Skip => skipped.push(Skipped {
                    row,
                    field: self.chain.field.name.clone(),
                    message,
                }),
            }
        }
        Ok(())
    }

    /// A categorical text column: each value's vocabulary id (out of
    /// vocabulary: the `oov` id), or its hash bucket with `buckets`.
    pub(super) fn text(&self, buckets: Option<u64>, recs: &mut [u8]) -> Result<(), EncodeError> {
        let s = Strings::read(self.col).map_err(|e| self.fail(e))?;
        for r in 0..self.rows {
            let value = s.get(r);
            let id: i128 = match (buckets, self.stats) {
                (Some(b), _) => i128::from(semantics::hash_bucket(
                    value.map(str::as_bytes).unwrap_or(NULL_KEY),
                    b,
                )),
                (None, SlotStats::Vocab { ids, oov }) => {
                    i128::from(value.and_then(|v| ids.get(v).copied()).unwrap_or(*oov))
                }
                (None, _) => 0,
            };
            self.w.int(recs, r, self.slot, id).map_err(self.at_row(r))?;
        }
        Ok(())
    }

    /// A float column, or a column of float lists; for lists, returns the
    /// elements each row stored.
    pub(super) fn floats(&self, recs: &mut [u8]) -> Result<Option<Vec<u64>>, EncodeError> {
        let (w, f, slot) = (self.w, &self.chain.field, self.slot);
        let stat = match self.stats {
            SlotStats::Numeric(s) => Some(s),
            _ => None,
        };
        let put = |recs: &mut [u8], r: usize, k: usize, x: f64| {
            let at = r * w.stride + w.off + slot + k * w.dtype.size();
            put_float(&mut recs[at..], w.dtype, self.chain.apply_float(x, stat))
                .map_err(self.at_row(r))
        };
        match (Lists::read(self.col), f.length) {
            (Some(lists), Some(len)) => {
                let vals = Floats::read(&lists.child).map_err(|e| self.fail(list_element(e)))?;
                let mut stored = Vec::with_capacity(self.rows);
                for r in 0..self.rows {
                    let range = lists.range(r).unwrap_or(0..0);
                    let mut k = 0;
                    for e in range {
                        if k == len as usize {
                            break;
                        }
                        let x = vals
                            .get(e)
                            .or(f.fill_null)
                            .ok_or_else(|| self.fail(null_error(r)))?;
                        put(recs, r, k, x)?;
                        k += 1;
                    }
                    w.pad(recs, r, k, len as usize, f.pad)
                        .map_err(self.at_row(r))?;
                    stored.push(k as u64);
                }
                Ok(Some(stored))
            }
            (Some(_), None) => Err(self.fail(list_without_length())),
            (None, _) => {
                let vals = Floats::read(self.col).map_err(|e| self.fail(e))?;
                for r in 0..self.rows {
                    let x = vals
                        .get(r)
                        .or(f.fill_null)
                        .ok_or_else(|| self.fail(null_error(r)))?;
                    put(recs, r, 0, x)?;
                }
                Ok(None)
            }
        }
    }

    /// An integer column, or a column of integer lists; for lists, returns
    /// the elements each row stored.
    pub(super) fn ints(&self, recs: &mut [u8]) -> Result<Option<Vec<u64>>, EncodeError> {
        let (w, f, slot) = (self.w, &self.chain.field, self.slot);
        let fill = self.chain.int_fill().map_err(self.at_row(0))?;
        let value = |r: usize, v: Option<i128>| -> Result<i128, EncodeError> {
            let v = v.or(fill).ok_or_else(|| self.fail(null_error(r)))?;
            self.chain.apply_int(v).map_err(self.at_row(r))
        };
        match (Lists::read(self.col), f.length) {
            (Some(lists), Some(len)) => {
                let vals = Ints::read(&lists.child).map_err(|e| self.fail(list_element(e)))?;
                let mut stored = Vec::with_capacity(self.rows);
                for r in 0..self.rows {
                    let range = lists.range(r).unwrap_or(0..0);
                    let mut k = 0;
                    for e in range {
                        if k == len as usize {
                            break;
                        }
                        let v = value(r, vals.get(e))?;
                        w.int(recs, r, slot + k * w.dtype.size(), v)
                            .map_err(self.at_row(r))?;
                        k += 1;
                    }
                    w.pad(recs, r, k, len as usize, f.pad)
                        .map_err(self.at_row(r))?;
                    stored.push(k as u64);
                }
                Ok(Some(stored))
            }
            (Some(_), None) => Err(self.fail(list_without_length())),
            (None, _) => {
                let vals = Ints::read(self.col).map_err(|e| self.fail(e))?;
                for r in 0..self.rows {
                    let v = value(r, vals.get(r))?;
                    w.int(recs, r, slot, v).map_err(self.at_row(r))?;
                }
                Ok(None)
            }
        }
    }
}

/// A list element's error, as the field's (the row is not known).
fn list_element(e: ValueError) -> ValueError {
    ValueError {
        row: 0,
        message: format!("a list element: {}", e.message),
    }
}

/// Where one field's values go in the records.
#[derive(Clone, Copy)]
pub(super) struct Writer {
    pub(super) stride: usize,
    pub(super) off: usize,
    pub(super) dtype: DType,
    pub(super) one_hot: Option<u64>,
}

impl Writer {
    /// Writes integer `v` (or its one-hot expansion) for row `r` at byte
    /// `slot` of the field.
    #[inline]
    pub(super) fn int(
        &self,
        recs: &mut [u8],
        r: usize,
        slot: usize,
        v: i128,
    ) -> Result<(), String> {
        let base = r * self.stride + self.off + slot;
        match self.one_hot {
            Some(classes) => {
                if v < 0 || v >= i128::from(classes) {
                    return Err(format!("class {v} is outside one_hot's 0..{classes}"));
                }
                put_int(
                    &mut recs[base + v as usize * self.dtype.size()..],
                    self.dtype,
                    1,
                )
            }
            None => put_int(&mut recs[base..], self.dtype, v),
        }
    }

    /// Fills elements `from..len` of row `r`'s list with `pad`.
    pub(super) fn pad(
        &self,
        recs: &mut [u8],
        r: usize,
        from: usize,
        len: usize,
        pad: f64,
    ) -> Result<(), String> {
        for p in from..len {
            let at = r * self.stride + self.off + p * self.dtype.size();
            put_float(&mut recs[at..], self.dtype, pad)?;
        }
        Ok(())
    }
}

fn text_null(kind: &str, len: usize) -> String {
    let what = if kind == "text" {
        format!("a text field stores up to {len} bytes of text in every record")
    } else {
        "a tokenize field reads text in every record".to_string()
    };
    format!(
        "the value is null; {what} (filter such rows out, or give a value in an expr, e.g. \
         COALESCE(x, ''))"
    )
}

fn null_error(row: usize) -> ValueError {
    ValueError {
        row,
        message: "the value is null (set fill_null on the field to replace nulls)".into(),
    }
}

fn list_without_length() -> ValueError {
    ValueError {
        row: 0,
        message: "the column holds lists; set `length` to pad or truncate them".into(),
    }
}
