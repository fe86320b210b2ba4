//! `tessera push`: a shard set into an object store.

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PushArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// Destination prefix: s3://bucket/path (also gs://, az://, http(s)://).
    /// Credentials and endpoint come from the environment (AWS_ACCESS_KEY_ID,
    /// AWS_ENDPOINT, AWS_REGION, AWS_ALLOW_HTTP, ...).
    url: String,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Files uploaded at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: PushArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let url = &a.url;
    let r = tessera::push::push(&path, url, a.concurrency)
        .with_context(|| format!("pushing {} to {url}", path.display()))?;
    if a.json {
        println!("{}", serde_json::to_string(&tessera::push::to_json(&r))?);
    } else {
        println!("{}", tessera::push::describe(&r));
    }
    Ok(())
}
