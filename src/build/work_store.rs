//! A work directory in an object store (`tessera plan --work-dir s3://...`),
//! for clusters whose nodes share no file system.
//!
//! Each `tessera task` and `tessera commit` works in a private local
//! directory: it downloads the plan and the outputs its tasks read, runs
//! them exactly as with a local work directory, and uploads what they wrote,
//! shards before the small output file that lists them. Every object is
//! written whole by one PUT and a retried task writes the same bytes, so a
//! killed or duplicated task never leaves a torn or different object. The
//! spec travels inside the plan, so a node needs neither the spec file nor
//! the planning machine's directories (its sources must then be URLs or
//! absolute paths that exist there).

use super::BuildError;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::runtime::Runtime;

/// Object-store URL schemes a work directory may use.
pub(super) fn is_url(p: &Path) -> bool {
    p.to_str().is_some_and(crate::remote_input::is_url)
}

/// A work directory at `url` and its private local mirror.
pub(super) struct WorkStore {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    rt: Arc<Runtime>,
    /// The local mirror (removed on drop).
    pub local: PathBuf,
}

impl Drop for WorkStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.local);
    }
}

fn err(what: impl std::fmt::Display) -> BuildError {
    BuildError::Other(what.to_string())
}

impl WorkStore {
    /// Opens the work directory at `url`, with credentials from the
    /// environment and `--storage` options, and makes an empty local mirror
    /// for it.
    pub fn open(url: &str) -> Result<WorkStore, BuildError> {
        let url = url.trim_end_matches('/').to_string();
        let (store, prefix) = tessera_reader::remote::object_store_for(&url, &[]).map_err(err)?;
        let rt = tessera_reader::remote::io_runtime().map_err(err)?;
        let local = std::env::temp_dir().join(format!(
            "tessera-work-{}",
            tessera_reader::durable::unique_suffix()
        ));
        std::fs::create_dir_all(&local).map_err(|e| err(format!("{}: {e}", local.display())))?;
        Ok(WorkStore {
            url,
            store,
            prefix,
            rt,
            local,
        })
    }

    fn key(&self, rel: &str) -> ObjectPath {
        rel.split('/')
            .fold(self.prefix.clone(), |p, part| p.join(part))
    }

    /// The URL of `rel`.
    pub fn url_of(&self, rel: &str) -> String {
        format!("{}/{rel}", self.url)
    }

    /// Downloads object `rel` into the mirror; `what` says which task writes
    /// it, for the message when it is missing.
    pub fn fetch(&self, rel: &str, what: &str) -> Result<PathBuf, BuildError> {
        let key = self.key(rel);
        let store = Arc::clone(&self.store);
        let got = self.rt.block_on(async move {
            match store.get(&key).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        let bytes = match got {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Err(err(format!(
                    "{}: not there ({what} writes it; has it run?)",
                    self.url_of(rel)
                )));
            }
            Err(e) => return Err(err(format!("{}: {e}", self.url_of(rel)))),
        };
        let to = self.local.join(rel);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&to, &bytes).map_err(|e| err(format!("{}: {e}", to.display())))?;
        Ok(to)
    }

    /// Uploads the mirror's file `rel` as object `rel` (one PUT: the object
    /// appears whole or not at all).
    pub fn upload(&self, rel: &str) -> Result<(), BuildError> {
        let from = self.local.join(rel);
        let bytes = std::fs::read(&from).map_err(|e| err(format!("{}: {e}", from.display())))?;
        let key = self.key(rel);
        let store = Arc::clone(&self.store);
        self.rt
            .block_on(async move { store.put(&key, PutPayload::from(bytes)).await })
            .map(|_| ())
            .map_err(|e| err(format!("{}: {e}", self.url_of(rel))))
    }

    /// Deletes the objects `rels` (absent ones are fine).
    pub fn delete(&self, rels: &[String]) {
        for rel in rels {
            let key = self.key(rel);
            let store = Arc::clone(&self.store);
            let _ = self.rt.block_on(async move { store.delete(&key).await });
        }
    }
}
