//! `tessera inspect`, `tessera head` and `tessera verify`: looking at a
//! shard set.

use super::target::open;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// Print the manifest as JSON.
    #[arg(long)]
    json: bool,
    /// Print only the shard set's directory (or URL) that TARGET names,
    /// without opening it (`tessera.open` resolves names this way).
    #[arg(long, conflicts_with = "json")]
    path: bool,
    /// Artifact cache directory (to find a spec's, hash's or name's artifact).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    if a.path {
        println!("{}", path.display());
        return Ok(());
    }
    let ds = open(&path, None)?;
    if a.json {
        println!("{}", String::from_utf8_lossy(&ds.manifest().to_json()));
    } else {
        print!("{}", tessera::inspect::summary(&ds));
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct HeadArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Records to print.
    #[arg(short, default_value_t = 10)]
    n: u64,
    /// Only this split.
    #[arg(long)]
    split: Option<String>,
    /// Write the image fields of the first N records as PNG files into
    /// this folder (FIELD-RECORD.png, and FIELD-sheet.png, a contact
    /// sheet of them) instead of printing the records.
    #[arg(long, value_name = "DIR")]
    png: Option<PathBuf>,
    /// With --png: only this image field.
    #[arg(long, requires = "png")]
    field: Option<String>,
}

pub fn head(a: HeadArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let ds = open(&path, a.split.as_deref())?;
    match a.png {
        Some(dir) => {
            let files = tessera::contact::write_pngs(&ds, a.field.as_deref(), a.n, &dir)
                .map_err(anyhow::Error::msg)?;
            for f in files {
                println!("{}", f.display());
            }
        }
        None => print!("{}", tessera::inspect::head(&ds, a.n)),
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

pub fn verify(a: VerifyArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let ds = open(&path, None)?;
    ds.verify()?;
    println!(
        "ok: {} shard(s), {} rows verified",
        ds.manifest().shards.len(),
        ds.manifest().rows
    );
    Ok(())
}
