//! The YAML spec language: types, parsing, validation and canonical form.
//!
//! A spec is read in two steps. [`Spec::parse`] turns YAML text into a
//! validated [`Spec`] without touching the filesystem; [`Spec::resolve_files`]
//! then expands each source's `path` into its input files. [`Spec::load`] does
//! both. Every problem found on the way is a [`SpecError`] naming the spec
//! file, the key path and the line. docs/SPEC.md describes the language.

mod canonical;
mod error;
mod fields;
mod files;
mod pack;
mod read;
mod sql;
mod storage;
mod suggest;
pub use suggest::did_you_mean;
mod toplevel;
mod transform_rules;
mod transforms;
mod yaml;

pub use error::SpecError;
pub use pack::{
    Algorithm, DEFAULT_GROUP_DOCS, LOSS_MASK, MAX_LENGTH, Overflow, POSITIONS, PackOptions,
    SEGMENT_IDS,
};
pub use read::SpecLocations;
pub use storage::{
    DEFAULT_CHUNK_BYTES, DEFAULT_TARGET_BYTES, MIN_CHUNK_BYTES, MIN_TARGET_BYTES, parse_size,
};
pub use toplevel::MAX_SPLITS;
// The field model (a field's input, shape, nulls and transform steps) lives in
// the transform crate, which the serving path shares; the spec calls the steps
// transforms.
pub use tessera_transform::field::{Field, FieldInput, NonFinite, Split, Step as Transform};

pub use sql::MAX_EXPR_DEPTH;

use std::path::{Path, PathBuf};

/// A parsed, validated spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The spec file it came from (absolute).
    pub path: PathBuf,
    /// Spec language version; always 1.
    pub version: u32,
    /// Dataset name.
    pub name: String,
    /// Sources in the order the YAML lists them.
    pub sources: Vec<Source>,
    /// Optional SQL over the named sources; default `SELECT * FROM <only source>`.
    pub query: Option<String>,
    /// Optional SQL predicate applied to the query's output (pushed down).
    pub filter: Option<String>,
    /// Output fields in YAML order.
    pub fields: Vec<Field>,
    /// Optional split into named subsets.
    pub split: Option<Split>,
    /// Output order.
    pub order: Order,
    /// Shard sizing.
    pub shards: Shards,
    /// How the chunked source is cut into build tasks.
    pub chunks: Chunks,
    /// Packing of a token field into windows (`pack:`).
    pub pack: Option<PackOptions>,
    /// Where each key sits in the spec file, for errors found after parsing.
    pub locations: SpecLocations,
}

/// File format of a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// Apache Parquet.
    Parquet,
    /// Delimited text.
    Csv,
    /// Newline-delimited JSON.
    Json,
    /// Arrow IPC file.
    Arrow,
}

/// CSV reading options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvOptions {
    /// Field delimiter (default b',').
    pub delimiter: u8,
    /// First line is a header (default true).
    pub header: bool,
    /// Strings read as null (default empty).
    pub null_values: Vec<String>,
}

/// One named input.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Table name used in `query`.
    pub name: String,
    /// File format (from `format:` or the extension).
    pub format: SourceFormat,
    /// The path or glob as written in the spec.
    pub path: String,
    /// Matching files, absolute, sorted: the deterministic input order.
    pub files: Vec<PathBuf>,
    /// For hive-partitioned folders: partition column names in path order.
    pub partition_columns: Vec<String>,
    /// For hive-partitioned folders: each file's partition values (raw folder
    /// text, in `partition_columns` order), parallel to `files`.
    pub partition_values: Vec<Vec<String>>,
    /// CSV options (ignored for other formats).
    pub csv: CsvOptions,
    /// The spec marks this source as the one to cut into chunks (`chunk: true`).
    pub chunk: bool,
    /// Neither `format:` nor the path's extension named the format, so
    /// [`Spec::resolve_files`] takes it from the matched files' extensions
    /// (until then `format` holds a placeholder).
    pub format_from_files: bool,
    /// Object-store options for a source in an object store (`storage:`),
    /// sorted by key: object_store's configuration keys such as `endpoint`,
    /// `region`, `allow_http`, on top of the environment's.
    pub storage: Vec<(String, String)>,
    /// `fingerprint: bytes`: hash a remote source's bytes rather than trust
    /// the store's ETag or version id (local files are always hashed).
    pub hash_bytes: bool,
}

/// Output order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Order {
    /// Build-time shuffle seed; `None` keeps the input order.
    pub shuffle_seed: Option<u64>,
}

/// The size of build tasks: how much of the chunked source one task reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunks {
    /// Target input bytes per chunk (Parquet: compressed row-group bytes;
    /// CSV and JSON: file bytes). Default 32 MiB.
    pub target_bytes: u64,
    /// The partitions a global query's stages are cut into on a cluster
    /// (`None`: chosen from the input size and the memory per task). Not
    /// part of the artifact's hash: the artifact is the same for any.
    pub partitions: Option<usize>,
}

