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
    "fill_null",
    "transform",
    "nonfinite",
];
const INPUT_KEYS: [&str; 3] = ["column", "columns", "expr"];

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

fn read_field(ctx: &Ctx<'_>, item: &Item<'_>, name: &str) -> Result<Field, SpecError> {
    let map = item.map(ctx, FIELD_KEYS)?;
    let dtype_owned = map.require(ctx, "dtype")?;
    let dtype = read_dtype(ctx, &dtype_owned.item())?;
    let input = read_input(ctx, &map)?;

    let length = match map.get_some("length") {
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
    };
    let pad = match map.get_some("pad") {
        Some(owned) => {
            let item = owned.item();
            if length.is_none() {
                return Err(
                    item.error(ctx, "pad needs length (it fills lists shorter than length)")
                );
            }
            let pad = item.number(ctx)?;
            check_fits(ctx, &item, "pad", pad, dtype)?;
            pad
        }
        None => 0.0,
    };

    let bytes = match map.get_some("bytes") {
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
    };

    let transforms = match map.get_some("transform") {
        Some(owned) => {
            if bytes.is_some() {
                return Err(owned
                    .item()
                    .error(ctx, "a bytes field is copied as is and takes no transforms"));
            }
            let placed = read_transforms(ctx, &owned)?;
            check_transforms(ctx, dtype, &placed)?;
            placed.into_iter().map(|p| p.transform).collect()
        }
        None => Vec::new(),
    };

    let fill_null = match map.get_some("fill_null") {
        Some(owned) => {
            let item = owned.item();
            if bytes.is_some() {
                return Err(item.error(
                    ctx,
                    "fill_null does not apply to a bytes field: its values are copied as they                      are, and a null is an error (filter such rows out, or give a value in an                      expr)",
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
    };

    let nonfinite = match map.get_some("nonfinite") {
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
    };

    Ok(Field {
        name: name.to_string(),
        dtype,
        input,
        length,
        pad,
        bytes,
        fill_null,
        transforms,
        nonfinite,
    })
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
            "needs exactly one of column, columns or expr",
        )),
        [owned] => {
            let item = owned.item();
            let key = owned.path.rsplit('.').next().unwrap_or_default();
            match key {
                "column" => Ok(FieldInput::Column(item.text(ctx)?.to_string())),
                "expr" => Ok(FieldInput::Expr(
                    item.sql(ctx, super::sql::check_expr)?.to_string(),
                )),
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
                    "{} and {} cannot both be given: a field takes exactly one of column, columns or expr",
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
