//! Sources in object stores: a source `path` that is a URL (`s3://`,
//! `gs://`, `az://`, `http(s)://`).
//!
//! A remote input file is named by its URL everywhere a local one is named
//! by its path (a `PathBuf` holding the URL), so messages, the plan and the
//! manifest name it as the user wrote it. What the file-reading code needs
//! goes through this module:
//!
//! - [`resolve`] lists the objects a URL, glob or prefix names (one listing
//!   of the prefix before the first wildcard) and remembers each object's
//!   size, ETag and version;
//! - [`register_stores`] gives DataFusion the stores, so Parquet, JSON and
//!   Arrow scans read through object_store with range requests: Parquet reads
//!   its footer and only the row groups and columns the query needs;
//! - [`open`] is a `Read + Seek` over ranged GETs for the CSV reader and for
//!   footers read during planning.
//!
//! Every store is wrapped in an [`InputStore`] that runs its requests on the
//! reader crate's I/O runtime (a build task's own runtime may end before a
//! pooled connection is reused) and counts the bytes it fetched
//! ([`bytes_fetched`]).

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

/// What a listing said about one object: what its fingerprint is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteObject {
    /// Size in bytes.
    pub size: u64,
    /// The store's ETag, if it gives one.
    pub etag: Option<String>,
    /// The store's version id, if the bucket is versioned.
    pub version: Option<String>,
}

impl RemoteObject {
    /// The identity recorded for the object when its bytes are not hashed:
    /// `version:<id>` when the store gives a version id, else `etag:<etag>`.
    /// `None` when the store gives neither (the bytes must be hashed).
    pub fn identity(&self) -> Option<String> {
        if let Some(v) = &self.version {
            return Some(format!("version:{v}"));
        }
        self.etag.as_ref().map(|e| format!("etag:{}", bare_etag(e)))
    }

    /// Whether the object is still the one recorded as `identity` (an
    /// [`identity`](Self::identity) taken earlier), judged by the same kind
    /// of identity: a listing and a HEAD need not report the same kinds (a
    /// GCS listing gives the ETag, its HEAD the generation as well), so
    /// comparing `identity()` with `identity()` would see a change where
    /// there is none. `None` when this answer lacks that kind.
    pub fn still(&self, identity: &str) -> Option<bool> {
        if let Some(v) = identity.strip_prefix("version:") {
            return self.version.as_deref().map(|now| now == v);
        }
        if let Some(e) = identity.strip_prefix("etag:") {
            return self.etag.as_deref().map(|now| bare_etag(now) == e);
        }
        None
    }
}

/// An ETag without its quotes and weak-validator prefix (stores differ in
/// whether a listing quotes it: `"abc"`, `abc`, `W/"abc"` name one value).
fn bare_etag(e: &str) -> &str {
    e.strip_prefix("W/").unwrap_or(e).trim_matches('"')
}

/// Store options, as `(key, value)` pairs sorted by key.
type Options = Vec<(String, String)>;

#[derive(Default)]
struct Registry {
    /// Base URL (`s3://bucket`) -> its store and the options it was built with.
    stores: HashMap<String, (Arc<InputStore>, Options)>,
    /// Object URL -> what the listing said.
    objects: HashMap<String, RemoteObject>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);
/// Options given on the command line (`--storage KEY=VALUE`), for every URL.
static CLI_OPTIONS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Sets the command line's store options (under every source's own).
pub fn set_cli_options(options: Vec<(String, String)>) {
    *CLI_OPTIONS.lock().unwrap_or_else(PoisonError::into_inner) = options;
}

