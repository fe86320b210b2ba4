//! `fields:` — output fields: dtype, input, shape keys and nulls. The
//! transforms and their rules are in `transforms.rs`.

use super::read::{Ctx, Item, MapView, Owned};
use super::suggest::did_you_mean;
use super::transforms::{check_transforms, int_max, int_min, read_transforms, transform_name};
use super::{Field, FieldInput, NonFinite, SpecError, Transform, is_identifier};
use tessera_reader::{DType, MAX_STRIDE};

const FIELD_KEYS: &[&str] = &[
    "dtype",
    "column",
    "columns",
    "expr",
    "length",
    "pad",
    "bytes",
    "text",
    "length_of",
    "fill_null",
    "transform",
    "nonfinite",
];
const INPUT_KEYS: [&str; 4] = ["column", "columns", "expr", "length_of"];

pub(super) fn read_fields(ctx: &Ctx<'_>, top: &MapView<'_>) -> Result<Vec<Field>, SpecError> {
    let owned = top.require(ctx, "fields")?;
    let map = owned.item().any_map(ctx)?;
    if map.entries.is_empty() {
        return Err(owned.item().error(ctx, "needs at least one field"));
    }
    let mut fields = Vec::with_capacity(map.entries.len());
    for entry in map.entries {
        let owned = map.owned(entry);
        let item = owned.item();
        if !is_identifier(&entry.key) {
            return Err(item.error(
                ctx,
                format!(
                    "field name {:?} is not an identifier (letters, digits and '_', not starting with a digit)",
                    entry.key
                ),
            ));
        }
        let field = read_field(ctx, &item, &entry.key)?;
        fields.push(field);
    }
    for (entry, field) in map.entries.iter().zip(&fields) {
        if let FieldInput::LengthOf(target) = &field.input {
            check_length_of(ctx, &map.owned(entry).item(), field, target, &fields)?;
        }
    }
    check_record_size(ctx, &map, &fields)?;
    Ok(fields)
}

/// Every record holds every field, so the record may not outgrow the
/// format's [`MAX_STRIDE`]. Checked here, where the field that breaks the
/// limit can be named with its line; the layout itself is computed later.
/// Fields are packed without padding between them (largest element first),
/// so the record's size is the sum of the fields' sizes rounded up to the
/// largest element size.
fn check_record_size(ctx: &Ctx<'_>, map: &MapView<'_>, fields: &[Field]) -> Result<(), SpecError> {
    let limit = format!("a record may take at most {MAX_STRIDE} bytes (1 GiB)");
    let mut total: u64 = 0;
    let mut align: u64 = 1;
    for (entry, field) in map.entries.iter().zip(fields) {
        let owned = map.owned(entry);
        let elem = field.dtype.size() as u64;
        let shape = field.shape();
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        let size = shape
            .iter()
            .try_fold(elem, |acc, &d| acc.checked_mul(d))
            .filter(|&s| s <= MAX_STRIDE);
        let Some(size) = size else {
            return Err(owned.item().error(
                ctx,
                format!(
                    "one value of this field takes {} x {elem} bytes ({} of shape [{}]), more \
                     than a whole record may: {limit}",
                    dims.join(" x "),
                    field.dtype,
                    dims.join(", ")
                ),
            ));
        };
        align = align.max(elem);
        total = total.saturating_add(size);
        if total.div_ceil(align).saturating_mul(align) > MAX_STRIDE {
            return Err(owned.item().error(
                ctx,
                format!(
                    "the record grows to {total} bytes with this field ({size} of them its \
                     own); {limit}"
                ),
            ));
        }
    }
    Ok(())
}

/// A `length_of` field names a field that stores a per-row length (text,
/// a list with `length`, tokenize), and its integer dtype holds the largest
/// count that field can store.
fn check_length_of(
    ctx: &Ctx<'_>,
    item: &Item<'_>,
    field: &Field,
    target: &str,
    fields: &[Field],
) -> Result<(), SpecError> {
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    let Some(t) = fields.iter().find(|f| f.name == target) else {
        return Err(item.error(
            ctx,
            format!(
                "length_of names no field: {target:?}{}",
                did_you_mean(target, &names)
            ),
        ));
    };
    let max = match (t.text, t.length, &t.input) {
        (Some(n), _, _) => n,
        (_, Some(n), FieldInput::Column(_) | FieldInput::Expr(_)) => n,
        _ => {
            return Err(item.error(
                ctx,
                format!(
                    "length_of needs a text field, a list field (length) or a tokenize field; \
                     {target} stores the same length in every record"
                ),
            ));
        }
    };
    let unit = if t.text.is_some() {
        "bytes"
    } else if matches!(t.transforms.first(), Some(Transform::Tokenize(_))) {
        "tokens"
    } else {
        "elements"
    };
    let dtype = field.dtype;
    if dtype.is_float() || int_max(dtype) < u128::from(max) {
        return Err(item.error(
            ctx,
            format!(
                "{target} stores up to {max} {unit} a record, which dtype {dtype} cannot hold; \
                 use an integer dtype that can"
            ),
        ));
    }
    Ok(())
}

