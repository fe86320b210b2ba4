//! `fields:` — output fields, their inputs and transforms, and the rules that
//! say which combinations can work.

use super::read::{Ctx, Item, MapView, Owned};
use super::suggest::did_you_mean;
use super::yaml::Kind;
use super::{Field, FieldInput, SpecError, Transform, is_identifier};
use tessera_reader::DType;

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
];
const TRANSFORM_NAMES: &[&str] = &[
    "log1p",
    "clip",
    "standardize",
    "min_max",
    "hash_bucket",
    "vocab",
    "one_hot",
];
const CLIP_KEYS: &[&str] = &["min", "max"];
const VOCAB_KEYS: &[&str] = &["min_count", "max_size", "oov"];
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
        fields.push(read_field(ctx, &item, &entry.key)?);
    }
    Ok(fields)
}

/// A transform as read, with where it was written.
struct Placed {
    transform: Transform,
    path: String,
    line: Option<usize>,
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
                return Err(item.error(ctx, "pad needs length (it fills lists shorter than length)"));
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

    Ok(Field {
        name: name.to_string(),
        dtype,
        input,
        length,
        pad,
        bytes,
        fill_null,
        transforms,
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
                "expr" => Ok(FieldInput::Expr(item.text(ctx)?.to_string())),
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
                            return Err(element
                                .error(ctx, format!("column {column:?} is listed twice")));
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

fn read_transforms(ctx: &Ctx<'_>, owned: &Owned<'_>) -> Result<Vec<Placed>, SpecError> {
    let mut placed = Vec::new();
    for element in owned.item().one_or_list() {
        let item = element.item();
        let transform = read_transform(ctx, &item)?;
        placed.push(Placed {
            transform,
            path: element.path.clone(),
            line: item.key_line.or(item.node.line),
        });
    }
    Ok(placed)
}

fn unknown_transform(ctx: &Ctx<'_>, item: &Item<'_>, name: &str) -> SpecError {
    let hint = match did_you_mean(name, TRANSFORM_NAMES) {
        h if !h.is_empty() => h,
        _ => format!(" (expected one of: {})", TRANSFORM_NAMES.join(", ")),
    };
    item.error(ctx, format!("unknown transform {name:?}{hint}"))
}

/// `log1p` or `{ clip: { min: 0 } }`: a bare name, or a mapping with one key.
fn read_transform(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<Transform, SpecError> {
    match &item.node.kind {
        Kind::Str(name) => match name.as_str() {
            "log1p" => Ok(Transform::Log1p),
            "standardize" => Ok(Transform::Standardize),
            "min_max" => Ok(Transform::MinMax),
            "vocab" => Ok(Transform::Vocab {
                min_count: 1,
                max_size: None,
                oov: 0,
            }),
            "clip" => Err(item.error(ctx, "clip needs bounds, e.g. { clip: { min: 0, max: 100 } }")),
            "hash_bucket" => Err(item.error(
                ctx,
                "hash_bucket needs a bucket count, e.g. { hash_bucket: 1024 }",
            )),
            "one_hot" => Err(item.error(
                ctx,
                "one_hot needs a class count, e.g. { one_hot: 10 }",
            )),
            other => Err(unknown_transform(ctx, item, other)),
        },
        Kind::Map(entries) => {
            let map = item.any_map(ctx)?;
            let [entry] = entries.as_slice() else {
                let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
                return Err(item.error(
                    ctx,
                    format!(
                        "a transform is a name or a mapping with one key, found {} keys ({}); \
                         write several transforms as a list",
                        keys.len(),
                        keys.join(", ")
                    ),
                ));
            };
            let owned = map.owned(entry);
            let arg = owned.item();
            let no_args = |t: Transform| {
                let empty_map = matches!(&arg.node.kind, Kind::Map(m) if m.is_empty());
                if arg.is_null() || empty_map {
                    Ok(t)
                } else {
                    Err(arg.error(ctx, format!("{} takes no arguments", entry.key)))
                }
            };
            match entry.key.as_str() {
                "log1p" => no_args(Transform::Log1p),
                "standardize" => no_args(Transform::Standardize),
                "min_max" => no_args(Transform::MinMax),
                "clip" => read_clip(ctx, &arg),
                "hash_bucket" => Ok(Transform::HashBucket {
                    buckets: arg.u64_at_least(ctx, 1).map_err(|_| {
                        arg.error(ctx, format!(
                            "hash_bucket needs a whole number of buckets >= 1, found {}",
                            arg.node.kind.describe()
                        ))
                    })?,
                }),
                "one_hot" => Ok(Transform::OneHot {
                    classes: arg.u64_at_least(ctx, 1).map_err(|_| {
                        arg.error(ctx, format!(
                            "one_hot needs a whole number of classes >= 1, found {}",
                            arg.node.kind.describe()
                        ))
                    })?,
                }),
                "vocab" => read_vocab(ctx, &arg),
                other => Err(unknown_transform(ctx, &arg, other)),
            }
        }
        other => Err(item.error(
            ctx,
            format!(
                "expected a transform (a name such as log1p, or a mapping such as {{ clip: {{ min: 0 }} }}), found {}",
                other.describe()
            ),
        )),
    }
}

fn read_clip(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<Transform, SpecError> {
    if item.is_null() {
        return Err(item.error(ctx, "clip needs min, max or both"));
    }
    let map = item.map(ctx, CLIP_KEYS)?;
    let bound = |key: &str| -> Result<Option<f64>, SpecError> {
        match map.get_some(key) {
            Some(owned) => Ok(Some(owned.item().number(ctx)?)),
            None => Ok(None),
        }
    };
    let (min, max) = (bound("min")?, bound("max")?);
    match (min, max) {
        (None, None) => Err(item.error(ctx, "clip needs min, max or both")),
        (Some(lo), Some(hi)) if lo > hi => Err(item.error(
            ctx,
            format!("clip min {lo} is greater than max {hi}"),
        )),
        _ => Ok(Transform::Clip { min, max }),
    }
}

fn read_vocab(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<Transform, SpecError> {
    let mut min_count = 1;
    let mut max_size = None;
    let mut oov = 0;
    if !item.is_null() {
        let map = item.map(ctx, VOCAB_KEYS)?;
        if let Some(owned) = map.get_some("min_count") {
            min_count = owned.item().u64_at_least(ctx, 1)?;
        }
        if let Some(owned) = map.get_some("max_size") {
            max_size = Some(owned.item().u64_at_least(ctx, 1)?);
        }
        if let Some(owned) = map.get_some("oov") {
            let value = owned.item().integer(ctx)?;
            oov = i64::try_from(value)
                .map_err(|_| owned.item().error(ctx, format!("oov {value} does not fit in i64")))?;
        }
    }
    Ok(Transform::Vocab {
        min_count,
        max_size,
        oov,
    })
}

fn transform_name(t: &Transform) -> &'static str {
    match t {
        Transform::Log1p => "log1p",
        Transform::Clip { .. } => "clip",
        Transform::Standardize => "standardize",
        Transform::MinMax => "min_max",
        Transform::HashBucket { .. } => "hash_bucket",
        Transform::Vocab { .. } => "vocab",
        Transform::OneHot { .. } => "one_hot",
    }
}

fn produces_floats(t: &Transform) -> bool {
    matches!(
        t,
        Transform::Log1p | Transform::Standardize | Transform::MinMax
    )
}

/// Largest id a transform list can produce before a trailing one_hot, if known.
fn largest_id(t: &Transform) -> Option<u128> {
    match t {
        Transform::HashBucket { buckets } => Some(u128::from(*buckets) - 1),
        // Known values take ids 1..=max_size (0 is left for oov by default).
        Transform::Vocab {
            max_size: Some(n), ..
        } => Some(u128::from(*n)),
        _ => None,
    }
}

/// The rules between transforms and the dtype. See docs/SPEC.md, "Transforms".
fn check_transforms(ctx: &Ctx<'_>, dtype: DType, placed: &[Placed]) -> Result<(), SpecError> {
    let fail = |p: &Placed, message: String| ctx.error(&p.path, p.line, message);
    let one_hot_last = matches!(
        placed.last().map(|p| &p.transform),
        Some(Transform::OneHot { .. })
    );
    let mut stats_transform: Option<&str> = None;
    for (i, p) in placed.iter().enumerate() {
        let name = transform_name(&p.transform);
        match &p.transform {
            Transform::HashBucket { .. } | Transform::Vocab { .. } => {
                if i != 0 {
                    return Err(fail(
                        p,
                        format!(
                            "{name} must be the first transform: it reads the raw value (often a string), \
                             but here it follows {}",
                            transform_name(&placed[i - 1].transform)
                        ),
                    ));
                }
                if !one_hot_last {
                    if dtype.is_float() {
                        return Err(fail(
                            p,
                            format!("{name} produces integer ids and needs an integer dtype, this field is {dtype}"),
                        ));
                    }
                    if let Some(id) = largest_id(&p.transform)
                        && id > int_max(dtype)
                    {
                        return Err(fail(
                            p,
                            format!(
                                "{name} produces ids up to {id}, which do not fit dtype {dtype} (largest {})",
                                int_max(dtype)
                            ),
                        ));
                    }
                }
                if let Transform::Vocab { oov, .. } = p.transform
                    && !one_hot_last
                {
                    let fits = i128::from(oov) >= int_min(dtype) && (oov as i128) <= int_max(dtype) as i128;
                    if !fits {
                        return Err(fail(p, format!("vocab oov {oov} does not fit dtype {dtype}")));
                    }
                }
            }
            Transform::OneHot { classes } => {
                if i + 1 != placed.len() {
                    return Err(fail(p, "one_hot must be the last transform".to_string()));
                }
                if let Some(prev) = placed[..i].iter().find(|q| produces_floats(&q.transform)) {
                    return Err(fail(
                        p,
                        format!(
                            "one_hot takes integer ids, but {} before it produces floats",
                            transform_name(&prev.transform)
                        ),
                    ));
                }
                if let Some(first) = placed.first()
                    && let Some(id) = largest_id(&first.transform)
                    && id >= u128::from(*classes)
                {
                    return Err(fail(
                        p,
                        format!(
                            "one_hot has {classes} classes but {} before it produces ids up to {id}; \
                             use at least {} classes",
                            transform_name(&first.transform),
                            id + 1
                        ),
                    ));
                }
            }
            Transform::Log1p | Transform::Standardize | Transform::MinMax => {
                if !dtype.is_float() && !one_hot_last {
                    return Err(fail(
                        p,
                        format!(
                            "{name} produces floats and needs a float dtype (f16, bf16, f32, f64), this field is {dtype}"
                        ),
                    ));
                }
                if !matches!(p.transform, Transform::Log1p) {
                    if let Some(first) = stats_transform {
                        return Err(fail(
                            p,
                            format!(
                                "a field takes at most one statistics transform, and {first} comes before {name}"
                            ),
                        ));
                    }
                    stats_transform = Some(name);
                }
            }
            Transform::Clip { .. } => {}
        }
    }
    Ok(())
}

/// Largest value of an integer dtype as u128 (0 for floats, unused there).
fn int_max(dtype: DType) -> u128 {
    match dtype {
        DType::U8 => u128::from(u8::MAX),
        DType::I8 => i8::MAX as u128,
        DType::U16 => u128::from(u16::MAX),
        DType::I16 => i16::MAX as u128,
        DType::U32 => u128::from(u32::MAX),
        DType::I32 => i32::MAX as u128,
        DType::U64 => u128::from(u64::MAX),
        DType::I64 => i64::MAX as u128,
        DType::F16 | DType::Bf16 | DType::F32 | DType::F64 => 0,
    }
}

fn int_min(dtype: DType) -> i128 {
    match dtype {
        DType::I8 => i128::from(i8::MIN),
        DType::I16 => i128::from(i16::MIN),
        DType::I32 => i128::from(i32::MIN),
        DType::I64 => i128::from(i64::MIN),
        _ => 0,
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
        Err(item.error(
            ctx,
            format!(
                "{key} {value} cannot be stored as {dtype} (range {}..={})",
                int_min(dtype),
                int_max(dtype)
            ),
        ))
    }
}
