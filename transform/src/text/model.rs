//! The tokenizer's model: the library's as the file describes it, or a
//! byte-level BPE model whose library form is built only when something
//! asks for it.
//!
//! Building the library's BPE model (a map from each id back to its token,
//! and the merges keyed by ids) is over half of loading a 128,000-token
//! file. When [`super::bpe::ByteMerges`] encodes every piece, the library
//! model is needed only for what the build rarely or never asks: a byte
//! without its own token, offsets for a chat template's mask, decoding. A
//! lookup of a token's id, the vocabulary's size and the vocabulary itself
//! come from the file's vocabulary as read, which is what the library's
//! model answers from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainer};
use tokenizers::{ModelWrapper, Token};

use super::vocab::TokenTable;

/// A tokenizer's model.
pub(super) enum Model {
    /// The library's model.
    Library(Box<ModelWrapper>),
    /// A byte-level BPE model, built on first need.
    Lazy(Box<LazyBpe>),
}

/// A BPE model's vocabulary, and the file it came from until the
/// library's model is built from it.
pub(super) struct LazyBpe {
    table: Arc<TokenTable>,
    file: Box<[u8]>,
    built: OnceLock<Result<BPE, String>>,
}

impl LazyBpe {
    /// A model whose vocabulary is `table`, read from `file` (the caller
    /// has checked that the library would build it: every merge's tokens
    /// are in the vocabulary).
    pub(super) fn new(table: Arc<TokenTable>, file: &[u8]) -> Self {
        LazyBpe {
            table,
            file: file.into(),
            built: OnceLock::new(),
        }
    }

    /// Whether the library's model has been built.
    #[cfg(test)]
    pub(super) fn is_built(&self) -> bool {
        self.built.get().is_some()
    }

    /// The library's model, built by the first caller from the file read
    /// again with strings.
    fn model(&self) -> tokenizers::Result<&BPE> {
        let built = self
            .built
            .get_or_init(|| super::load::eager_model(&self.file).map_err(|e| e.to_string()));
        built.as_ref().map_err(|e| e.clone().into())
    }
}

impl tokenizers::Model for Model {
    type Trainer = TrainerWrapper;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        match self {
            Model::Library(m) => m.tokenize(sequence),
            Model::Lazy(b) => b.model()?.tokenize(sequence),
        }
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            Model::Library(m) => m.token_to_id(token),
            Model::Lazy(b) => b.table.get(token),
        }
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        match self {
            Model::Library(m) => m.id_to_token(id),
            Model::Lazy(b) => b.model().ok()?.id_to_token(id),
        }
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        match self {
            Model::Library(m) => m.get_vocab(),
            Model::Lazy(b) => b.table.iter().map(|(t, id)| (t.to_string(), id)).collect(),
        }
    }

    fn get_vocab_size(&self) -> usize {
        match self {
            Model::Library(m) => m.get_vocab_size(),
            Model::Lazy(b) => b.table.len(),
        }
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        match self {
            Model::Library(m) => m.save(folder, prefix),
            Model::Lazy(b) => b.model()?.save(folder, prefix),
        }
    }

    fn get_trainer(&self) -> TrainerWrapper {
        match self {
            Model::Library(m) => m.get_trainer(),
            Model::Lazy(_) => TrainerWrapper::BpeTrainer(BpeTrainer::default()),
        }
    }
}

/// As the library writes the model (a lazy one is built first).
impl Serialize for Model {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Model::Library(m) => m.serialize(s),
            Model::Lazy(b) => b.model().map_err(serde::ser::Error::custom)?.serialize(s),
        }
    }
}

/// As the library reads a model (the library's parse of a whole file).
impl<'de> Deserialize<'de> for Model {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Model, D::Error> {
        ModelWrapper::deserialize(d).map(|m| Model::Library(Box::new(m)))
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Model::Library(m) => m.fmt(f),
            Model::Lazy(b) => f
                .debug_struct("LazyBpe")
                .field("vocab_size", &b.table.len())
                .field("built", &b.built.get().is_some())
                .finish(),
        }
    }
}