fn read_field(ctx: &Ctx<'_>, item: &Item<'_>, name: &str) -> Result<Field, SpecError> {
    let map = item.map(ctx, FIELD_KEYS)?;
    // A text field is bytes: dtype u8 may be left out.
    let dtype = match map.get_some("dtype") {
        Some(owned) => read_dtype(ctx, &owned.item())?,
        None if map.get_some("text").is_some() => DType::U8,
        None => return Err(map.missing(ctx, "dtype")),
    };
    let input = read_input(ctx, &map)?;
    if let FieldInput::LengthOf(target) = &input {
        return length_of_field(ctx, &map, name, dtype, target.clone());
    }
    let length = read_length(ctx, &map, &input)?;
    let pad = read_pad(ctx, &map, dtype, length)?;
    let bytes = read_bytes(ctx, &map, dtype, &input, length)?;
    let text = read_text(ctx, &map, dtype)?;
    let transforms = read_field_transforms(ctx, &map, dtype, &input, bytes)?;
    let fill_null = read_fill_null(ctx, &map, dtype, bytes, &transforms)?;
    let nonfinite = read_nonfinite(ctx, &map, &transforms)?;
    Ok(Field {
        name: name.to_string(),
        dtype,
        input,
        length,
        pad,
        bytes,
        text,
        fill_null,
        transforms,
        nonfinite,
    })
}

/// A `length_of` field: only `dtype` besides.
fn length_of_field(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    name: &str,
    dtype: DType,
    target: String,
) -> Result<Field, SpecError> {
    if let Some(other) = map
        .entries
        .iter()
        .find(|e| !matches!(e.key.as_str(), "dtype" | "length_of"))
    {
        return Err(map.owned(other).item().error(
            ctx,
            format!(
                "a length_of field stores how much {target} stored and takes only dtype, \
                 not {}",
                other.key
            ),
        ));
    }
    Ok(Field {
        name: name.to_string(),
        dtype,
        input: FieldInput::LengthOf(target),
        length: None,
        pad: 0.0,
        bytes: None,
        text: None,
        fill_null: None,
        transforms: Vec::new(),
        nonfinite: NonFinite::Error,
    })
}

/// `length:` (list fields).
fn read_length(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    input: &FieldInput,
) -> Result<Option<u64>, SpecError> {
    Ok(match map.get_some("length") {
        Some(owned) => {
            if matches!(input, FieldInput::Columns(_)) {
                return Err(owned.item().error(
                    ctx,
                    "length is for list columns and cannot be combined with columns",
                ));
            }
            Some(owned.item().u64_at_least(ctx, 1)?)
        }
        None => None,
    })
}

/// `pad:`, which needs `length` or `text`.
fn read_pad(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    dtype: DType,
    length: Option<u64>,
) -> Result<f64, SpecError> {
    Ok(match map.get_some("pad") {
        Some(owned) => {
            let item = owned.item();
            if length.is_none() && map.get_some("text").is_none() {
                return Err(item.error(
                    ctx,
                    "pad needs length or text (it fills lists shorter than length, or text \
                     shorter than text bytes)",
                ));
            }
            let pad = item.number(ctx)?;
            check_fits(ctx, &item, "pad", pad, dtype)?;
            pad
        }
        None => 0.0,
    })
}

/// `bytes:` (a u8 field copied as is).
fn read_bytes(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    dtype: DType,
    input: &FieldInput,
    length: Option<u64>,
) -> Result<Option<u64>, SpecError> {
    Ok(match map.get_some("bytes") {
        Some(owned) => {
            let item = owned.item();
            if dtype != DType::U8 {
                return Err(item.error(ctx, format!("bytes needs dtype u8, this field is {dtype}")));
            }
            if matches!(input, FieldInput::Columns(_)) {
                return Err(item.error(ctx, "bytes cannot be combined with columns"));
            }
            if length.is_some() {
                return Err(item.error(ctx, "bytes cannot be combined with length"));
            }
            Some(item.u64_at_least(ctx, 1)?)
        }
        None => None,
    })
}

