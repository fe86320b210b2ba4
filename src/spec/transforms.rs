//! Transforms: reading `transform:` (a name, a one-key mapping, or a list of
//! them). The rules that say which lists can work with which dtype are in
//! `transform_rules.rs`.

use super::read::{Ctx, Item, Owned};
use super::suggest::did_you_mean;
pub(super) use super::transform_rules::{check_transforms, int_max, int_min, transform_name};
use super::yaml::Kind;
use super::{SpecError, Transform};
use tessera_transform::image::{Filter, Fit, ImageStep, Layout, OnError};
use tessera_transform::text::{ChatTemplateFile, Tokenize};

const TRANSFORM_NAMES: &[&str] = &[
    "log1p",
    "clip",
    "standardize",
    "min_max",
    "hash_bucket",
    "vocab",
    "one_hot",
    "tokenize",
    "image",
];
const CLIP_KEYS: &[&str] = &["min", "max"];
const VOCAB_KEYS: &[&str] = &["min_count", "max_size", "oov"];
const IMAGE_KEYS: &[&str] = &[
    "size",
    "channels",
    "layout",
    "fit",
    "filter",
    "on_error",
    "base",
    "max_pixels",
];
const TOKENIZE_KEYS: &[&str] = &[
    "file",
    "bos",
    "eos",
    "special_tokens",
    "add_special_tokens",
    "chat_template",
    "on_bad_mask",
    "encoding",
];

/// A transform as read, with where it was written.
pub(super) struct Placed {
    pub transform: Transform,
    pub(super) path: String,
    pub(super) line: Option<usize>,
}

pub(super) fn read_transforms(ctx: &Ctx<'_>, owned: &Owned<'_>) -> Result<Vec<Placed>, SpecError> {
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
            "tokenize" => Err(item.error(
                ctx,
                "tokenize needs a tokenizer file, e.g. { tokenize: { file: tokenizer.json } }",
            )),
            "image" => Err(item.error(
                ctx,
                "image needs a size, e.g. { image: { size: [224, 224] } }",
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
                            "hash_bucket needs a bucket count from 1 to {}, found {}",
                            u64::MAX,
                            arg.node.kind.describe()
                        ))
                    })?,
                }),
                "one_hot" => Ok(Transform::OneHot {
                    classes: arg.u64_at_least(ctx, 1).map_err(|_| {
                        arg.error(ctx, format!(
                            "one_hot needs a class count from 1 to {}, found {}",
                            u64::MAX,
                            arg.node.kind.describe()
                        ))
                    })?,
                }),
                "vocab" => read_vocab(ctx, &arg),
                "tokenize" => read_tokenize(ctx, &arg),
                "image" => read_image(ctx, &arg),
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
        (Some(lo), Some(hi)) if lo > hi => {
            Err(item.error(ctx, format!("clip min {lo} is greater than max {hi}")))
        }
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
            oov = i64::try_from(value).map_err(|_| {
                owned
                    .item()
                    .error(ctx, format!("oov {value} does not fit in i64"))
            })?;
        }
    }
    Ok(Transform::Vocab {
        min_count,
        max_size,
        oov,
    })
}

