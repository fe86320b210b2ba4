//! Turning the YAML tree into a validated [`Spec`]: the top level, sources,
//! split and order. Fields and transforms live in `fields.rs`, shards,
//! chunks and byte sizes in `storage.rs`.

use super::fields::read_fields;
use super::read::{Ctx, Item, MapView, SpecLocations};
use super::sql;
use super::storage::{read_chunks, read_shards};
use super::suggest::did_you_mean;
use super::yaml::{Kind, Node};
use super::{CsvOptions, Order, Source, SourceFormat, Spec, SpecError, Split, is_identifier};
use std::path::{Path, PathBuf};

const TOP_KEYS: &[&str] = &[
    "version", "name", "sources", "query", "filter", "fields", "split", "order", "shards",
    "chunks", "pack",
];
const SOURCE_KEYS: &[&str] = &[
    "path",
    "format",
    "delimiter",
    "header",
    "null_values",
    "chunk",
    "storage",
    "fingerprint",
];
const CSV_KEYS: &[&str] = &["delimiter", "header", "null_values"];
const SPLIT_KEYS: &[&str] = &["key", "weights", "stats_from"];
const ORDER_KEYS: &[&str] = &["shuffle_seed"];
/// Most splits a spec may declare.
pub const MAX_SPLITS: usize = 256;

/// Words that cannot name a source without quoting in SQL.
const SQL_RESERVED: &[&str] = &[
    "all",
    "and",
    "any",
    "as",
    "asc",
    "between",
    "by",
    "case",
    "cast",
    "create",
    "cross",
    "delete",
    "desc",
    "distinct",
    "drop",
    "else",
    "end",
    "except",
    "exists",
    "false",
    "from",
    "full",
    "group",
    "having",
    "in",
    "inner",
    "insert",
    "intersect",
    "is",
    "join",
    "left",
    "like",
    "limit",
    "natural",
    "not",
    "null",
    "offset",
    "on",
    "or",
    "order",
    "outer",
    "right",
    "select",
    "table",
    "then",
    "true",
    "union",
    "update",
    "using",
    "values",
    "when",
    "where",
    "with",
];

/// Validates the whole document. `file` is the spec path as the caller gave
/// it (for messages), `abs_path` its absolute form.
pub(super) fn read_spec(root: &Node, file: &Path, abs_path: PathBuf) -> Result<Spec, SpecError> {
    let ctx = Ctx { file };
    let top = Item {
        path: "",
        node: root,
        key_line: None,
    };
    if top.is_null() {
        return Err(ctx.error(
            "",
            None,
            "the spec is empty; it needs at least version, name, sources and fields",
        ));
    }
    if !matches!(root.kind, Kind::Map(_)) {
        return Err(ctx.error(
            "",
            root.line,
            format!(
                "a spec is a mapping of keys (version, name, sources, ...), found {}",
                root.kind.describe()
            ),
        ));
    }
    let mut map = top.any_map(&ctx)?;
    map.key_line = None;
    // The version comes first: a spec written for another version may use keys
    // this one does not know, and "unsupported version" is the useful message.
    let version = read_version(&ctx, &map)?;
    let mut map = top.map(&ctx, TOP_KEYS)?;
    // A missing top-level key has no line to point at (line 1 would mislead).
    map.key_line = None;

    let name = read_name(&ctx, &map)?;
    let sources = read_sources(&ctx, &map)?;
    let query = optional_sql(&ctx, &map, "query", sql::check_query)?;
    if query.is_none() && sources.len() != 1 {
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        return Err(ctx.error(
            "query",
            None,
            format!(
                "the spec has {} sources ({}) and no query; without a query there must be exactly one source, \
                 so add a query that combines them",
                sources.len(),
                names.join(", ")
            ),
        ));
    }
    let filter = optional_sql(&ctx, &map, "filter", sql::check_expr)?;
    let fields = read_fields(&ctx, &map)?;
    let split = read_split(&ctx, &map)?;
    let order = read_order(&ctx, &map)?;
    let shards = read_shards(&ctx, &map)?;
    let chunks = read_chunks(&ctx, &map)?;
    let pack = super::pack::read_pack(&ctx, &map, &fields)?;
    super::pack::check_token_lengths(&ctx, &map, &fields, pack.as_ref())?;

    Ok(Spec {
        path: abs_path,
        version,
        name,
        sources,
        query,
        filter,
        fields,
        split,
        order,
        shards,
        chunks,
        pack,
        locations: SpecLocations::from_tree(file, root),
    })
}

fn read_version(ctx: &Ctx<'_>, map: &MapView<'_>) -> Result<u32, SpecError> {
    let owned = map.require(ctx, "version")?;
    let item = owned.item();
    let version = item.integer(ctx)?;
    if version != 1 {
        return Err(item.error(
            ctx,
            format!("unsupported spec version {version}; this tessera reads version 1"),
        ));
    }
    Ok(1)
}