/// `text:` (UTF-8 bytes of a fixed size).
fn read_text(ctx: &Ctx<'_>, map: &MapView<'_>, dtype: DType) -> Result<Option<u64>, SpecError> {
    Ok(match map.get_some("text") {
        Some(owned) => {
            let item = owned.item();
            if dtype != DType::U8 {
                return Err(item.error(
                    ctx,
                    format!(
                        "text is stored as UTF-8 bytes and needs dtype u8, this field is {dtype}"
                    ),
                ));
            }
            for other in ["columns", "length", "bytes", "transform", "fill_null"] {
                if let Some(o) = map.get_some(other) {
                    let why = match other {
                        "transform" => {
                            "a text field stores its bytes as they are; to make token ids, \
                             use a list field with transform: { tokenize: ... }"
                        }
                        "fill_null" => {
                            "a null is an error, as in a bytes field (filter such rows out, \
                             or give a value in an expr, e.g. COALESCE(title, ''))"
                        }
                        _ => "text gives the field's size in bytes",
                    };
                    return Err(o
                        .item()
                        .error(ctx, format!("text cannot be combined with {other}: {why}")));
                }
            }
            Some(item.u64_at_least(ctx, 1)?)
        }
        None => None,
    })
}

/// `transform:`, checked against the field.
fn read_field_transforms(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    dtype: DType,
    input: &FieldInput,
    bytes: Option<u64>,
) -> Result<Vec<Transform>, SpecError> {
    Ok(match map.get_some("transform") {
        Some(owned) => {
            if bytes.is_some() {
                return Err(owned
                    .item()
                    .error(ctx, "a bytes field is copied as is and takes no transforms"));
            }
            let placed = read_transforms(ctx, &owned)?;
            check_transforms(ctx, dtype, &placed)?;
            if let Some(p) = placed.first()
                && matches!(p.transform, Transform::Image(_))
            {
                check_image_field(ctx, map, input)?;
            }
            placed.into_iter().map(|p| p.transform).collect()
        }
        None => Vec::new(),
    })
}

/// `fill_null:`, refused where a null has a meaning of its own.
fn read_fill_null(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    dtype: DType,
    bytes: Option<u64>,
    transforms: &[Transform],
) -> Result<Option<f64>, SpecError> {
    Ok(match map.get_some("fill_null") {
        Some(owned) => {
            let item = owned.item();
            if bytes.is_some() {
                return Err(item.error(
                    ctx,
                    "fill_null does not apply to a bytes field: its values are copied as they \
                     are, and a null is an error (filter such rows out, or give a value in an \
                     expr)",
                ));
            }
            if let Some(Transform::Tokenize(_)) = transforms.first() {
                return Err(item.error(
                    ctx,
                    "fill_null does not apply to a tokenize field: a null is an error (filter \
                     such rows out, or give a text in an expr, e.g. COALESCE(body, ''))",
                ));
            }
            if let Some(first @ (Transform::HashBucket { .. } | Transform::Vocab { .. })) =
                transforms.first()
            {
                return Err(item.error(
                    ctx,
                    format!(
                        "fill_null does not apply to a {} field: a null is {}",
                        transform_name(first),
                        if matches!(first, Transform::Vocab { .. }) {
                            "out of vocabulary and gets the oov id"
                        } else {
                            "hashed as a value of its own"
                        }
                    ),
                ));
            }
            let value = item.number(ctx)?;
            // With no transforms the fill value is stored as is, so it must fit;
            // otherwise it is an input to the transforms, checked by them.
            if transforms.is_empty() {
                check_fits(ctx, &item, "fill_null", value, dtype)?;
            }
            Some(value)
        }
        None => None,
    })
}

/// `nonfinite:` (fields with standardize or min_max).
fn read_nonfinite(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    transforms: &[Transform],
) -> Result<NonFinite, SpecError> {
    Ok(match map.get_some("nonfinite") {
        Some(owned) => {
            let item = owned.item();
            if !transforms
                .iter()
                .any(|t| matches!(t, Transform::Standardize | Transform::MinMax))
            {
                return Err(item.error(
                    ctx,
                    "nonfinite applies to fields with standardize or min_max (it says what \
                     their statistics do with NaN and infinities)",
                ));
            }
            match item.string(ctx)? {
                "error" => NonFinite::Error,
                "exclude" => NonFinite::Exclude,
                other => {
                    let hint = match did_you_mean(other, &["error", "exclude"]) {
                        h if !h.is_empty() => h,
                        _ => " (expected error or exclude)".to_string(),
                    };
                    return Err(
                        item.error(ctx, format!("unknown nonfinite policy {other:?}{hint}"))
                    );
                }
            }
        }
        None => NonFinite::Error,
    })
}

