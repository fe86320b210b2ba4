//! The documents of a batch: the packed field's value in each row, as
//! token ids.
//!
//! A packed field reads a list column of integer ids (tokenized elsewhere),
//! a text column with a `tokenize` step, or a column of conversations (a
//! list of `{role, content}` structs) with a `tokenize` step that has a chat
//! template. A null document, a null or negative id, or an id above
//! `u32::MAX` is an error naming the row; so is a conversation whose loss
//! mask would be all zeros or all ones, unless the step skips those.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::DataType;
use tessera_transform::text::{Chat, Tokenizer};
use tessera_transform::values::{Ints, Lists, Strings, ValueError};

/// A batch's documents, concatenated, and where each ends.
#[derive(Debug, Default)]
pub struct Docs {
    /// Every document's ids, one after the other.
    pub ids: Vec<u32>,
    /// End of each row's document in `ids`.
    pub ends: Vec<usize>,
    /// Conversations: a train bit per id (1 in the assistant replies);
    /// empty for plain documents, whose every token is trained on.
    pub train: Vec<u8>,
    /// Conversations: rows left out (`on_bad_mask: skip`), in order; their
    /// documents are empty.
    pub skipped: Vec<usize>,
}

impl Docs {
    /// Row `r`'s document.
    pub fn get(&self, r: usize) -> &[u32] {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.ids[start..self.ends[r]]
    }

    /// Row `r`'s train bits (empty for plain documents).
    pub fn train(&self, r: usize) -> &[u8] {
        if self.train.is_empty() {
            return &[];
        }
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.train[start..self.ends[r]]
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
    per_row(col.len(), |r, ids, _train| {
        let text = strings.get(r).ok_or_else(|| ValueError {
            row: r,
            message: "the document is null (filter such rows out, or COALESCE to '')".into(),
        })?;
        tok.encode_into(text, ids)
            .map_err(|message| ValueError { row: r, message })?;
        Ok(true)
    })
}

/// Rows per piece of a batch tokenized on one thread.
const ROWS_PER_PIECE: usize = 64;

/// Runs `row` for each of `n` rows on the build's threads, in pieces of
/// consecutive rows, and joins the pieces in row order, so the documents
/// do not depend on the thread count. `row(r, ids, train)` appends row
/// `r`'s ids (and train bits, for conversations) and returns `false` for a
/// row left out (its document empty, its index in `skipped`). The first
/// error in row order wins.
fn per_row<F>(n: usize, row: F) -> Result<Docs, ValueError>
where
    F: Fn(usize, &mut Vec<u32>, &mut Vec<u8>) -> Result<bool, ValueError> + Sync,
{
    use rayon::prelude::*;
    let pieces: Vec<Result<Docs, ValueError>> = (0..n.div_ceil(ROWS_PER_PIECE))
        .into_par_iter()
        .map(|p| {
            let mut piece = Docs::default();
            for r in p * ROWS_PER_PIECE..((p + 1) * ROWS_PER_PIECE).min(n) {
                let kept = row(r, &mut piece.ids, &mut piece.train)?;
                if !kept {
                    piece.skipped.push(r);
                }
                piece.ends.push(piece.ids.len());
            }
            Ok(piece)
        })
        .collect();
    let mut docs = Docs::default();
    for piece in pieces {
        let piece = piece?;
        let base = docs.ids.len();
        docs.ids.extend_from_slice(&piece.ids);
        docs.train.extend_from_slice(&piece.train);
        docs.ends.extend(piece.ends.iter().map(|e| base + e));
        docs.skipped.extend_from_slice(&piece.skipped);
    }
    Ok(docs)
}

/// Reads conversations (a list of `{role, content}` structs per row),
/// renders each with the chat template and tokenizes it with a train bit
/// per token. A conversation whose mask comes out all zeros (no assistant
/// reply, or an empty one) or all ones (nothing but replies) is an error
/// naming the row, or with `skip_bad` left out and listed in `skipped`.
pub fn from_chats(
    col: &ArrayRef,
    tok: &Tokenizer,
    chat: &Chat,
    skip_bad: bool,
) -> Result<Docs, ValueError> {
    let turns = Turns::read(col)?;
    per_row(col.len(), |r, ids, train| {
        let mut messages = Vec::new();
        turns.row(r, &mut messages)?;
        let rendered = chat
            .template
            .render(&messages, &chat.bos, &chat.eos)
            .map_err(|message| ValueError { row: r, message })?;
        let start = ids.len();
        tok.encode_chat(&rendered, ids, train)
            .map_err(|message| ValueError { row: r, message })?;
        let bits = &train[start..];
        let bad = if bits.iter().all(|&b| b == 0) {
            Some(
                "the conversation's loss mask is all zeros: no token is in an assistant reply \
                 (on_bad_mask: skip leaves such rows out)",
            )
        } else if bits.iter().all(|&b| b == 1) {
            Some(
                "the conversation's loss mask is all ones: every token is in an assistant reply, \
                 so nothing is prompt (on_bad_mask: skip leaves such rows out)",
            )
        } else {
            None
        };
        match bad {
            None => Ok(true),
            Some(message) if !skip_bad => Err(ValueError {
                row: r,
                message: message.into(),
            }),
            Some(_) => {
                ids.truncate(start);
                train.truncate(start);
                Ok(false)
            }
        }
    })
}

/// A column of conversations: per row, a list of `{role, content}` structs
/// (other struct fields are ignored).
struct Turns<'a> {
    offsets: Vec<usize>,
    lists: &'a ArrayRef,
    roles: Strings<'a>,
    contents: Strings<'a>,
    structs: &'a datafusion::arrow::array::StructArray,
}

