//! The `tessera` command line: build, inspect, head, verify, cache, bench,
//! transform, export-transform. The commands live in `cli/`, one module
//! each; this file parses, runs, and turns an error into a message and an
//! exit code.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod cli;

use clap::Parser;
use std::process::ExitCode;

/// Large zeroed blocks are written, not mapped to the zero page
/// (see `tessera::alloc`).
#[global_allocator]
static ALLOCATOR: tessera::alloc::Allocator = tessera::alloc::Allocator;

fn main() -> ExitCode {
    tessera::build::exit_cleanly_on_abort();
    tessera::build::fit_address_space();
    match cli::run(cli::Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line. Our errors already include their
/// causes' text; a cause is added only when it adds something.
fn message(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    msg
}
