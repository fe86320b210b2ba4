//! The `pack:` section: which token field is packed into windows, and how.

use super::read::{Ctx, MapView};
use super::{Field, FieldInput, SpecError};

/// How documents are laid into windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Concatenate the documents and cut the stream every `length` tokens.
    Concat,
    /// Best-fit decreasing within groups of `group_docs` consecutive
    /// documents: documents stay whole unless longer than a window.
    BestFit,
}

/// What happens to a document longer than a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Cut into window-sized pieces.
    Split,
    /// Keep the first window's worth of tokens.
    Truncate,
    /// Leave the document out.
    Drop,
}

/// The `pack:` section.
#[derive(Clone, Debug, PartialEq)]
pub struct PackOptions {
    /// The field whose documents are packed (a token field).
    pub field: String,
    /// Input tokens per window.
    pub length: u32,
    /// How documents are laid into windows.
    pub algorithm: Algorithm,
    /// Store `length + 1` tokens per window, so that inputs are
    /// `tokens[:-1]` and next-token labels `tokens[1:]`.
    pub labels: bool,
    /// What happens to a document longer than a window.
    pub overflow: Overflow,
    /// `best_fit`: documents per packing group.
    pub group_docs: u64,
    /// The token id of padding slots.
    pub pad_id: u32,
}

/// Default documents per `best_fit` group.
pub const DEFAULT_GROUP_DOCS: u64 = 10_000;
/// The largest window.
pub const MAX_LENGTH: u32 = 1 << 20;

/// The names of the fields a packed set stores besides the token field.
pub const SEGMENT_IDS: &str = "segment_ids";
/// Positions within each document piece.
pub const POSITIONS: &str = "positions";
/// 1 where a position's loss counts.
pub const LOSS_MASK: &str = "loss_mask";

impl PackOptions {
    /// Token slots per window: `length`, plus one with labels.
    pub fn capacity(&self) -> u32 {
        self.length + u32::from(self.labels)
    }

    /// The canonical JSON of the section (docs/SPEC.md, "Canonical form").
    pub fn canonical_json(&self) -> serde_json::Value {
        serde_json::json!({
            "algorithm": self.algorithm.name(),
            "field": self.field,
            "group_docs": self.group_docs,
            "labels": self.labels,
            "length": self.length,
            "overflow": self.overflow.name(),
            "pad_id": self.pad_id,
        })
    }
}

impl Algorithm {
    /// The spec's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Concat => "concat",
            Algorithm::BestFit => "best_fit",
        }
    }
}

impl Overflow {
    /// The spec's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Overflow::Split => "split",
            Overflow::Truncate => "truncate",
            Overflow::Drop => "drop",
        }
    }
}

const PACK_KEYS: &[&str] = &[
    "field",
    "length",
    "algorithm",
    "labels",
    "overflow",
    "group_docs",
    "pad_id",
];

/// A `tokenize` field stores `length` ids per record, unless it is the
/// packed field (whose documents stay whole until packing).
pub(super) fn check_token_lengths(
    ctx: &Ctx<'_>,
    top: &MapView<'_>,
    fields: &[Field],
    pack: Option<&PackOptions>,
) -> Result<(), SpecError> {
    for f in fields {
        let packed = pack.is_some_and(|p| p.field == f.name);
        let chat = f
            .transforms
            .iter()
            .any(|t| matches!(t, super::Transform::Tokenize(tok) if tok.chat_template.is_some()));
        let message = if chat && !packed {
            "a tokenize step with a chat_template needs its field packed (pack: { field: \
             NAME, ... }): the loss mask of the assistant turns is stored with the windows"
        } else if f.length.is_none() && !packed && f.transforms.iter().any(is_tokenize) {
            "tokenize needs length: the number of token ids a record stores (longer \
             documents are cut, shorter ones padded with pad), or a pack: section that \
             packs the field into windows"
        } else {
            continue;
        };
        if let Some(fo) = top.get_some("fields")
            && let Ok(m) = fo.item().any_map(ctx)
            && let Some(o) = m.get_some(&f.name)
            && let Ok(fm) = o.item().any_map(ctx)
            && let Some(t) = fm.get_some("transform")
        {
            return Err(t.item().error(ctx, message));
        }
        return Err(ctx.error(&format!("fields.{}", f.name), None, message));
    }
    Ok(())
}