/// An image field reads one column (or expr) of encoded images or paths;
/// its shape comes from the image step, and a bad image is the step's
/// `on_error`, not a fill value.
fn check_image_field(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    input: &FieldInput,
) -> Result<(), SpecError> {
    for other in ["columns", "length", "pad", "fill_null"] {
        if let Some(o) = map.get_some(other) {
            let why = match other {
                "fill_null" => {
                    "a null is a bad image, an error unless the step says on_error: skip"
                }
                "columns" => "an image field reads one column (or expr) of images or paths",
                _ => "the image step's size, channels and layout give the field's shape",
            };
            return Err(o.item().error(
                ctx,
                format!("an image field cannot be combined with {other}: {why}"),
            ));
        }
    }
    debug_assert!(!matches!(input, FieldInput::Columns(_)));
    Ok(())
}

fn read_dtype(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<DType, SpecError> {
    let s = item.string(ctx)?;
    s.parse::<DType>().map_err(|_| {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        let hint = match did_you_mean(s, &names) {
            h if !h.is_empty() => h,
            _ => format!(" (expected one of: {})", names.join(" ")),
        };
        item.error(ctx, format!("unknown dtype {s:?}{hint}"))
    })
}

fn read_input(ctx: &Ctx<'_>, map: &MapView<'_>) -> Result<FieldInput, SpecError> {
    let present: Vec<Owned<'_>> = map
        .entries
        .iter()
        .filter(|e| INPUT_KEYS.contains(&e.key.as_str()))
        .map(|e| map.owned(e))
        .collect();
    match present.as_slice() {
        [] => Err(ctx.error(
            &map.path,
            map.key_line,
            "needs exactly one of column, columns, expr or length_of",
        )),
        [owned] => {
            let item = owned.item();
            let key = owned.path.rsplit('.').next().unwrap_or_default();
            match key {
                "column" => Ok(FieldInput::Column(item.text(ctx)?.to_string())),
                "expr" => Ok(FieldInput::Expr(
                    item.sql(ctx, super::sql::check_expr)?.to_string(),
                )),
                "length_of" => Ok(FieldInput::LengthOf(item.text(ctx)?.to_string())),
                _ => {
                    let elements = item.list(ctx)?;
                    if elements.is_empty() {
                        return Err(item.error(ctx, "needs at least one column"));
                    }
                    let mut columns: Vec<String> = Vec::with_capacity(elements.len());
                    for element in &elements {
                        let element = element.item();
                        let column = element.text(ctx)?;
                        if columns.iter().any(|c| c == column) {
                            return Err(
                                element.error(ctx, format!("column {column:?} is listed twice"))
                            );
                        }
                        columns.push(column.to_string());
                    }
                    Ok(FieldInput::Columns(columns))
                }
            }
        }
        [first, second, ..] => {
            let name = |o: &Owned<'_>| o.path.rsplit('.').next().unwrap_or_default().to_string();
            Err(second.item().error(
                ctx,
                format!(
                    "{} and {} cannot both be given: a field takes exactly one of column, columns, expr or length_of",
                    name(first),
                    name(second)
                ),
            ))
        }
    }
}

/// A value stored as is (fill_null without transforms, pad) must be
/// representable: whole and in range for integer dtypes, finite for floats.
fn check_fits(
    ctx: &Ctx<'_>,
    item: &Item<'_>,
    key: &str,
    value: f64,
    dtype: DType,
) -> Result<(), SpecError> {
    if dtype.is_float() {
        return Ok(());
    }
    let whole = value.fract() == 0.0;
    let in_range = value >= int_min(dtype) as f64 && value <= int_max(dtype) as f64;
    if whole && in_range {
        Ok(())
    } else {
        // Huge values print in scientific notation rather than as 300 digits.
        let shown = if value.abs() >= 1e16 {
            format!("{value:e}")
        } else {
            value.to_string()
        };
        Err(item.error(
            ctx,
            format!(
                "{key} {shown} cannot be stored as {dtype} (range {}..={})",
                int_min(dtype),
                int_max(dtype)
            ),
        ))
    }
}
