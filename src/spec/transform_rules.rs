//! The rules that say which transform lists work with which dtype: where each
//! transform may stand, what it needs and produces, and whether the ids it
//! makes fit the field.

use super::read::Ctx;
use super::transforms::Placed;
use super::{SpecError, Transform};
use tessera_reader::DType;

pub(super) fn transform_name(t: &Transform) -> &'static str {
    match t {
        Transform::Log1p => "log1p",
        Transform::Clip { .. } => "clip",
        Transform::Standardize => "standardize",
        Transform::MinMax => "min_max",
        Transform::HashBucket { .. } => "hash_bucket",
        Transform::Vocab { .. } => "vocab",
        Transform::OneHot { .. } => "one_hot",
        Transform::Tokenize(_) => "tokenize",
        Transform::Image(_) => "image",
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
pub(super) fn check_transforms(
    ctx: &Ctx<'_>,
    dtype: DType,
    placed: &[Placed],
) -> Result<(), SpecError> {
    let fail = |p: &Placed, message: String| ctx.error(&p.path, p.line, message);
    // Positions first: they say what a transform's input and output are,
    // which the dtype rules below depend on.
    check_positions(placed).map_err(|(i, m)| fail(&placed[i], m))?;
    let mut stats_transform: Option<&str> = None;
    for (i, p) in placed.iter().enumerate() {
        check_one(dtype, placed, i, &mut stats_transform).map_err(|m| fail(p, m))?;
    }
    Ok(())
}

/// Where each transform may stand in the list; the error is the position
/// at fault and the message.
fn check_positions(placed: &[Placed]) -> Result<(), (usize, String)> {
    for (i, p) in placed.iter().enumerate() {
        let name = transform_name(&p.transform);
        let message = match &p.transform {
            Transform::HashBucket { .. } | Transform::Vocab { .. } if i != 0 => format!(
                "{name} must be the first transform: it reads the raw value (often a string), \
                 but here it follows {}",
                transform_name(&placed[i - 1].transform)
            ),
            Transform::OneHot { .. } if i + 1 != placed.len() => {
                "one_hot must be the last transform".to_string()
            }
            Transform::Image(_) if placed.len() != 1 => {
                "image must be the only transform of its field (it turns encoded images \
                 into pixels, which are stored as they are)"
                    .to_string()
            }
            Transform::Tokenize(_) if placed.len() != 1 => {
                "tokenize must be the only transform of its field (it turns text into \
                 token ids, which are stored as they are)"
                    .to_string()
            }
            _ => continue,
        };
        return Err((i, message));
    }
    Ok(())
}

/// The dtype rules for transform `i` of `placed`; `stats_transform` is the
/// statistics transform seen so far (a field takes at most one).
fn check_one<'a>(
    dtype: DType,
    placed: &'a [Placed],
    i: usize,
    stats_transform: &mut Option<&'a str>,
) -> Result<(), String> {
    let one_hot_last = matches!(
        placed.last().map(|p| &p.transform),
        Some(Transform::OneHot { .. })
    );
    let p = &placed[i];
    let name = transform_name(&p.transform);
    match &p.transform {
        Transform::HashBucket { .. } | Transform::Vocab { .. } => {
            if !one_hot_last {
                if dtype.is_float() {
                    return Err(format!(
                        "{name} produces integer ids and needs an integer dtype, this field is {dtype}"
                    ));
                }
                if let Some(id) = largest_id(&p.transform)
                    && id > int_max(dtype)
                {
                    return Err(format!(
                        "{name} produces ids up to {id}, which do not fit dtype {dtype} (largest {})",
                        int_max(dtype)
                    ));
                }
            }
            if let Transform::Vocab { max_size, oov, .. } = p.transform {
                check_vocab(dtype, one_hot_last.then_some(placed), max_size, oov)?;
            }
        }
        Transform::OneHot { classes } => {
            if let Some(prev) = placed[..i].iter().find(|q| produces_floats(&q.transform)) {
                return Err(format!(
                    "one_hot takes integer ids, but {} before it produces floats",
                    transform_name(&prev.transform)
                ));
            }
            if let Some(first) = placed.first()
                && let Some(id) = largest_id(&first.transform)
                && id >= u128::from(*classes)
            {
                return Err(format!(
                    "one_hot has {classes} classes but {} before it produces ids up to {id}; \
                         use at least {} classes",
                    transform_name(&first.transform),
                    id + 1
                ));
            }
        }
        Transform::Log1p | Transform::Standardize | Transform::MinMax => {
            if !dtype.is_float() && !one_hot_last {
                return Err(format!(
                    "{name} produces floats and needs a float dtype (f16, bf16, f32, f64), this field is {dtype}"
                ));
            }
            if !matches!(p.transform, Transform::Log1p) {
                if let Some(first) = *stats_transform {
                    return Err(format!(
                        "a field takes at most one statistics transform, and {first} comes before {name}"
                    ));
                }
                *stats_transform = Some(name);
            }
        }
        Transform::Clip { .. } => {}
        Transform::Image(_) => {
            if dtype != DType::U8 {
                return Err(format!(
                    "image stores 8-bit pixels and needs dtype u8, this field is {dtype}"
                ));
            }
        }
        Transform::Tokenize(_) => {
            if dtype.is_float() {
                return Err(format!(
                    "tokenize produces token ids and needs an integer dtype (u16, u32, \
                         i32, i64, ...), this field is {dtype}"
                ));
            }
        }
    }
    Ok(())
}

/// Vocabulary ids are 1..=n by frequency; `oov` must not collide with them
/// and, like them, must fit where it goes: the dtype, or the classes of a
/// trailing one_hot (`one_hot` holds the whole transform list then).
fn check_vocab(
    dtype: DType,
    one_hot: Option<&[Placed]>,
    max_size: Option<u64>,
    oov: i64,
) -> Result<(), String> {
    if oov > 0 {
        match max_size {
            None => {
                return Err(format!(
                    "vocab oov {oov} could collide with the vocabulary's ids (1, 2, ...); \
                     use 0 or a negative id, or set max_size below it"
                ));
            }
            Some(n) if oov.unsigned_abs() <= n => {
                return Err(format!(
                    "vocab oov {oov} collides with the vocabulary's ids 1..={n}; use 0, a negative id or more than {n}"
                ));
            }
            Some(_) => {}
        }
    }
    match one_hot.and_then(|list| list.last()) {
        Some(Placed {
            transform: Transform::OneHot { classes },
            ..
        }) => {
            if max_size.is_none() {
                return Err(format!(
                    "vocab before one_hot needs max_size (at most {}) so that every id has a class",
                    classes.saturating_sub(1)
                ));
            }
            if oov < 0 || oov.unsigned_abs() >= *classes {
                return Err(format!(
                    "vocab oov {oov} is outside one_hot's classes 0..{classes}"
                ));
            }
        }
        _ => {
            let fits =
                i128::from(oov) >= int_min(dtype) && i128::from(oov) <= int_max(dtype) as i128;
            if !fits {
                return Err(format!("vocab oov {oov} does not fit dtype {dtype}"));
            }
        }
    }
    Ok(())
}

/// Largest value of an integer dtype as u128 (0 for floats, unused there).
pub(super) fn int_max(dtype: DType) -> u128 {
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

pub(super) fn int_min(dtype: DType) -> i128 {
    match dtype {
        DType::I8 => i128::from(i8::MIN),
        DType::I16 => i128::from(i16::MIN),
        DType::I32 => i128::from(i32::MIN),
        DType::I64 => i128::from(i64::MIN),
        _ => 0,
    }
}