fn read_name(ctx: &Ctx<'_>, map: &MapView<'_>) -> Result<String, SpecError> {
    let owned = map.require(ctx, "name")?;
    let item = owned.item();
    let name = item.string(ctx)?;
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !ok {
        return Err(item.error(
            ctx,
            format!("name {name:?} may use only letters, digits, '_', '.' and '-'"),
        ));
    }
    Ok(name.to_string())
}

fn optional_sql(
    ctx: &Ctx<'_>,
    map: &MapView<'_>,
    key: &str,
    check: fn(&str) -> Result<(), String>,
) -> Result<Option<String>, SpecError> {
    match map.get_some(key) {
        Some(owned) => Ok(Some(owned.item().sql(ctx, check)?.to_string())),
        None => Ok(None),
    }
}

fn read_sources(ctx: &Ctx<'_>, map: &MapView<'_>) -> Result<Vec<Source>, SpecError> {
    let owned = map.require(ctx, "sources")?;
    let sources_map = owned.item().any_map(ctx)?;
    if sources_map.entries.is_empty() {
        return Err(owned.item().error(ctx, "needs at least one source"));
    }
    let mut sources: Vec<Source> = Vec::new();
    let mut chunk_source: Option<String> = None;
    for entry in sources_map.entries {
        let owned = sources_map.owned(entry);
        let item = owned.item();
        let name = entry.key.as_str();
        check_source_name(ctx, &item, name)?;
        let source = read_source(ctx, &item, name)?;
        if source.chunk {
            if let Some(first) = &chunk_source {
                let key = format!("{}.chunk", owned.path);
                let line = item.any_map(ctx)?.get("chunk").and_then(|o| o.key_line);
                return Err(ctx.error(
                    &key,
                    line,
                    format!(
                        "only one source may be marked chunk: true (sources.{first} already is)"
                    ),
                ));
            }
            chunk_source = Some(name.to_string());
        }
        sources.push(source);
    }
    Ok(sources)
}

fn check_source_name(ctx: &Ctx<'_>, item: &Item<'_>, name: &str) -> Result<(), SpecError> {
    if !is_identifier(name) {
        return Err(item.error(
            ctx,
            format!(
                "source name {name:?} is not a SQL identifier (letters, digits and '_', not starting with a digit)"
            ),
        ));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(item.error(
            ctx,
            format!(
                "source name {name:?} must be lower case: SQL folds unquoted names to lower case, \
                 so a query could not refer to it as written (use {:?})",
                name.to_ascii_lowercase()
            ),
        ));
    }
    if SQL_RESERVED.contains(&name) {
        return Err(item.error(
            ctx,
            format!("source name {name:?} is a SQL keyword; choose another name"),
        ));
    }
    Ok(())
}

fn read_source(ctx: &Ctx<'_>, item: &Item<'_>, name: &str) -> Result<Source, SpecError> {
    let map = item.map(ctx, SOURCE_KEYS)?;
    let path_owned = map.require(ctx, "path")?;
    let path = path_owned.item().text(ctx)?.to_string();

    let declared = match map.get_some("format") {
        Some(owned) => Some(parse_format(ctx, &owned.item())?),
        None => None,
    };
    let from_extension = SourceFormat::from_path(&path);
    let format = declared.or(from_extension);

    if let Some(format) = format
        && format != SourceFormat::Csv
        && let Some(csv_key) = CSV_KEYS.iter().find_map(|k| map.get(k))
    {
        let key = csv_key.path.rsplit('.').next().unwrap_or_default();
        return Err(ctx.error(
            &csv_key.path,
            csv_key.key_line,
            format!(
                "{key} applies to csv sources only; this source reads {}",
                format.name()
            ),
        ));
    }

    let mut csv = CsvOptions::default();
    if let Some(owned) = map.get_some("delimiter") {
        csv.delimiter = parse_delimiter(ctx, &owned.item())?;
    }
    if let Some(owned) = map.get_some("header") {
        csv.header = owned.item().boolean(ctx)?;
    }
    if let Some(owned) = map.get_some("null_values") {
        for value in owned.item().one_or_list() {
            csv.null_values.push(value.item().string(ctx)?.to_string());
        }
    }
    let chunk = match map.get_some("chunk") {
        Some(owned) => owned.item().boolean(ctx)?,
        None => false,
    };
    let remote = crate::remote_input::is_url(&path);
    let mut storage = Vec::new();
    if let Some(owned) = map.get_some("storage") {
        if !remote {
            return Err(ctx.error(
                &owned.path,
                owned.key_line,
                "storage options apply to sources in an object store (an s3://, gs://, az:// \
                 or http(s):// path)"
                    .to_string(),
            ));
        }
        let opts = owned.item().any_map(ctx)?;
        for entry in opts.entries {
            let owned = opts.owned(entry);
            let value = owned.item();
            // `allow_http: true` and `timeout: 30` read as the store reads them.
            let text = if let Ok(b) = value.boolean(ctx) {
                b.to_string()
            } else if let Ok(i) = value.integer(ctx) {
                i.to_string()
            } else {
                value.text(ctx)?.to_string()
            };
            storage.push((entry.key.clone(), text));
        }
        storage.sort();
    }
    let hash_bytes = match map.get_some("fingerprint") {
        Some(owned) => match owned.item().string(ctx)? {
            "metadata" => false,
            "bytes" => true,
            other => {
                return Err(ctx.error(
                    &owned.path,
                    owned.key_line,
                    format!("fingerprint is \"metadata\" or \"bytes\", not {other:?}"),
                ));
            }
        },
        None => false,
    };

    Ok(Source {
        name: name.to_string(),
        format: format.unwrap_or(SourceFormat::Parquet),
        path,
        files: Vec::new(),
        partition_columns: Vec::new(),
        partition_values: Vec::new(),
        csv,
        chunk,
        format_from_files: format.is_none(),
        storage,
        hash_bytes,
    })
}