/// The command line's store options.
pub fn cli_options() -> Vec<(String, String)> {
    CLI_OPTIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The command line's options, then `source`'s (which win on a key both
/// give), sorted by key.
fn merged(source: &[(String, String)]) -> Options {
    let mut out: std::collections::BTreeMap<String, String> = cli_options().into_iter().collect();
    out.extend(source.iter().cloned());
    out.into_iter().collect()
}
static FETCHED: AtomicU64 = AtomicU64::new(0);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// True when a source path is an object-store URL.
pub fn is_url(s: &str) -> bool {
    tessera_reader::is_store_url(s)
}

/// True when an input file's name is an object-store URL.
pub fn is_remote(path: &Path) -> bool {
    path.to_str().is_some_and(is_url)
}

/// Bytes fetched from object stores by this process so far.
pub fn bytes_fetched() -> u64 {
    FETCHED.load(Ordering::Relaxed)
}

/// `s3://bucket/a/b.parquet` -> (`s3://bucket`, `a/b.parquet`).
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{url}: not a URL: {e}"))?;
    let base = parsed[..url::Position::BeforePath].to_string();
    let key = parsed.path().trim_start_matches('/');
    let key = percent_decode(key);
    Ok((base, key))
}

/// Decodes `%XX` escapes: in object keys of URLs, and in partition folder
/// names (as Hive and Spark write special characters there); anything
/// malformed, or bytes that do not decode to UTF-8, is kept as written.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The store of `base`, built on first use from the environment and
/// `options`. Two sources in one bucket must give the same options.
fn store(base: &str, options: &[(String, String)]) -> Result<Arc<InputStore>, String> {
    let options = &merged(options)[..];
    let mut reg = registry();
    if let Some((s, opts)) = reg.stores.get(base) {
        if opts.as_slice() != options {
            return Err(format!(
                "{base} is named by two sources with different storage options; give them the same"
            ));
        }
        return Ok(Arc::clone(s));
    }
    let (inner, _) =
        tessera_reader::remote::object_store_for(base, options).map_err(|e| e.to_string())?;
    let rt = tessera_reader::remote::io_runtime().map_err(|e| e.to_string())?;
    let s = Arc::new(InputStore {
        inner,
        rt,
        name: base.to_string(),
    });
    reg.stores
        .insert(base.to_string(), (Arc::clone(&s), options.to_vec()));
    Ok(s)
}

/// Adds what to do to a store error that comes from missing credentials
/// (object_store then asks the cloud's instance metadata service).
fn explain(pattern: &str, e: String) -> String {
    if e.contains("169.254.169.254") || e.contains("metadata.google.internal") {
        format!(
            "{pattern}: no credentials for the store ({e}); set them in the environment \
             (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, GOOGLE_SERVICE_ACCOUNT, \
             AZURE_STORAGE_ACCOUNT_KEY, ...) or in the source's storage: options, or give \
             `skip_signature: true` for a public bucket"
        )
    } else {
        format!("{pattern}: {e}")
    }
}

fn store_of(url: &str) -> io::Result<(Arc<InputStore>, ObjectPath)> {
    let (base, key) = split_url(url).map_err(io::Error::other)?;
    let s = registry()
        .stores
        .get(&base)
        .map(|(s, _)| Arc::clone(s))
        .ok_or_else(|| io::Error::other(format!("{url}: no store registered for {base}")))?;
    Ok((s, ObjectPath::from(key)))
}

/// What the listing said about the object at `url`.
pub fn object(url: &str) -> Option<RemoteObject> {
    registry().objects.get(url).cloned()
}

/// Gives DataFusion every store a source named, under its base URL.
pub fn register_stores(env: &datafusion::execution::runtime_env::RuntimeEnv) {
    for (base, (store, _)) in &registry().stores {
        if let Ok(url) = url::Url::parse(base) {
            env.register_object_store(&url, Arc::clone(store) as Arc<dyn ObjectStore>);
        }
    }
}

/// DataFusion's name for the store holding `url`.
pub fn store_url(
    url: &str,
) -> Result<datafusion::datasource::object_store::ObjectStoreUrl, String> {
    let (base, _) = split_url(url)?;
    datafusion::datasource::object_store::ObjectStoreUrl::parse(&base).map_err(|e| e.to_string())
}

/// The object's path within its store.
pub fn location(url: &str) -> Result<ObjectPath, String> {
    Ok(ObjectPath::from(split_url(url)?.1))
}

/// The objects `pattern` names, sorted by URL: one object, every object
/// below a prefix (`s3://b/events/` or a prefix with no object of that
/// name), or the objects a glob matches (`*`, `?`, `[...]` within one path
/// segment, `**` across segments). Returns the URLs and whether the
/// pattern was a prefix (so its `key=value/` folders are partitions).
pub fn resolve(pattern: &str, options: &[(String, String)]) -> Result<(Vec<String>, bool), String> {
    let (base, key) = split_url(pattern)?;
    if base.starts_with("http") && key.contains(['*', '?', '[']) {
        return Err(format!(
            "{pattern}: an http(s) source names one file; globs need a store that lists (s3, gs, az)"
        ));
    }
    let s = store(&base, options)?;
    let join = |loc: &ObjectPath| format!("{base}/{loc}");
    let wild = key.find(['*', '?', '[']);
    let (objects, is_prefix) = match wild {
        Some(at) => {
            let prefix = key[..at].rfind('/').map_or("", |i| &key[..i]);
            let pat = glob::Pattern::new(&key).map_err(|e| format!("{pattern}: {e}"))?;
            let opts = glob::MatchOptions {
                case_sensitive: true,
                require_literal_separator: true,
                require_literal_leading_dot: true,
            };
            let all = s.list_all(prefix).map_err(|e| explain(pattern, e))?;
            let hit = all
                .into_iter()
                .filter(|m| pat.matches_with(m.location.as_ref(), opts))
                .collect::<Vec<_>>();
            (hit, false)
        }
        None => {
            let trimmed = key.trim_end_matches('/');
            let single = if key.ends_with('/') || trimmed.is_empty() {
                None
            } else {
                s.head_meta(trimmed)
                    .map_err(|e| format!("{pattern}: {e}"))?
            };
            match single {
                Some(m) => (vec![m], false),
                None if base.starts_with("http") => {
                    return Err(format!("{pattern}: no such object"));
                }
                None => {
                    let all = s.list_all(trimmed).map_err(|e| explain(pattern, e))?;
                    // Hidden and `_`-prefixed entries (markers such as
                    // `_SUCCESS`) are skipped, as in a local directory.
                    let keep = all
                        .into_iter()
                        .filter(|m| {
                            m.location
                                .as_ref()
                                .strip_prefix(trimmed)
                                .unwrap_or(m.location.as_ref())
                                .split('/')
                                .all(|part| !part.starts_with(['.', '_']))
                        })
                        .collect();
                    (keep, true)
                }
            }
        }
    };
    let mut reg = registry();
    let mut urls = Vec::with_capacity(objects.len());
    for m in objects {
        let url = join(&m.location);
        reg.objects.insert(
            url.clone(),
            RemoteObject {
                size: m.size,
                etag: m.e_tag.clone(),
                version: m.version.clone(),
            },
        );
        urls.push(url);
    }
    urls.sort();
    urls.dedup();
    Ok((urls, is_prefix))
}

/// Asks the store again what `url` is now (for the check before publishing).
pub fn head(url: &str) -> io::Result<RemoteObject> {
    let (s, loc) = store_of(url)?;
    let m = s
        .head_meta(loc.as_ref())
        .map_err(io::Error::other)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the object is gone"))?;
    Ok(RemoteObject {
        size: m.size,
        etag: m.e_tag,
        version: m.version,
    })
}

/// Bytes `range` of the object at `url`.
pub fn read_range(url: &str, range: Range<u64>) -> io::Result<Bytes> {
    let (s, loc) = store_of(url)?;
    let inner = Arc::clone(&s.inner);
    s.blocking(async move { inner.get_range(&loc, range).await })
        .map_err(|e| io::Error::other(format!("{url}: {e}")))
        .inspect(|b| {
            FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
        })
}

/// Hashes the bytes of the object at `url` (blake3, lowercase hex).
pub fn hash_object(url: &str) -> io::Result<String> {
    let (s, loc) = store_of(url)?;
    let mut hasher = blake3::Hasher::new();
    let get = s
        .blocking({
            let s = Arc::clone(&s);
            async move { s.inner.get(&loc).await }
        })
        .map_err(|e| io::Error::other(format!("{url}: {e}")))?;
    let mut stream = get.into_stream();
    while let Some(chunk) = s.blocking_next(&mut stream) {
        let chunk = chunk.map_err(|e| io::Error::other(format!("{url}: {e}")))?;
        FETCHED.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        hasher.update(&chunk);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

mod file;
mod store;

pub use file::{ReadSeek, RemoteFile, input_size, open, open_input};
pub use store::InputStore;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_store_and_key() {
        let (base, key) = split_url("s3://bucket/events/day=1/a%20b.parquet").expect("url");
        assert_eq!(base, "s3://bucket");
        assert_eq!(key, "events/day=1/a b.parquet");
        let (base, key) = split_url("http://127.0.0.1:8333/b/x.csv").expect("url");
        assert_eq!(base, "http://127.0.0.1:8333");
        assert_eq!(key, "b/x.csv");
    }

    #[test]
    fn identity_prefers_the_version() {
        let o = RemoteObject {
            size: 3,
            etag: Some("\"abc\"".into()),
            version: None,
        };
        assert_eq!(o.identity().as_deref(), Some("etag:abc"));
        let v = RemoteObject {
            version: Some("7".into()),
            ..o.clone()
        };
        assert_eq!(v.identity().as_deref(), Some("version:7"));
        let none = RemoteObject { etag: None, ..o };
        assert_eq!(none.identity(), None);
    }

    #[test]
    fn a_later_answer_is_compared_by_the_kind_first_recorded() {
        // A GCS listing: an unquoted ETag and no generation.
        let listed = RemoteObject {
            size: 3,
            etag: Some("XrY7u+Ae7tCTyyK7j1rNww==".into()),
            version: None,
        };
        let id = listed.identity().expect("identity");
        // Its HEAD: the same ETag quoted, and a generation.
        let head = RemoteObject {
            etag: Some("\"XrY7u+Ae7tCTyyK7j1rNww==\"".into()),
            version: Some("1795683566995825".into()),
            ..listed.clone()
        };
        assert_ne!(head.identity(), Some(id.clone()));
        assert_eq!(head.still(&id), Some(true));
        let weak = RemoteObject {
            etag: Some("W/\"XrY7u+Ae7tCTyyK7j1rNww==\"".into()),
            ..head.clone()
        };
        assert_eq!(weak.still(&id), Some(true));
        let changed = RemoteObject {
            etag: Some("\"other\"".into()),
            ..head.clone()
        };
        assert_eq!(changed.still(&id), Some(false));
        // Recorded by version: a new generation is a change, whatever the ETag.
        let by_version = head.identity().expect("identity");
        let rewritten = RemoteObject {
            version: Some("1795683566995999".into()),
            ..head.clone()
        };
        assert_eq!(rewritten.still(&by_version), Some(false));
        assert_eq!(listed.still(&by_version), None);
        assert_eq!(head.still("blake3-or-anything"), None);
    }
}
