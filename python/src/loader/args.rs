//! The loader's arguments as Python passes them, checked into a
//! [`LoaderConfig`].

use crate::errors::argument;
use pyo3::prelude::*;
use tessera_reader::{LastBatch, LoaderConfig};

/// Loader arguments as Python passes them, checked by [`LoaderArgs::config`].
pub(crate) struct LoaderArgs<'a> {
    pub(crate) batch_size: i64,
    pub(crate) shuffle: bool,
    pub(crate) seed: u64,
    pub(crate) rank: i64,
    pub(crate) world_size: i64,
    pub(crate) drop_last: bool,
    pub(crate) threads: i64,
    pub(crate) prefetch: i64,
    pub(crate) last_batch: Option<&'a str>,
    pub(crate) worker: i64,
    pub(crate) num_workers: i64,
    pub(crate) shuffle_window: i64,
    /// False: a sequential batch inside one shard is handed out as
    /// read-only views of the memory map (no copy).
    pub(crate) copy: bool,
}

impl LoaderArgs<'_> {
    pub(super) fn config(&self) -> PyResult<LoaderConfig> {
        let last_batch = match self.last_batch {
            None if self.drop_last => LastBatch::Drop,
            None => LastBatch::Partial,
            Some(s) => parse_last_batch(s)?,
        };
        let rank = at_least("rank", self.rank, 0)?;
        let world_size = at_least("world_size", self.world_size, 1)?;
        if rank >= world_size {
            return Err(argument(format!(
                "rank {rank} is not in 0..world_size ({world_size})"
            )));
        }
        let worker = at_least("worker", self.worker, 0)?;
        let num_workers = at_least("num_workers", self.num_workers, 1)?;
        if worker >= num_workers {
            return Err(argument(format!(
                "worker {worker} is not in 0..num_workers ({num_workers})"
            )));
        }
        Ok(LoaderConfig {
            batch_size: at_least("batch_size", self.batch_size, 1)?,
            shuffle: self.shuffle,
            seed: self.seed,
            rank,
            world_size,
            last_batch,
            threads: at_least("threads", self.threads, 0)? as usize,
            prefetch: at_least("prefetch", self.prefetch, 1)? as usize,
            worker,
            num_workers,
            // NumPy gets writable views of a batch buffer of its own, or
            // with copy=False read-only views of the map where a batch lies
            // in one shard (see `Batch::into_dict`).
            zero_copy: !self.copy,
            shuffle_window: at_least("shuffle_window", self.shuffle_window, 0)?,
        })
    }
}

fn at_least(name: &str, value: i64, min: i64) -> PyResult<u64> {
    if value < min {
        return Err(argument(format!(
            "{name} must be at least {min}, got {value}"
        )));
    }
    Ok(value as u64)
}

fn parse_last_batch(s: &str) -> PyResult<LastBatch> {
    match s {
        "drop" => Ok(LastBatch::Drop),
        "partial" => Ok(LastBatch::Partial),
        "pad" => Ok(LastBatch::Pad),
        other => Err(argument(format!(
            "last_batch must be \"drop\", \"partial\" or \"pad\", got {other:?}"
        ))),
    }
}

pub(super) fn last_batch_name(l: LastBatch) -> &'static str {
    match l {
        LastBatch::Drop => "drop",
        LastBatch::Partial => "partial",
        LastBatch::Pad => "pad",
    }
}
