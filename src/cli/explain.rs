//! `tessera explain`: how a spec would be built, without building.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ExplainArgs {
    /// The spec file.
    spec: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ExplainArgs) -> Result<()> {
    let e = tessera::build::explain(&a.spec)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        print!("{}", tessera::build::format_explanation(&e));
    }
    Ok(())
}
