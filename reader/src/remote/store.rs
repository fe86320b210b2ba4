//! One object-store prefix, with blocking calls over a private runtime.

use crate::error::{Error, Result};
use futures::StreamExt;
use object_store::client::ClientOptions;
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, BackoffConfig, GetOptions, ObjectStore, ObjectStoreExt,
    ObjectStoreScheme, PutMode, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use std::future::Future;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::runtime::Runtime;

/// Object metadata key holding a stored file's blake3 (written by `push`).
/// Letters only: Azure takes metadata names that are C# identifiers (no
/// `-`), and some HTTP proxies drop header names with `_`.
pub(crate) const BLAKE3_KEY: &str = "tesserablake3";
/// The key pushes wrote before (S3 and GCS sets pushed then carry it).
const LEGACY_BLAKE3_KEY: &str = "tessera-blake3";

/// A prefix in an object store (`s3://bucket/sets/criteo`), the objects
/// below it named by their file names.
#[derive(Clone)]
pub struct RemoteStore {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("url", &self.url)
            .finish()
    }
}

/// What is known about one stored object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) size: u64,
    /// The blake3 `push` recorded in the object's metadata, if any.
    pub(crate) blake3: Option<String>,
}

/// The result of a create-only put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Created {
    /// The object was written.
    Yes,
    /// An object was already there; nothing was written.
    AlreadyThere,
}

impl RemoteStore {
    /// The store and prefix of `url`, configured from the environment and
    /// then `options` (object_store's configuration keys).
    pub fn new(url: &str, options: &[(String, String)]) -> Result<Self> {
        let url = url.trim_end_matches('/').to_owned();
        let (store, path) = object_store_for(&url, options)?;
        Ok(RemoteStore {
            prefix: path,
            url,
            store,
            rt: io_runtime()?,
        })
    }

    /// The URL of object `name` below the prefix.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// The prefix's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path_of(&self, name: &str) -> ObjectPath {
        self.prefix.clone().join(name)
    }

    fn err(&self, name: &str, e: object_store::Error) -> Error {
        Error::Remote {
            url: self.url_of(name),
            reason: e.to_string(),
        }
    }

    /// Runs `fut` on the store's runtime from synchronous code (also from a
    /// thread that is itself inside a runtime).
    pub(crate) fn run<T: Send>(&self, fut: impl Future<Output = T> + Send) -> T {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| {
                s.spawn(|| self.rt.block_on(fut))
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
        } else {
            self.rt.block_on(fut)
        }
    }

    /// The whole object `name` if it exists and is at most `limit` bytes.
    pub(crate) fn get_small(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path_of(name);
        self.run(async {
            let r = match self.store.get(&path).await {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(self.err(name, e)),
            };
            if r.meta.size > limit {
                return Err(Error::Remote {
                    url: self.url_of(name),
                    reason: format!("{} bytes is more than the limit of {limit}", r.meta.size),
                });
            }
            let b = r.bytes().await.map_err(|e| self.err(name, e))?;
            Ok(Some(b.to_vec()))
        })
    }

    /// Streams object `name`, which must be `size` bytes, into `sink`.
    pub(crate) fn get_stream(
        &self,
        name: &str,
        size: u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let path = self.path_of(name);
        let url = self.url_of(name);
        let r = match self.run(self.store.get(&path)) {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::MissingShard { path: url.into() });
            }
            Err(e) => return Err(self.err(name, e)),
        };
        if r.meta.size != size {
            return Err(Error::Size {
                path: url.into(),
                expected: size,
                actual: r.meta.size,
            });
        }
        // The sink runs here, between chunks, not inside the runtime.
        let mut stream = r.into_stream();
        while let Some(chunk) = self.run(stream.next()) {
            let chunk = chunk.map_err(|e| self.err(name, e))?;
            sink(&chunk)?;
        }
        Ok(())
    }

    /// Size and recorded blake3 of object `name`, `None` if absent.
    pub(crate) fn head(&self, name: &str) -> Result<Option<Head>> {
        let path = self.path_of(name);
        self.run(async {
            let opts = GetOptions {
                head: true,
                ..Default::default()
            };
            match self.store.get_opts(&path, opts).await {
                Ok(r) => Ok(Some(Head {
                    size: r.meta.size,
                    blake3: [BLAKE3_KEY, LEGACY_BLAKE3_KEY].iter().find_map(|k| {
                        r.attributes
                            .get(&Attribute::Metadata((*k).into()))
                            .map(|v| v.as_ref().to_owned())
                    }),
                })),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.err(name, e)),
            }
        })
    }

    /// Writes `bytes` as object `name` in one request; with `create_only`,
    /// only if no object has that name (an atomic check on the store).
    pub(crate) fn put(
        &self,
        name: &str,
        bytes: Vec<u8>,
        blake3: Option<&str>,
        create_only: bool,
    ) -> Result<Created> {
        let path = self.path_of(name);
        self.run(async {
            let opts = PutOptions {
                mode: if create_only {
                    PutMode::Create
                } else {
                    PutMode::Overwrite
                },
                attributes: attributes(blake3),
                ..Default::default()
            };
            match self
                .store
                .put_opts(&path, PutPayload::from(bytes), opts)
                .await
            {
                Ok(_) => Ok(Created::Yes),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(Created::AlreadyThere),
                Err(e) => Err(self.err(name, e)),
            }
        })
    }

    /// Uploads the local file `file` as object `name` in parts of
    /// `part_bytes`, up to `concurrency` parts in flight.
    pub(crate) fn put_multipart(
        &self,
        name: &str,
        file: &std::path::Path,
        blake3: &str,
        part_bytes: usize,
        concurrency: usize,
    ) -> Result<()> {
        let path = self.path_of(name);
        self.run(async {
            let opts = object_store::PutMultipartOptions {
                attributes: attributes(Some(blake3)),
                ..Default::default()
            };
            let upload = self
                .store
                .put_multipart_opts(&path, opts)
                .await
                .map_err(|e| self.err(name, e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, part_bytes);
            let f = std::fs::File::open(file).map_err(|e| Error::io(file, e))?;
            let mut buf = vec![0u8; part_bytes];
            loop {
                let n = read_full(&f, &mut buf).map_err(|e| Error::io(file, e))?;
                if n == 0 {
                    break;
                }
                w.wait_for_capacity(concurrency)
                    .await
                    .map_err(|e| self.err(name, e))?;
                w.write(&buf[..n]);
            }
            w.finish().await.map_err(|e| self.err(name, e))?;
            Ok(())
        })
    }

    /// Deletes object `name` (absent is fine).
    pub fn delete(&self, name: &str) -> Result<()> {
        let path = self.path_of(name);
        self.run(async {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.err(name, e)),
            }
        })
    }
}

