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

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use tokio::runtime::Runtime;

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

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(v) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

/// Size of [`RemoteFile`]'s first ranged read (a header, a footer); each
/// further read doubles it up to [`MAX_BLOCK`].
const FIRST_BLOCK: u64 = 256 << 10;
const MAX_BLOCK: u64 = 8 << 20;

/// A `Read + Seek` view of one object, fetched in ranged GETs (256 KiB at
/// first, doubling up to 8 MiB) as it is read.
pub struct RemoteFile {
    url: String,
    size: u64,
    pos: u64,
    buf: Bytes,
    buf_start: u64,
    block: u64,
}

/// Something to read an input file through.
pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

/// Opens an input file, local or remote, and returns it with its size.
pub fn open_input(path: &Path) -> io::Result<(Box<dyn ReadSeek>, u64)> {
    if let Some(url) = path.to_str().filter(|u| is_url(u)) {
        let f = open(url)?;
        let size = f.size;
        return Ok((Box::new(f), size));
    }
    let f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    Ok((Box::new(f), size))
}

/// The size of an input file, local or remote.
pub fn input_size(path: &Path) -> io::Result<u64> {
    match path.to_str().filter(|u| is_url(u)) {
        Some(url) => match object(url) {
            Some(o) => Ok(o.size),
            None => Ok(head(url)?.size),
        },
        None => Ok(std::fs::metadata(path)?.len()),
    }
}

/// Opens the object at `url` for reading. Its size is the listed one.
pub fn open(url: &str) -> io::Result<RemoteFile> {
    let size = match object(url) {
        Some(o) => o.size,
        None => head(url)?.size,
    };
    Ok(RemoteFile {
        url: url.to_string(),
        size,
        pos: 0,
        buf: Bytes::new(),
        buf_start: 0,
        block: FIRST_BLOCK,
    })
}

impl RemoteFile {
    /// The object's size.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Read for RemoteFile {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || out.is_empty() {
            return Ok(0);
        }
        let in_buf =
            self.pos >= self.buf_start && self.pos < self.buf_start + self.buf.len() as u64;
        if !in_buf {
            let end = (self.pos + self.block.max(out.len() as u64)).min(self.size);
            self.block = (self.block * 2).min(MAX_BLOCK);
            self.buf = read_range(&self.url, self.pos..end)?;
            self.buf_start = self.pos;
            if self.buf.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: the object ended early", self.url),
                ));
            }
        }
        let off = (self.pos - self.buf_start) as usize;
        let n = out.len().min(self.buf.len() - off);
        out[..n].copy_from_slice(&self.buf[off..off + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RemoteFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

/// An object store that runs every request on the I/O runtime and counts
/// the bytes it returns.
#[derive(Debug)]
pub struct InputStore {
    inner: Arc<dyn ObjectStore>,
    rt: Arc<Runtime>,
    name: String,
}

impl std::fmt::Display for InputStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InputStore({})", self.name)
    }
}

impl InputStore {
    /// Runs `fut` on the I/O runtime and waits for it, from any thread
    /// (also one inside another runtime: blocking it is what the build's
    /// tasks do for local reads too).
    fn blocking<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> object_store::Result<T> {
        let handle = self.rt.spawn(fut);
        futures::executor::block_on(handle).unwrap_or_else(|e| {
            Err(object_store::Error::Generic {
                store: "InputStore",
                source: Box::new(e),
            })
        })
    }

    fn blocking_next(
        &self,
        stream: &mut BoxStream<'static, object_store::Result<Bytes>>,
    ) -> Option<object_store::Result<Bytes>> {
        let _guard = self.rt.enter();
        futures::executor::block_on(stream.next())
    }

    fn head_meta(&self, key: &str) -> Result<Option<ObjectMeta>, String> {
        let inner = Arc::clone(&self.inner);
        let loc = ObjectPath::from(key);
        match self.blocking(async move { inner.head(&loc).await }) {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>, String> {
        let inner = Arc::clone(&self.inner);
        let prefix = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
        self.blocking(async move {
            let mut out = Vec::new();
            let mut s = inner.list(prefix.as_ref());
            while let Some(m) = s.next().await {
                out.push(m?);
            }
            Ok(out)
        })
        .map_err(|e| e.to_string())
    }

    /// Runs `fut` on the I/O runtime and awaits it from the caller's.
    async fn on_io<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> object_store::Result<T> {
        self.rt.spawn(fut).await.unwrap_or_else(|e| {
            Err(object_store::Error::Generic {
                store: "InputStore",
                source: Box::new(e),
            })
        })
    }

    fn read_only(&self) -> object_store::Error {
        object_store::Error::NotSupported {
            source: format!("{}: inputs are read only", self.name).into(),
        }
    }
}

#[async_trait]
impl ObjectStore for InputStore {
    async fn put_opts(
        &self,
        _location: &ObjectPath,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.read_only())
    }

    async fn put_multipart_opts(
        &self,
        _location: &ObjectPath,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.read_only())
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let inner = Arc::clone(&self.inner);
        let loc = location.clone();
        let head = options.head;
        let r = self
            .on_io(async move { inner.get_opts(&loc, options).await })
            .await?;
        if head {
            return Ok(r);
        }
        let GetResult {
            payload,
            meta,
            range,
            attributes,
        } = r;
        let GetResultPayload::Stream(mut body) = payload else {
            return Err(object_store::Error::NotImplemented {
                operation: "a file payload from a remote store".into(),
                implementer: self.name.clone(),
            });
        };
        // The body is polled on the I/O runtime and handed over through a
        // small channel, so the caller's runtime never drives the socket.
        let (mut tx, rx) = futures::channel::mpsc::channel::<object_store::Result<Bytes>>(4);
        self.rt.spawn(async move {
            use futures::SinkExt;
            while let Some(chunk) = body.next().await {
                if let Ok(b) = &chunk {
                    FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
                }
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
        });
        Ok(GetResult {
            payload: GetResultPayload::Stream(rx.boxed()),
            meta,
            range,
            attributes,
        })
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let inner = Arc::clone(&self.inner);
        let loc = location.clone();
        let ranges = ranges.to_vec();
        let out = self
            .on_io(async move { inner.get_ranges(&loc, &ranges).await })
            .await?;
        let n: usize = out.iter().map(Bytes::len).sum();
        FETCHED.fetch_add(n as u64, Ordering::Relaxed);
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        let err = self.read_only();
        locations
            .map(move |_| {
                Err(object_store::Error::NotSupported {
                    source: err.to_string().into(),
                })
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.cloned();
        let fut = self.rt.spawn(async move {
            let mut out = Vec::new();
            let mut s = inner.list(prefix.as_ref());
            while let Some(m) = s.next().await {
                out.push(m);
            }
            out
        });
        futures::stream::once(fut)
            .flat_map(|r| {
                futures::stream::iter(r.unwrap_or_else(|e| {
                    vec![Err(object_store::Error::Generic {
                        store: "InputStore",
                        source: Box::new(e),
                    })]
                }))
            })
            .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.cloned();
        self.on_io(async move { inner.list_with_delimiter(prefix.as_ref()).await })
            .await
    }

    async fn copy_opts(
        &self,
        _from: &ObjectPath,
        _to: &ObjectPath,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(self.read_only())
    }
}

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