/// Shard sizing and storage.
#[derive(Clone, Debug, PartialEq)]
pub struct Shards {
    /// Target bytes per shard file (default 64 MiB).
    pub target_bytes: u64,
    /// zstd level the shards are stored at, or `None` for uncompressed
    /// (`compression: zstd` with `level`, default 3).
    pub zstd_level: Option<i32>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            delimiter: b',',
            header: true,
            null_values: Vec::new(),
        }
    }
}

impl SourceFormat {
    /// Every format, in the order the spec documentation lists them.
    pub const ALL: [SourceFormat; 4] = [
        SourceFormat::Parquet,
        SourceFormat::Csv,
        SourceFormat::Json,
        SourceFormat::Arrow,
    ];

    /// The name used in `format:`.
    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::Parquet => "parquet",
            SourceFormat::Csv => "csv",
            SourceFormat::Json => "json",
            SourceFormat::Arrow => "arrow",
        }
    }

    /// The format a file name or pattern implies by its extension, if any:
    /// `.parquet`/`.pq`, `.csv`, `.json`/`.jsonl`/`.ndjson`,
    /// `.arrow`/`.ipc`/`.feather` (case-insensitive).
    pub fn from_path(path: &str) -> Option<SourceFormat> {
        let name = path.trim_end_matches('/').rsplit('/').next()?;
        let (_, ext) = name.rsplit_once('.')?;
        match ext.to_ascii_lowercase().as_str() {
            "parquet" | "pq" => Some(SourceFormat::Parquet),
            "csv" => Some(SourceFormat::Csv),
            "json" | "jsonl" | "ndjson" => Some(SourceFormat::Json),
            "arrow" | "ipc" | "feather" => Some(SourceFormat::Arrow),
            _ => None,
        }
    }
}

impl Spec {
    /// Reads, validates and resolves the spec at `path`: [`Spec::parse`]
    /// followed by [`Spec::resolve_files`]. Reads no data files.
    pub fn load(path: &Path) -> Result<Spec, SpecError> {
        let text = read_spec_text(path)?;
        let mut spec = Spec::parse(&text, path)?;
        spec.resolve_files()?;
        Ok(spec)
    }