/// Reads `pack:` (if present) and checks it against the fields.
pub(super) fn read_pack(
    ctx: &Ctx<'_>,
    top: &MapView<'_>,
    fields: &[Field],
) -> Result<Option<PackOptions>, SpecError> {
    let Some(owned) = top.get_some("pack") else {
        return Ok(None);
    };
    let section = owned.item();
    let map = section.map(ctx, PACK_KEYS)?;
    let length_owned = map.require(ctx, "length")?;
    let length_item = length_owned.item();
    let length = length_item.u64_at_least(ctx, 1)?;
    if length > u64::from(MAX_LENGTH) {
        return Err(length_item.error(
            ctx,
            format!("a window holds at most {MAX_LENGTH} tokens, not {length}"),
        ));
    }
    let field = match map.get_some("field") {
        Some(o) => o.item().string(ctx)?.to_string(),
        None if fields.len() == 1 => fields[0].name.clone(),
        None => {
            return Err(section.error(
                ctx,
                "name the token field to pack with `field:` (the spec has several fields)",
            ));
        }
    };
    let algorithm = match map.get_some("algorithm") {
        None => Algorithm::BestFit,
        Some(o) => {
            let item = o.item();
            match item.string(ctx)? {
                "concat" => Algorithm::Concat,
                "best_fit" => Algorithm::BestFit,
                other => {
                    return Err(item.error(
                        ctx,
                        format!("unknown algorithm {other:?}; use concat or best_fit"),
                    ));
                }
            }
        }
    };
    let overflow = match map.get_some("overflow") {
        None => Overflow::Split,
        Some(o) => {
            let item = o.item();
            match item.string(ctx)? {
                "split" => Overflow::Split,
                "truncate" => Overflow::Truncate,
                "drop" => Overflow::Drop,
                other => {
                    return Err(item.error(
                        ctx,
                        format!("unknown overflow {other:?}; use split, truncate or drop"),
                    ));
                }
            }
        }
    };
    let labels = match map.get_some("labels") {
        Some(o) => o.item().boolean(ctx)?,
        None => false,
    };
    let group_docs = match map.get_some("group_docs") {
        Some(o) => {
            let item = o.item();
            if algorithm != Algorithm::BestFit {
                return Err(item.error(ctx, "group_docs applies only to algorithm: best_fit"));
            }
            item.u64_at_least(ctx, 1)?
        }
        None => DEFAULT_GROUP_DOCS,
    };
    let pad_id = match map.get_some("pad_id") {
        Some(o) => {
            let item = o.item();
            let v = item.u64_at_least(ctx, 0)?;
            u32::try_from(v).map_err(|_| item.error(ctx, format!("{v} is not a u32 token id")))?
        }
        None => 0,
    };
    let opts = PackOptions {
        field,
        length: length as u32,
        algorithm,
        labels,
        overflow,
        group_docs,
        pad_id,
    };
    check_fields(ctx, top, &map, &opts, fields)?;
    Ok(Some(opts))
}

/// A packed set stores windows, not rows: its only field is the packed one,
/// an integer field holding a whole document per row.
fn check_fields(
    ctx: &Ctx<'_>,
    top: &MapView<'_>,
    map: &MapView<'_>,
    opts: &PackOptions,
    fields: &[Field],
) -> Result<(), SpecError> {
    let err = |message: String| match map.get_some("field") {
        Some(o) => o.item().error(ctx, message),
        None => ctx.error("pack", None, message),
    };
    let Some(f) = fields.iter().find(|f| f.name == opts.field) else {
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        return Err(err(format!(
            "no field named {:?} to pack; the fields are {}",
            opts.field,
            names.join(", ")
        )));
    };
    // An error at `fields.<name>`, with its line.
    let at_field = |name: &str, message: String| -> SpecError {
        if let Some(fo) = top.get_some("fields")
            && let Ok(m) = fo.item().any_map(ctx)
            && let Some(o) = m.get_some(name)
        {
            return o.item().error(ctx, message);
        }
        ctx.error(&format!("fields.{name}"), None, message)
    };
    if let Some(other) = fields.iter().find(|g| g.name != opts.field) {
        return Err(at_field(
            &other.name,
            format!(
                "a packed set stores windows of field {:?}, not rows, so it can have no other \
                 field (its records get {SEGMENT_IDS}, {POSITIONS} and {LOSS_MASK}); build \
                 {:?} in a spec without pack",
                opts.field, other.name
            ),
        ));
    }
    let at = |message: String| at_field(&f.name, message);
    if f.dtype.is_float() {
        return Err(at(format!(
            "a packed field holds token ids: an integer dtype (u16, u32, i32, i64), not {}",
            f.dtype.name()
        )));
    }
    if matches!(f.input, FieldInput::Columns(_)) {
        return Err(at(
            "a packed field reads one column or expr of documents, not `columns`".into(),
        ));
    }
    if f.length.is_some() || f.bytes.is_some() {
        return Err(at(
            "a packed field keeps each document whole; the window size is pack.length, so \
             remove `length`/`bytes` from the field"
                .into(),
        ));
    }
    if f.fill_null.is_some() {
        return Err(at(
            "a packed field has no fill_null: a null document is an error naming its row".into(),
        ));
    }
    if let Some(t) = f.transforms.iter().find(|t| !is_tokenize(t)) {
        return Err(at(format!(
            "a packed field's only transform can be tokenize, not {}",
            t.name()
        )));
    }
    Ok(())
}

fn is_tokenize(t: &super::Transform) -> bool {
    t.name() == "tokenize"
}
