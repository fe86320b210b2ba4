//! # tessera
//!
//! A declarative dataset compiler: a YAML spec (sources, query, filter, fields
//! with transforms, splits, shards) is compiled through Apache DataFusion into
//! a filtered, pre-transformed, content-hashed shard set in the flat,
//! fixed-stride format of the [`tessera_reader`] crate, which streams it into
//! training loops.
//!
//! The pieces, in pipeline order: [`spec`] parses and validates the spec;
//! [`fingerprint`] hashes inputs; [`cache`] finds or publishes artifacts;
//! [`plan`] (the only module that touches DataFusion) runs the statistics and
//! encode tasks; [`build`] drives them; [`inspect`] and [`bench`] serve the CLI;
//! [`serve`] applies an artifact's transforms to new rows (`tessera transform`,
//! `tessera export-transform`) through the `tessera_transform` crate.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod accumulators;
pub mod alloc;
pub mod artifact;
pub mod bench;
pub mod build;
pub mod cache;
pub mod compress;
pub mod contact;
pub mod error;
pub mod exact;
pub mod fault;
pub mod fingerprint;
pub mod inspect;
pub mod megatron;
pub mod pack;
pub mod pathkind;
pub mod plan;
pub mod progress;
pub mod push;
pub mod remote_input;
pub mod resources;
pub mod serve;
pub mod serve_bench;
pub mod spec;

pub use build::{BuildError, BuildOptions, BuildReport, build};
