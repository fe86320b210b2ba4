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
pub mod docs;
pub mod stream;
pub mod windows;

pub use algo::{PackStats, Packer, Window};
// Chat templates live with the tokenizer in the transform crate, so the
// serving path renders conversations as the build does.
pub use tessera_transform::chat;

// The options are the spec's (`pack:`), defined with the spec module so the
// spec parser builds on its own (its fuzz target).
pub use crate::spec::{
    Algorithm, DEFAULT_GROUP_DOCS, LOSS_MASK, MAX_LENGTH, Overflow, POSITIONS, PackOptions,
    SEGMENT_IDS,
};
