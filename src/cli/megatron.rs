//! `tessera export-megatron`: a packed token set as a Megatron-style indexed
//! dataset.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ExportMegatronArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// The output prefix: PREFIX.bin and PREFIX.idx are written.
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Only this split's windows (default: all).
    #[arg(long)]
    split: Option<String>,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ExportMegatronArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let mut ds = tessera_reader::Dataset::open(&path)?;
    if let Some(s) = &a.split {
        ds = ds.split(s)?;
    }
    let r = tessera::megatron::export(&ds, &a.output).map_err(anyhow::Error::msg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} windows, {} tokens ({}) -> {} and {}",
            r.sequences,
            r.tokens,
            r.dtype,
            r.bin.display(),
            r.idx.display()
        );
    }
    Ok(())
}