fn parse_format(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<SourceFormat, SpecError> {
    let s = item.string(ctx)?;
    SourceFormat::ALL
        .into_iter()
        .find(|f| f.name() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = SourceFormat::ALL.iter().map(|f| f.name()).collect();
            let hint = match did_you_mean(s, &names) {
                h if !h.is_empty() => h,
                _ => format!(" (expected one of: {})", names.join(", ")),
            };
            item.error(ctx, format!("unknown format {s:?}{hint}"))
        })
}

fn parse_delimiter(ctx: &Ctx<'_>, item: &Item<'_>) -> Result<u8, SpecError> {
    let s = item.string(ctx)?;
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii() && !matches!(c, '\n' | '\r' | '"') => Ok(c as u8),
        _ => Err(item.error(
            ctx,
            format!(
                "delimiter must be a single ASCII character other than a quote or a line break, found {s:?} \
                 (write a tab as \"\\t\")"
            ),
        )),
    }
}

fn read_split(ctx: &Ctx<'_>, top: &MapView<'_>) -> Result<Option<Split>, SpecError> {
    let Some(owned) = top.get_some("split") else {
        return Ok(None);
    };
    let map = owned.item().map(ctx, SPLIT_KEYS)?;
    let key = map
        .require(ctx, "key")?
        .item()
        .sql(ctx, sql::check_expr)?
        .to_string();
    let weights_owned = map.require(ctx, "weights")?;
    let weights_map = weights_owned.item().any_map(ctx)?;
    if weights_map.entries.is_empty() {
        return Err(weights_owned.item().error(
            ctx,
            "needs at least one split, e.g. { train: 0.9, val: 0.1 }",
        ));
    }
    if weights_map.entries.len() > MAX_SPLITS {
        return Err(weights_owned.item().error(
            ctx,
            format!(
                "{} splits declared; a spec may have at most {MAX_SPLITS}",
                weights_map.entries.len()
            ),
        ));
    }
    let mut weights = Vec::new();
    for entry in weights_map.entries {
        let owned = weights_map.owned(entry);
        let item = owned.item();
        let name = entry.key.as_str();
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !name_ok {
            return Err(item.error(
                ctx,
                format!("split name {name:?} may use only letters, digits, '_', '.' and '-'"),
            ));
        }
        let weight = item.number(ctx)?;
        if weight <= 0.0 {
            return Err(item.error(
                ctx,
                format!("split weight must be positive, found {weight}"),
            ));
        }
        weights.push((name.to_string(), weight));
    }
    let total: f64 = weights.iter().map(|(_, w)| w).sum();
    if !total.is_finite() {
        return Err(weights_owned
            .item()
            .error(ctx, "the weights are too large to add up"));
    }
    for (_, w) in &mut weights {
        *w /= total;
    }
    let names: Vec<&str> = weights.iter().map(|(n, _)| n.as_str()).collect();
    let stats_split = match map.get_some("stats_from") {
        Some(owned) => {
            let item = owned.item();
            let s = item.string(ctx)?;
            if !names.contains(&s) {
                let hint = match did_you_mean(s, &names) {
                    h if !h.is_empty() => h,
                    _ => format!(" (the splits are: {})", names.join(", ")),
                };
                return Err(item.error(ctx, format!("stats_from names no split: {s:?}{hint}")));
            }
            s.to_string()
        }
        None if names.contains(&"train") => "train".to_string(),
        None => names[0].to_string(),
    };
    Ok(Some(Split {
        key,
        weights,
        stats_split,
    }))
}

fn read_order(ctx: &Ctx<'_>, top: &MapView<'_>) -> Result<Order, SpecError> {
    let Some(owned) = top.get_some("order") else {
        return Ok(Order::default());
    };
    let map = owned.item().map(ctx, ORDER_KEYS)?;
    let shuffle_seed = match map.get_some("shuffle_seed") {
        Some(owned) => Some(owned.item().u64_at_least(ctx, 0)?),
        None => None,
    };
    Ok(Order { shuffle_seed })
}