impl<'a> Turns<'a> {
    fn read(col: &'a ArrayRef) -> Result<Turns<'a>, ValueError> {
        let shape = |found: &DataType| ValueError {
            row: 0,
            message: format!(
                "a tokenize step with a chat_template reads conversations: a list of structs \
                 with string fields role and content; the column is {found}"
            ),
        };
        let (offsets, values): (Vec<usize>, &ArrayRef) = match col.data_type() {
            DataType::List(_) => {
                let l = col.as_list::<i32>();
                (
                    l.value_offsets().iter().map(|&o| o as usize).collect(),
                    l.values(),
                )
            }
            DataType::LargeList(_) => {
                let l = col.as_list::<i64>();
                (
                    l.value_offsets().iter().map(|&o| o as usize).collect(),
                    l.values(),
                )
            }
            other => return Err(shape(other)),
        };
        let structs = values
            .as_struct_opt()
            .ok_or_else(|| shape(col.data_type()))?;
        let child = |name: &str| {
            structs
                .column_by_name(name)
                .ok_or_else(|| shape(col.data_type()))
        };
        let strings = |c: &'a ArrayRef| Strings::read(c).map_err(|_| shape(col.data_type()));
        Ok(Turns {
            offsets,
            lists: col,
            roles: strings(child("role")?)?,
            contents: strings(child("content")?)?,
            structs,
        })
    }

    /// Row `r`'s messages into `out`; a null conversation, message, role or
    /// content is an error naming the row.
    fn row(&self, r: usize, out: &mut Vec<(String, String)>) -> Result<(), ValueError> {
        out.clear();
        let fail = |message: String| ValueError { row: r, message };
        if self.lists.is_null(r) {
            return Err(fail(
                "the conversation is null (filter such rows out)".into(),
            ));
        }
        for (k, e) in (self.offsets[r]..self.offsets[r + 1]).enumerate() {
            if self.structs.is_null(e) {
                return Err(fail(format!("message {k} is null")));
            }
            let role = self
                .roles
                .get(e)
                .ok_or_else(|| fail(format!("message {k} has a null role")))?;
            let content = self
                .contents
                .get(e)
                .ok_or_else(|| fail(format!("message {k} has a null content")))?;
            out.push((role.to_string(), content.to_string()));
        }
        Ok(())
    }
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
