//! What the commands that take a TARGET share: opening its shard set, and
//! placing a built artifact where `-o DIR|URL` says.

use anyhow::{Context, Result};
use std::path::Path;
use tessera_reader::remote::PushReport;
use tessera_reader::{Dataset, OpenOptions};

/// Opens the shard set at `path` (a directory or a URL), or one split of it.
pub fn open(path: &Path, split: Option<&str>) -> Result<Dataset> {
    open_with(path, split, &OpenOptions::default())
}

/// [`open`] with options; the `--storage` options apply unless `opts` has
/// its own. A set opened from the shard cache without its store says so.
pub fn open_with(path: &Path, split: Option<&str>, opts: &OpenOptions) -> Result<Dataset> {
    let mut opts = opts.clone();
    if opts.storage_options.is_empty() {
        opts.storage_options = tessera::remote_input::cli_options();
    }
    let ds = Dataset::open_with(path, &opts)?;
    if let Some(why) = ds.offline() {
        eprintln!("warning: {why}");
    }
    Ok(match split {
        Some(s) => ds.split(s)?,
        None => ds,
    })
}

/// `-o DIR|URL`: pushes the artifact at `path` to an object-store URL
/// (returning what the push did), or places it at a directory.
pub fn place(path: &Path, output: Option<&str>) -> Result<Option<PushReport>> {
    Ok(match output {
        Some(url) if tessera_reader::is_store_url(url) => Some(
            tessera::push::push(path, url, 4)
                .with_context(|| format!("pushing {} to {url}", path.display()))?,
        ),
        Some(dir) => {
            tessera::artifact::export(path, Path::new(dir))?;
            None
        }
        None => None,
    })
}
