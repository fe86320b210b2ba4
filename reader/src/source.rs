//! Where the stored bytes of a shard come from when it is not simply
//! mapped: a local directory (compressed sets) or an object store (the
//! `remote` feature).

use crate::error::{Error, Result};
use std::io::Read;
use std::path::PathBuf;

/// Reads stored shard files by name.
pub(crate) trait ShardSource: Send + Sync + std::fmt::Debug {
    /// Streams the stored file `name`, which should be `size` bytes, into
    /// `sink` in order.
    fn read(&self, name: &str, size: u64, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()>;

    /// Where `name` lives, for messages: a path or a URL.
    fn locate(&self, name: &str) -> PathBuf;

    /// Whether a failed or corrupt read is worth repeating (a network
    /// transfer), or would fail the same way (a local file).
    fn retry_worthy(&self) -> bool;
}

/// Stored shard files in a local directory.
#[derive(Debug)]
pub(crate) struct LocalDir {
    pub(crate) dir: PathBuf,
}

impl ShardSource for LocalDir {
    fn read(&self, name: &str, size: u64, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let path = self.dir.join(name);
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::MissingShard { path });
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let actual = f.metadata().map_err(|e| Error::io(&path, e))?.len();
        if actual != size {
            return Err(Error::Size {
                path,
                expected: size,
                actual,
            });
        }
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).map_err(|e| Error::io(&path, e))?;
            if n == 0 {
                return Ok(());
            }
            sink(&buf[..n])?;
        }
    }

    fn locate(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn retry_worthy(&self) -> bool {
        false
    }
}
