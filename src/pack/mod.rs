//! Packing at build time (the spec's `pack:` section): the documents of one
//! token field, in the build's record order, become fixed windows of token
//! ids with the fields attention needs (segment ids, positions, a loss mask).
//!
//! The build's tasks write each chunk's documents to a document stream per
//! split ([`stream`]); the commit reads the streams of a split in chunk
//! order, which is the order the records would have had unpacked, packs them
//! ([`algo`]) and writes the windows as ordinary fixed-stride records
//! ([`windows`]). Windows are thus a function of the document sequence
//! alone: the same for any chunking, thread count or executor.

pub mod algo;
pub mod chat;
pub mod docs;
pub mod stream;
pub mod windows;

pub use algo::{PackStats, Packer, Window};

/// How documents are laid into windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Concatenate the documents and cut the stream every `length` tokens.
    Concat,
    /// Best-fit decreasing within groups of `group_docs` consecutive
    /// documents: documents stay whole unless longer than a window.
    BestFit,
}

/// What happens to a document longer than a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Cut into window-sized pieces.
    Split,
    /// Keep the first window's worth of tokens.
    Truncate,
    /// Leave the document out.
    Drop,
}

/// The `pack:` section.
#[derive(Clone, Debug, PartialEq)]
pub struct PackOptions {
    /// The field whose documents are packed (a token field).
    pub field: String,
    /// Input tokens per window.
    pub length: u32,
    /// How documents are laid into windows.
    pub algorithm: Algorithm,
    /// Store `length + 1` tokens per window, so that inputs are
    /// `tokens[:-1]` and next-token labels `tokens[1:]`.
    pub labels: bool,
    /// What happens to a document longer than a window.
    pub overflow: Overflow,
    /// `best_fit`: documents per packing group.
    pub group_docs: u64,
    /// The token id of padding slots.
    pub pad_id: u32,
}

/// Default documents per `best_fit` group.
pub const DEFAULT_GROUP_DOCS: u64 = 10_000;
/// The largest window.
pub const MAX_LENGTH: u32 = 1 << 20;

/// The names of the fields a packed set stores besides the token field.
pub const SEGMENT_IDS: &str = "segment_ids";
/// Positions within each document piece.
pub const POSITIONS: &str = "positions";
/// 1 where a position's loss counts.
pub const LOSS_MASK: &str = "loss_mask";

impl PackOptions {
    /// Token slots per window: `length`, plus one with labels.
    pub fn capacity(&self) -> u32 {
        self.length + u32::from(self.labels)
    }

    /// The canonical JSON of the section (docs/SPEC.md, "Canonical form").
    pub fn canonical_json(&self) -> serde_json::Value {
        serde_json::json!({
            "algorithm": self.algorithm.name(),
            "field": self.field,
            "group_docs": self.group_docs,
            "labels": self.labels,
            "length": self.length,
            "overflow": self.overflow.name(),
            "pad_id": self.pad_id,
        })
    }
}

impl Algorithm {
    /// The spec's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Concat => "concat",
            Algorithm::BestFit => "best_fit",
        }
    }
}

impl Overflow {
    /// The spec's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Overflow::Split => "split",
            Overflow::Truncate => "truncate",
            Overflow::Drop => "drop",
        }
    }
}
