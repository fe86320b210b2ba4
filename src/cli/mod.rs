//! The `tessera` command line: the clap definitions, and one module per
//! command (or per group of closely related commands), each holding its
//! arguments and a `run` that calls the library and prints the result as
//! text or, with `--json`, as the report type's serialization.
//!
//! [`args`] parses argument values clap does not know; [`target`] opens the
//! shard set a TARGET names and places an artifact at `-o DIR|URL`.

mod args;
mod bench;
mod build;
mod cache;
mod explain;
mod inspect;
mod megatron;
mod plan;
mod push;
mod serve;
mod target;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Compile a YAML dataset spec into content-hashed, fixed-stride shards, and inspect them"
)]
pub struct Cli {
    /// An object-store option for every URL this command reads or writes
    /// (sources, shard sets, work directories), on top of the environment's
    /// AWS_*, GOOGLE_* and AZURE_* variables: endpoint=http://127.0.0.1:8333,
    /// region=eu-west-1, allow_http=true, ... (object_store's keys; a
    /// source's own `storage:` options win). Repeatable.
    #[arg(long = "storage", global = true, value_name = "KEY=VALUE", value_parser = args::parse_storage_option)]
    storage: Vec<(String, String)>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a spec into a shard set (or return the cached one).
    Build(build::BuildArgs),
    /// Plan a build without running it: the hash, the chunks and the tasks,
    /// written to WORK_DIR/plan.json for `tessera task` and `tessera commit`.
    Plan(plan::PlanArgs),
    /// Run tasks of a plan, one after the other in one process (idempotent:
    /// a rerun rewrites the same outputs).
    Task(plan::TaskArgs),
    /// Assemble a plan's task outputs and publish the artifact.
    Commit(plan::CommitArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Show how a spec would be built, without building: DataFusion's plan,
    /// whether the query is cut into chunks (and why not), and the chunks.
    Explain(explain::ExplainArgs),
    /// Describe a shard set: layout, splits, shards, statistics.
    Inspect(inspect::InspectArgs),
    /// Print the first records, decoded.
    Head(inspect::HeadArgs),
    /// Upload a shard set to an object store: the shards first (in
    /// parallel, large ones in parts, retried), the manifest last with a
    /// create-only put, so no reader sees a set with missing shards. Pushing
    /// a set that is already there does nothing.
    Push(push::PushArgs),
    /// Check every shard's blake3 against the manifest.
    Verify(inspect::VerifyArgs),
    /// Manage the artifact cache.
    Cache(cache::CacheArgs),
    /// Measure loader throughput and the data stall for a simulated step time.
    Bench(bench::BenchArgs),
    /// Apply a shard set's transforms to the rows of a file, for batch
    /// scoring: the records `build` would write for them.
    Transform(serve::TransformArgs),
    /// Time the serving transform (without DataFusion) on the rows of a
    /// file: microseconds per call for one row and for batches.
    BenchTransform(serve::BenchTransformArgs),
    /// Write a shard set's transforms as one portable JSON document (frozen
    /// statistics, vocabularies, hash, layout), its JSON schema, and a
    /// conformance file of raw rows with the records they must give.
    ExportTransform(serve::ExportTransformArgs),
    /// Write a packed token set's windows as a Megatron-style indexed
    /// dataset: PREFIX.bin (token ids) and PREFIX.idx (where each window
    /// starts), one sequence per window, padding left out.
    ExportMegatron(megatron::ExportMegatronArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    tessera::remote_input::set_cli_options(cli.storage);
    match cli.command {
        Command::Build(a) => build::run(a)?,
        Command::Plan(a) => plan::plan(a)?,
        Command::Task(a) => plan::task(a)?,
        Command::Commit(a) => plan::commit(a)?,
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "tessera", &mut std::io::stdout());
        }
        Command::Explain(a) => explain::run(a)?,
        Command::Inspect(a) => inspect::inspect(a)?,
        Command::Head(a) => inspect::head(a)?,
        Command::Push(a) => push::run(a)?,
        Command::Verify(a) => inspect::verify(a)?,
        Command::Cache(a) => cache::run(a)?,
        Command::Bench(a) => bench::run(a)?,
        Command::Transform(a) => serve::transform(a)?,
        Command::BenchTransform(a) => serve::bench_transform(a)?,
        Command::ExportTransform(a) => serve::export_transform(a)?,
        Command::ExportMegatron(a) => megatron::run(a)?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency check of the definitions (names that
    /// `conflicts_with` and `requires` point at exist, no two arguments
    /// share a flag, defaults parse, ...), which it otherwise runs only when
    /// a command line reaches the faulty command.
    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn storage_and_cache_dir_follow_the_subcommand_and_inspect_path_excludes_json() {
        let cli = Cli::try_parse_from([
            "tessera",
            "cache",
            "ls",
            "--storage",
            "region=x",
            "--cache-dir",
            "c",
        ])
        .unwrap();
        assert_eq!(cli.storage, [("region".to_string(), "x".to_string())]);
        assert!(matches!(cli.command, Command::Cache(_)));
        let e = Cli::try_parse_from(["tessera", "inspect", "t", "--json", "--path"])
            .err()
            .unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}
