//! Shard sets in object stores (the `remote` feature): `s3://`, `gs://`,
//! `az://`, `http(s)://` URLs through the `object_store` crate, the same
//! version DataFusion uses.
//!
//! A set at `URL` is the objects `URL/manifest.json` and `URL/<file>` for
//! each shard the manifest lists. Opening one reads the manifest (one GET;
//! the bucket is never listed); shards are fetched into the local shard
//! cache as the reader needs them. [`push`] uploads a local set so that a
//! reader never sees a manifest whose shards are not all there.
//!
//! Credentials, endpoints and regions come from the usual environment
//! variables (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`,
//! ...), overridden by explicit `storage_options`. Requests are retried
//! with exponential backoff (object_store's retry: up to 5 retries within
//! 30 s), and a shard whose bytes arrive corrupt is fetched again.

mod offline;
mod push;
mod store;

pub use push::{PushOptions, PushReport, push};
pub use store::{RemoteStore, io_runtime, object_store_for};

use crate::error::{Error, Result};
use crate::manifest::{MANIFEST_FILE, MAX_MANIFEST_BYTES, Manifest};
use crate::source::ShardSource;
use std::path::{Path, PathBuf};

/// A set opened from a URL: its manifest, a source for its shards, and,
/// when the store could not be reached and the manifest kept in the shard
/// cache stood in for it, why (see `offline`).
pub(crate) struct OpenedSet {
    pub(crate) manifest: Manifest,
    pub(crate) source: Box<dyn ShardSource>,
    pub(crate) offline: Option<String>,
}

/// Reads the manifest at `url` and returns it with a source for its shards.
/// `cache_root` is the shard cache, which keeps a copy of the manifest for
/// an open that cannot reach the store.
pub(crate) fn open_set(
    url: &str,
    options: &[(String, String)],
    cache_root: &Path,
) -> Result<OpenedSet> {
    let store = RemoteStore::new(url, options)?;
    let bytes = match store.get_small(MANIFEST_FILE, MAX_MANIFEST_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(Error::Remote {
                url: store.url_of(MANIFEST_FILE),
                reason: "no manifest here: not a shard set, or a push that has not finished \
                         (the manifest is written last)"
                    .into(),
            });
        }
        Err(unreachable) => {
            return match offline::recall(cache_root, store.url()) {
                Ok(manifest) => Ok(OpenedSet {
                    offline: Some(format!(
                        "{} could not be read ({unreachable}); using the copy of its manifest \
                         kept in the shard cache {} by an earlier open, whose shards are all \
                         there and match their blake3. The set is read as it was then; a \
                         change pushed since is not seen.",
                        store.url_of(MANIFEST_FILE),
                        cache_root.display()
                    )),
                    manifest,
                    source: Box::new(StoreSource { store }),
                }),
                Err(why) => Err(Error::Remote {
                    url: store.url_of(MANIFEST_FILE),
                    reason: format!(
                        "{}; and the shard cache cannot stand in for the store: {why}",
                        match &unreachable {
                            Error::Remote { reason, .. } => reason.clone(),
                            other => other.to_string(),
                        }
                    ),
                }),
            };
        }
    };
    let manifest = Manifest::parse(&bytes, Path::new(&store.url_of(MANIFEST_FILE)))?;
    // The set's other files (rare: large vocabularies) must be there with
    // their sizes, as for a local set; shards are checked when fetched.
    for f in &manifest.files {
        match store.head(&f.file)? {
            Some(h) if h.size == f.bytes => {}
            Some(h) => {
                return Err(Error::Size {
                    path: PathBuf::from(store.url_of(&f.file)),
                    expected: f.bytes,
                    actual: h.size,
                });
            }
            None => {
                return Err(Error::MissingShard {
                    path: PathBuf::from(store.url_of(&f.file)),
                });
            }
        }
    }
    offline::remember(cache_root, store.url(), &bytes);
    Ok(OpenedSet {
        manifest,
        source: Box::new(StoreSource { store }),
        offline: None,
    })
}

/// Shard files read from an object store.
#[derive(Debug)]
struct StoreSource {
    store: RemoteStore,
}

impl ShardSource for StoreSource {
    fn read(&self, name: &str, size: u64, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.store.get_stream(name, size, sink)
    }

    fn locate(&self, name: &str) -> PathBuf {
        PathBuf::from(self.store.url_of(name))
    }

    fn retry_worthy(&self) -> bool {
        true
    }
}