fn attributes(blake3: Option<&str>) -> Attributes {
    let mut a = Attributes::new();
    if let Some(h) = blake3 {
        a.insert(Attribute::Metadata(BLAKE3_KEY.into()), h.to_owned().into());
    }
    a
}

/// Reads until `buf` is full or the file ends.
fn read_full(mut f: &std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The process's I/O runtime. A runtime inherited through `fork()` (a
/// PyTorch DataLoader worker) has no threads left, so a child process makes
/// its own.
pub fn io_runtime() -> Result<Arc<Runtime>> {
    static RT: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((p, rt)) = slot.as_ref()
        && *p == pid
    {
        return Ok(Arc::clone(rt));
    }
    if let Some((_, stale)) = slot.take() {
        // Its threads died with the fork; dropping it would wait on them.
        std::mem::forget(stale);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tessera-io")
        .enable_all()
        .build()
        .map_err(|e| Error::io("tokio runtime", e))?;
    let rt = Arc::new(rt);
    *slot = Some((pid, Arc::clone(&rt)));
    Ok(rt)
}

/// The store that holds `url` and the path of `url` in it, configured from
/// the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and then `options`
/// (object_store's configuration keys, such as `endpoint`, `region`,
/// `allow_http`). Requests are retried with exponential backoff.
pub fn object_store_for(
    url: &str,
    options: &[(String, String)],
) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let url = url.to_owned();
    let bad = |reason: String| Error::Remote {
        url: url.clone(),
        reason,
    };
    let parsed = url::Url::parse(&url).map_err(|e| bad(format!("not a URL: {e}")))?;
    let (scheme, path) =
        ObjectStoreScheme::parse(&parsed).map_err(|e| bad(format!("unsupported URL: {e}")))?;
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 5,
        retry_timeout: Duration::from_secs(30),
    };
    let unknown = |k: &str| bad(format!("unknown storage option {k:?}"));
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            let mut b = AmazonS3Builder::from_env().with_url(url.as_str());
            for (k, v) in options {
                let key = AmazonS3ConfigKey::from_str(k).map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(
                b.with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            )
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(url.as_str());
            for (k, v) in options {
                let key = GoogleConfigKey::from_str(k).map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(
                b.with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            )
        }
        ObjectStoreScheme::MicrosoftAzure => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            let mut b = MicrosoftAzureBuilder::from_env().with_url(url.as_str());
            for (k, v) in options {
                let key = AzureConfigKey::from_str(k).map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(
                b.with_retry(retry)
                    .build()
                    .map_err(|e| bad(e.to_string()))?,
            )
        }
        ObjectStoreScheme::Http => {
            use object_store::client::ClientConfigKey;
            use object_store::http::HttpBuilder;
            let base = &parsed[..url::Position::BeforePath];
            let mut client = ClientOptions::new();
            for (k, v) in options {
                let key = ClientConfigKey::from_str(k).map_err(|_| unknown(k))?;
                client = client.with_config(key, v);
            }
            let b = HttpBuilder::new()
                .with_url(base)
                .with_client_options(client)
                .with_retry(retry);
            Arc::new(b.build().map_err(|e| bad(e.to_string()))?)
        }
        other => return Err(bad(format!("{other:?} URLs are not object stores here"))),
    };
    Ok((store, path))
}
