//! The documents of a batch: the packed field's value in each row, as
//! token ids.
//!
//! A packed field reads a list column of integer ids (tokenized elsewhere)
//! or a text column with a `tokenize` step. A null document, a null or
//! negative id, or an id above `u32::MAX` is an error naming the row.

use datafusion::arrow::array::ArrayRef;
use tessera_transform::text::Tokenizer;
use tessera_transform::values::{Ints, Lists, Strings, ValueError};

/// A batch's documents, concatenated, and where each ends.
#[derive(Debug, Default)]
pub struct Docs {
    /// Every document's ids, one after the other.
    pub ids: Vec<u32>,
    /// End of each row's document in `ids`.
    pub ends: Vec<usize>,
}

impl Docs {
    /// Row `r`'s document.
    pub fn get(&self, r: usize) -> &[u32] {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.ids[start..self.ends[r]]
    }
}

/// Reads documents from a list column of integer ids.
pub fn from_lists(col: &ArrayRef) -> Result<Docs, ValueError> {
    let lists = Lists::read(col).ok_or_else(|| ValueError {
        row: 0,
        message: format!(
            "a packed field reads token ids: a list of integers, or text with a tokenize \
             step; the column is {}",
            col.data_type()
        ),
    })?;
    let vals = Ints::read(&lists.child).map_err(|e| ValueError {
        row: 0,
        message: format!("a list element: {}", e.message),
    })?;
    let mut docs = Docs::default();
    for r in 0..col.len() {
        let range = lists.range(r).ok_or_else(|| ValueError {
            row: r,
            message: "the document is null (filter such rows out, or COALESCE to an empty list)"
                .into(),
        })?;
        for e in range {
            let v = vals.get(e).ok_or_else(|| ValueError {
                row: r,
                message: "a token id is null".into(),
            })?;
            let id = u32::try_from(v).map_err(|_| ValueError {
                row: r,
                message: format!("token id {v} is not in 0..2^32"),
            })?;
            docs.ids.push(id);
        }
        docs.ends.push(docs.ids.len());
    }
    Ok(docs)
}

/// Reads documents from a text column through a tokenizer.
pub fn from_text(col: &ArrayRef, tok: &Tokenizer) -> Result<Docs, ValueError> {
    let strings = Strings::read(col)?;
    let mut docs = Docs::default();
    for r in 0..col.len() {
        let text = strings.get(r).ok_or_else(|| ValueError {
            row: r,
            message: "the document is null (filter such rows out, or COALESCE to '')".into(),
        })?;
        tok.encode_into(text, &mut docs.ids)
            .map_err(|message| ValueError { row: r, message })?;
        docs.ends.push(docs.ids.len());
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::ListArray;
    use datafusion::arrow::datatypes::Int64Type;
    use std::sync::Arc;

    #[test]
    fn lists_become_documents_and_bad_ids_name_the_row() {
        let col: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
            Some(vec![Some(7)]),
        ]));
        let d = from_lists(&col).expect("docs");
        assert_eq!(d.get(0), &[1, 2]);
        assert_eq!(d.get(1), &[] as &[u32]);
        assert_eq!(d.get(2), &[7]);
        let bad: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1)]),
            Some(vec![Some(-3)]),
        ]));
        let e = from_lists(&bad).unwrap_err();
        assert_eq!(e.row, 1);
        let null: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1)]),
            None,
        ]));
        assert_eq!(from_lists(&null).unwrap_err().row, 1);
    }
}