    /// Parses and validates spec text, without touching the filesystem.
    ///
    /// `path` is where the text came from: it names the file in errors and
    /// anchors relative source paths. Sources come back with empty `files`
    /// and `partition_columns` until [`Spec::resolve_files`] runs.
    pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
        let root = yaml::parse(text).map_err(|e| match e.limit {
            true => SpecError::Limit {
                file: path.to_path_buf(),
                line: e.line,
                message: e.message,
            },
            false => SpecError::Syntax {
                file: path.to_path_buf(),
                line: e.line,
                message: e.message,
            },
        })?;
        // `absolute` only joins onto the working directory; it does not
        // require the file to exist.
        let abs_path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        toplevel::read_spec(&root, path, abs_path)
    }

    /// Expands every source's `path` (file, glob or directory, relative to
    /// the spec's directory) into absolute, sorted, deduplicated `files`;
    /// reads hive partition columns from `key=value` folders; takes the format
    /// from the files where the spec left it open. A path that matches
    /// nothing is an error naming the source and the pattern.
    pub fn resolve_files(&mut self) -> Result<(), SpecError> {
        let spec_dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for source in &mut self.sources {
            files::resolve_source(source, &spec_dir, &self.locations)?;
        }
        self.identify_tokenizers()?;
        self.resolve_image_bases(&spec_dir);
        Ok(())
    }

    /// Each `image` step's folder of paths: its `base` relative to the
    /// spec's folder (the spec's folder itself without one).
    fn resolve_image_bases(&mut self, spec_dir: &Path) {
        for field in &mut self.fields {
            for step in &mut field.transforms {
                if let Transform::Image(img) = step {
                    img.base_dir = Some(match &img.base {
                        Some(b) => spec_dir.join(b),
                        None => spec_dir.to_path_buf(),
                    });
                }
            }
        }
    }

    /// Calls `f` with each `tokenize` step whose file is not parsed yet,
    /// the spec's folder, the spec key of the step, its field's name and
    /// dtype, and where keys are (for errors).
    fn each_unparsed_tokenizer(
        &mut self,
        mut f: impl FnMut(
            &mut tessera_transform::text::Tokenize,
            &Path,
            &str,
            (&str, tessera_reader::DType),
            &SpecLocations,
        ) -> Result<(), SpecError>,
    ) -> Result<(), SpecError> {
        let spec_dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for field in &mut self.fields {
            for step in &mut field.transforms {
                let Transform::Tokenize(tok) = step else {
                    continue;
                };
                if tok.loaded.is_some() {
                    continue;
                }
                let key = format!("fields.{}.transform.tokenize", field.name);
                f(
                    tok,
                    &spec_dir,
                    &key,
                    (&field.name, field.dtype),
                    &self.locations,
                )?;
            }
        }
        Ok(())
    }

    /// Reads each `tokenize` step's file (relative to the spec's folder) for
    /// its blake3, which joins the canonical form, and compiles its chat
    /// template. The tokenizer itself is parsed by
    /// [`Spec::load_tokenizers`], which a build calls once it knows it has
    /// work to do: a cache hit never pays for the parse.
    fn identify_tokenizers(&mut self) -> Result<(), SpecError> {
        self.each_unparsed_tokenizer(|tok, dir, key, _, locations| {
            let at = |part: &str, e: String| {
                locations.error(&format!("{key}.{part}"), format!("tokenize: {e}"))
            };
            tok.identify(&dir.join(&tok.file))
                .map_err(|e| at("file", e))?;
            if let Some(chat) = &tok.chat_template {
                let path = dir.join(&chat.file);
                tok.load_chat(&path).map_err(|e| at("chat_template", e))?;
            }
            Ok(())
        })
    }

    /// Parses each `tokenize` step's file, checking it is the file the
    /// spec's hash was taken over, that its vocabulary fits the field's
    /// dtype and that it holds the bos and eos tokens. Planning, running
    /// and explaining a spec with `tokenize` steps need it; hashing one
    /// does not.
    pub fn load_tokenizers(&mut self) -> Result<(), SpecError> {
        self.each_unparsed_tokenizer(|tok, dir, key, (name, dtype), locations| {
            tok.load(&dir.join(&tok.file))
                .map_err(|e| locations.error(&format!("{key}.file"), format!("tokenize: {e}")))?;
            let max_id = tok.loaded.as_ref().map_or(0, |t| t.max_id());
            if u128::from(max_id) > transforms::int_max(dtype) {
                return Err(locations.error(
                    &format!("fields.{name}.dtype"),
                    format!(
                        "the tokenizer {} gives ids up to {max_id}, which do not fit dtype \
                         {dtype} (largest {}); use u32, i32 or i64",
                        tok.file,
                        transforms::int_max(dtype)
                    ),
                ));
            }
            Ok(())
        })
    }

    /// Whether a field has a `tokenize` step.
    pub fn has_tokenizers(&self) -> bool {
        self.fields.iter().any(|f| {
            f.transforms
                .iter()
                .any(|t| matches!(t, Transform::Tokenize(_)))
        })
    }

    /// A copy of the spec with its tokenizers parsed
    /// ([`Spec::load_tokenizers`]); the hashed spec stays as it is for the
    /// cache-hit path.
    pub fn with_tokenizers(&self) -> Result<Spec, SpecError> {
        let mut spec = self.clone();
        spec.load_tokenizers()?;
        Ok(spec)
    }

    /// The spec's meaning as JSON, for hashing: defaults filled in, keys in
    /// a fixed order, field order kept, sources sorted by name, nothing that
    /// depends on where the project or the data lives. See docs/SPEC.md,
    /// "Canonical form". Call it after [`Spec::resolve_files`]: partition
    /// columns and formats taken from the files are part of the meaning.
    pub fn canonical_json(&self) -> serde_json::Value {
        canonical::canonical(self)
    }

    /// The line of a key path such as `fields.dense.columns[2]` (or of its
    /// nearest enclosing key).
    pub fn line_of(&self, key: &str) -> Option<usize> {
        self.locations.line(key)
    }

    /// A [`SpecError::Invalid`] about `key`, with its line: for checks made
    /// after parsing, e.g. a column the query does not produce.
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> SpecError {
        self.locations.error(key, message)
    }

    /// The field with this name.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The source with this name.
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// Largest spec file accepted: 4 MiB, far more than any hand-written spec,
/// small enough that a wrong path (a data file, a device) fails at once.
pub const MAX_SPEC_BYTES: u64 = 4 << 20;

/// The text of the spec file at `path`: a regular file of at most
/// [`MAX_SPEC_BYTES`] of UTF-8. A fifo or a device would block or never end,
/// so they are refused before opening.
fn read_spec_text(path: &Path) -> Result<String, SpecError> {
    use std::io::Read;
    let fail = |message: String| SpecError::Read {
        file: path.to_path_buf(),
        source: std::io::Error::other(message),
    };
    match crate::pathkind::PathKind::of(path) {
        crate::pathkind::PathKind::File | crate::pathkind::PathKind::Missing => {}
        other => return Err(fail(format!("it {}", other.describe()))),
    }
    let file = std::fs::File::open(path).map_err(|source| SpecError::Read {
        file: path.to_path_buf(),
        source,
    })?;
    let too_large = |bytes: u64| {
        fail(format!(
            "it is {bytes} bytes; a spec may be at most {MAX_SPEC_BYTES} bytes (4 MiB)"
        ))
    };
    if let Ok(m) = file.metadata()
        && m.len() > MAX_SPEC_BYTES
    {
        return Err(too_large(m.len()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| SpecError::Read {
            file: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        fail(format!(
            "it is not UTF-8 text (line {line}, byte {at} is not valid UTF-8)"
        ))
    })
}

/// `[A-Za-z_][A-Za-z0-9_]*`
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
