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

mod push;
mod store;

pub use push::{PushOptions, PushReport, push};
pub use store::{RemoteStore, io_runtime, object_store_for};

use crate::error::{Error, Result};
use crate::manifest::{MANIFEST_FILE, MAX_MANIFEST_BYTES, Manifest};
use crate::source::ShardSource;
use std::path::{Path, PathBuf};

/// Reads the manifest at `url` and returns it with a source for its shards.
pub(crate) fn open_set(
    url: &str,
    options: &[(String, String)],
) -> Result<(Manifest, Box<dyn ShardSource>)> {
    let store = RemoteStore::new(url, options)?;
    let bytes = store
        .get_small(MANIFEST_FILE, MAX_MANIFEST_BYTES)?
        .ok_or_else(|| Error::Remote {
            url: store.url_of(MANIFEST_FILE),
            reason: "no manifest here: not a shard set, or a push that has not finished \
                     (the manifest is written last)"
                .into(),
        })?;
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
    Ok((manifest, Box::new(StoreSource { store })))
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