fn read_tokenize(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<Transform, SpecError> {
    if item.is_null() {
        return Err(item.error(
            ctx,
            "tokenize needs a tokenizer file: { file: tokenizer.json }",
        ));
    }
    let map = item.map(ctx, TOKENIZE_KEYS)?;
    let file = map.require(ctx, "file")?.item().text(ctx)?.to_string();
    let token = |key: &str| -> Result<Option<String>, SpecError> {
        match map.get_some(key) {
            // As written: a token may begin or end with a space.
            Some(owned) => match owned.item().string(ctx)? {
                "" => Err(owned.item().error(ctx, format!("{key} must not be empty"))),
                t => Ok(Some(t.to_string())),
            },
            None => Ok(None),
        }
    };
    let flag = |key: &str| -> Result<bool, SpecError> {
        match map.get_some(key) {
            Some(owned) => owned.item().boolean(ctx),
            None => Ok(false),
        }
    };
    let chat_template = match map.get_some("chat_template") {
        Some(owned) => Some(ChatTemplateFile {
            file: owned.item().text(ctx)?.to_string(),
            ..ChatTemplateFile::default()
        }),
        None => None,
    };
    // A template writes its turn markers (`<|im_start|>`) as special tokens,
    // so with one they are read as such unless the spec says otherwise,
    // which cannot work.
    let special_tokens = match (map.get_some("special_tokens"), &chat_template) {
        (Some(owned), Some(_)) => {
            if !owned.item().boolean(ctx)? {
                return Err(owned.item().error(
                    ctx,
                    "special_tokens cannot be false with a chat_template: the template writes \
                     its turn markers as special tokens, which would become plain text",
                ));
            }
            true
        }
        (None, Some(_)) => true,
        _ => flag("special_tokens")?,
    };
    let skip_bad_masks = match map.get_some("on_bad_mask") {
        None => false,
        Some(owned) => {
            let item = owned.item();
            if chat_template.is_none() {
                return Err(item.error(
                    ctx,
                    "on_bad_mask applies to conversations: it needs a chat_template",
                ));
            }
            match item.string(ctx)? {
                "error" => false,
                "skip" => true,
                other => {
                    return Err(item.error(
                        ctx,
                        format!("unknown on_bad_mask {other:?}; use error or skip"),
                    ));
                }
            }
        }
    };
    let encoding = match map.get_some("encoding") {
        None => None,
        Some(owned) => {
            let item = owned.item();
            let name = item.string(ctx)?;
            if !tessera_transform::ranks::ENCODINGS.contains(&name) {
                return Err(item.error(
                    ctx,
                    format!(
                        "unknown tiktoken encoding {name:?}; use one of {}",
                        tessera_transform::ranks::ENCODINGS.join(", ")
                    ),
                ));
            }
            Some(name.to_string())
        }
    };
    let add_special_tokens = flag("add_special_tokens")?;
    if add_special_tokens && encoding.is_some() {
        return Err(item.error(
            ctx,
            "add_special_tokens runs a tokenizer.json's post-processor; a tiktoken rank file \
             (encoding) has none: use bos and eos",
        ));
    }
    Ok(Transform::Tokenize(Tokenize {
        file,
        bos: token("bos")?,
        eos: token("eos")?,
        special_tokens,
        add_special_tokens,
        encoding,
        chat_template,
        skip_bad_masks,
        ..Tokenize::default()
    }))
}

fn read_image(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<Transform, SpecError> {
    if item.is_null() {
        return Err(item.error(ctx, "image needs a size: { size: [224, 224] }"));
    }
    let map = item.map(ctx, IMAGE_KEYS)?;
    let size_item = map.require(ctx, "size")?;
    let size_item = size_item.item();
    let dims = size_item.list(ctx)?;
    let [h, w] = dims.as_slice() else {
        return Err(size_item.error(
            ctx,
            format!(
                "size is [height, width], two whole numbers, found {} entries",
                dims.len()
            ),
        ));
    };
    let side = |o: &Owned<'_>| -> Result<u32, SpecError> {
        let v = o.item().u64_at_least(ctx, 1)?;
        u32::try_from(v)
            .ok()
            .filter(|&v| v <= 65_535)
            .ok_or_else(|| {
                o.item()
                    .error(ctx, format!("{v} pixels is more than 65535"))
            })
    };
    let (height, width) = (side(h)?, side(w)?);
    let mut step = ImageStep {
        height,
        width,
        ..ImageStep::default()
    };
    if let Some(o) = map.get_some("channels") {
        let c = o.item().u64_at_least(ctx, 1)?;
        step.channels = match c {
            1 | 3 | 4 => c as u8,
            _ => {
                return Err(o.item().error(
                    ctx,
                    format!("channels is 1 (grey), 3 (RGB) or 4 (RGBA), found {c}"),
                ));
            }
        };
    }
    let named = |key: &str| -> Result<Option<(String, Owned<'_>)>, SpecError> {
        match map.get_some(key) {
            Some(o) => Ok(Some((o.item().string(ctx)?.to_string(), o))),
            None => Ok(None),
        }
    };
    // "unknown fit \"crop\" (expected one of: ...)", or with a close name,
    // "unknown fit \"reszie\" (did you mean \"resize\"?)".
    let parse_err = |item: &Item<'_>, names: &[&str], e: String, s: &str| {
        let hint = did_you_mean(s, names);
        let message = match e.split_once(" (expected") {
            Some((head, _)) if !hint.is_empty() => format!("{head}{hint}"),
            _ => e,
        };
        item.error(ctx, message)
    };
    if let Some((s, o)) = named("layout")? {
        step.layout = Layout::parse(&s).map_err(|e| parse_err(&o.item(), Layout::NAMES, e, &s))?;
    }
    if let Some((s, o)) = named("fit")? {
        step.fit = Fit::parse(&s).map_err(|e| parse_err(&o.item(), Fit::NAMES, e, &s))?;
    }
    if let Some((s, o)) = named("filter")? {
        step.filter = Filter::parse(&s).map_err(|e| parse_err(&o.item(), Filter::NAMES, e, &s))?;
    }
    if let Some((s, o)) = named("on_error")? {
        step.on_error =
            OnError::parse(&s).map_err(|e| parse_err(&o.item(), OnError::NAMES, e, &s))?;
    }
    if let Some(o) = map.get_some("base") {
        let base = o.item().text(ctx)?;
        if let Some((scheme, _)) = base.split_once("://") {
            return Err(o.item().error(
                ctx,
                format!(
                    "base {base:?} is a {scheme}:// URL; image fields read local files only \
                     (download the images first)"
                ),
            ));
        }
        step.base = Some(base.to_string());
    }
    if let Some(o) = map.get_some("max_pixels") {
        step.max_pixels = o.item().u64_at_least(ctx, 1)?;
    }
    Ok(Transform::Image(step))
}
