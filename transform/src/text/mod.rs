//! Text fields: UTF-8 values cut at a character boundary (`text: n`), and
//! the tokenizer a `tokenize` step runs (a Hugging Face `tokenizer.json`
//! through the `tokenizers` crate).
//!
//! A tokenizer is part of a field's meaning: the file's blake3 and the
//! library's name and version ([`TOKENIZERS_LIBRARY`]) are in the field's
//! canonical JSON, so they enter the artifact hash; the file's path does not.
//! So does the blake3 of a chat template (conversations, [`crate::chat`]).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::chat::{ChatTemplate, Rendered};

mod bpe;
mod load;
mod model;
mod pieces;
mod vocab;

/// The tokenizer library and its exact version (pinned in Cargo.toml; a
/// test checks the lock file agrees). Token ids have changed between
/// releases, so an artifact records it and the serving path refuses another.
pub const TOKENIZERS_LIBRARY: &str = "tokenizers 0.23.2";

/// The longest prefix of `s` that takes at most `max` bytes and ends at a
/// character boundary: a character is never split.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a `tokenize` step says (spec: `transform: { tokenize: { ... } }`).
#[derive(Clone, Debug, Default)]
pub struct Tokenize {
    /// The tokenizer file as the spec names it (relative to the spec's
    /// folder). Not part of the meaning: the file's bytes are.
    pub file: String,
    /// blake3 of the file's bytes (hex), once the file has been read.
    pub blake3: Option<String>,
    /// The library the ids come from ([`TOKENIZERS_LIBRARY`] when built).
    pub library: String,
    /// A token put before every document.
    pub bos: Option<String>,
    /// A token put after every document.
    pub eos: Option<String>,
    /// `true`: text that spells a special token is that token; `false`
    /// (default): it is ordinary text (Python: `encode_special_tokens = True`).
    pub special_tokens: bool,
    /// Run the tokenizer file's own post-processor (its template of special
    /// tokens, e.g. `[CLS] ... [SEP]`); default `false`.
    pub add_special_tokens: bool,
    /// The parsed tokenizer, once [`Tokenize::load`] has run (a spec that
    /// is only hashed has the blake3 and not this).
    pub loaded: Option<Arc<Tokenizer>>,
    /// A tiktoken rank file's encoding (`cl100k_base`, ...): the file is a
    /// rank file, tokenized with that encoding's pattern and special tokens.
    pub encoding: Option<String>,
    /// Conversations: the chat template that renders a list of
    /// `{role, content}` turns into the text tokenized.
    pub chat_template: Option<ChatTemplateFile>,
    /// Conversations: `true` skips (and counts) a conversation whose loss
    /// mask is all zeros or all ones; `false` (default) stops the build
    /// with an error naming the row.
    pub skip_bad_masks: bool,
}

/// A `tokenize` step's chat template file.
#[derive(Clone, Debug, Default)]
pub struct ChatTemplateFile {
    /// The file as the spec names it (relative to the spec's folder): a
    /// Jinja file, or a Hugging Face `tokenizer_config.json`.
    pub file: String,
    /// blake3 of the file's bytes (hex), once read.
    pub blake3: Option<String>,
    /// The compiled template and the values of `bos_token` and `eos_token`.
    pub loaded: Option<Arc<Chat>>,
}

/// A compiled chat template with the special tokens it is rendered with.
#[derive(Debug)]
pub struct Chat {
    /// The template.
    pub template: ChatTemplate,
    /// `bos_token`: the step's `bos`, else the configuration's, else "".
    pub bos: String,
    /// `eos_token`: the step's `eos`, else the configuration's, else "".
    pub eos: String,
}

impl PartialEq for Tokenize {
    /// Two steps are equal when they mean the same: same file bytes, library
    /// and options (not the same path or the same loaded object).
    fn eq(&self, other: &Self) -> bool {
        self.blake3 == other.blake3
            && self.library == other.library
            && self.bos == other.bos
            && self.eos == other.eos
            && self.special_tokens == other.special_tokens
            && self.add_special_tokens == other.add_special_tokens
            && self.chat_template.as_ref().map(|c| &c.blake3)
                == other.chat_template.as_ref().map(|c| &c.blake3)
            && self.skip_bad_masks == other.skip_bad_masks
            && self.encoding == other.encoding
    }
}

impl Tokenize {
    /// Reads the tokenizer file at `path` (the step's `file` resolved),
    /// records its blake3 and loads it with the step's options. The error
    /// says what is wrong with the file or the options, naming the file.
    pub fn load(&mut self, path: &Path) -> Result<(), String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the tokenizer file {}: {e}", path.display()))?;
        self.load_bytes(&bytes, &path.display().to_string())
    }

    /// As [`Tokenize::load`], from the file's bytes; `name` names it in errors.
    pub fn load_bytes(&mut self, bytes: &[u8], name: &str) -> Result<(), String> {
        self.identify_bytes(bytes, name)?;
        let tokenizer = Tokenizer::from_bytes(bytes, self).map_err(|e| format!("{name}: {e}"))?;
        self.loaded = Some(Arc::new(tokenizer));
        Ok(())
    }

    /// Reads the tokenizer file at `path` and records what the step's
    /// meaning holds of it, its blake3 and the library, without parsing it
    /// (a large tokenizer file takes a few tenths of a second to parse, and
    /// a build whose artifact is cached needs only the hash).
    /// [`Tokenize::load`] parses it.
    pub fn identify(&mut self, path: &Path) -> Result<(), String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the tokenizer file {}: {e}", path.display()))?;
        self.identify_bytes(&bytes, &path.display().to_string())
    }

    /// Records the blake3 of `bytes` and the library; an error when the
    /// step already has another blake3 (an artifact built with another file).
    fn identify_bytes(&mut self, bytes: &[u8], name: &str) -> Result<(), String> {
        let hash = blake3::hash(bytes).to_hex().to_string();
        if let Some(expected) = &self.blake3
            && *expected != hash
        {
            return Err(format!(
                "the tokenizer file {name} has blake3 {hash}, the artifact was built with {expected}"
            ));
        }
        self.blake3 = Some(hash);
        self.library = if self.encoding.is_some() {
            crate::ranks::TIKTOKEN_LIBRARY
        } else {
            TOKENIZERS_LIBRARY
        }
        .to_string();
        Ok(())
    }

    /// Reads the step's chat template at `path` (its `file` resolved):
    /// records its blake3 and compiles it. `bos_token` and `eos_token` are
    /// the step's `bos` and `eos` when given (with a template they are the
    /// template's to place, not added around the text), else those of a
    /// `tokenizer_config.json`.
    pub fn load_chat(&mut self, path: &Path) -> Result<(), String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the chat template {}: {e}", path.display()))?;
        self.load_chat_bytes(&bytes, &path.display().to_string())
    }

    /// As [`Tokenize::load_chat`], from the file's bytes; `name` is the
    /// file's name (`.json`: a `tokenizer_config.json`).
    pub fn load_chat_bytes(&mut self, bytes: &[u8], name: &str) -> Result<(), String> {
        let hash = blake3::hash(bytes).to_hex().to_string();
        let bos = self.bos.clone();
        let eos = self.eos.clone();
        let Some(chat) = &mut self.chat_template else {
            return Err("the step has no chat template".into());
        };
        if let Some(expected) = &chat.blake3
            && *expected != hash
        {
            return Err(format!(
                "the chat template {name} has blake3 {hash}, the artifact was built with {expected}"
            ));
        }
        let (template, tokens) = ChatTemplate::from_bytes(name, bytes)?;
        chat.blake3 = Some(hash);
        chat.loaded = Some(Arc::new(Chat {
            template,
            bos: bos.or(tokens.bos).unwrap_or_default(),
            eos: eos.or(tokens.eos).unwrap_or_default(),
        }));
        Ok(())
    }
}

/// The largest id `inner` gives, without copying its vocabulary (which
/// takes tens of milliseconds for 128,000 tokens): `model_max` when the
/// parse saw the model's vocabulary; else a model whose `n` ids are `0..n`
/// has `n - 1` as its largest, and any other model is searched.
fn largest_id(inner: &Inner, model_max: Option<u32>) -> Option<u32> {
    use tokenizers::Model;
    let model = inner.get_model();
    let model_max = match model_max {
        Some(m) => Some(m),
        None => {
            let n = u32::try_from(model.get_vocab_size()).ok()?;
            let dense = (0..n).all(|id| model.id_to_token(id).is_some());
            if dense {
                n.checked_sub(1)
            } else {
                model.get_vocab().values().copied().max()
            }
        }
    };
    let added_max = inner.get_added_tokens_decoder().keys().copied().max();
    model_max.max(added_max)
}

/// Pieces remembered per thread before the cache starts over: about 30 MB
/// of short strings and their ids, more distinct pieces than most corpora
/// have.
const PIECES_MAX: usize = 1 << 18;

/// One thread's state for one tokenizer: each piece's ids, and the split
/// patterns' search caches.
#[derive(Default)]
struct Pieces {
    /// The tokenizer it is for.
    id: u64,
    ids: pieces::PieceCache,
    searchers: Option<crate::pretok::Searchers>,
}

thread_local! {
    static PIECES: std::cell::RefCell<Pieces> = std::cell::RefCell::new(Pieces::default());
}

/// The library's tokenizer with the faster pre-tokenizer of
/// [`crate::pretok`] (the same splits) where the file's allows it.
type Inner = tokenizers::TokenizerImpl<
    model::Model,
    tokenizers::NormalizerWrapper,
    crate::pretok::PreTok,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

/// Where the ids come from.
enum Backend {
    /// A Hugging Face `tokenizer.json`.
    Library(Box<Inner>),
    /// A tiktoken rank file.
    Ranks(Box<crate::ranks::RankTokenizer>),
}

/// A loaded tokenizer with a step's options applied: `encode` gives the ids
/// a field stores (before `length` cuts or pads them).
pub struct Tokenizer {
    backend: Backend,
    /// This tokenizer's key in the per-thread cache of pieces.
    id: u64,
    /// Whether [`Tokenizer::encode_pieces`] gives the library's ids: no
    /// post-processor ids asked for, and a model without randomness.
    pieces_cached: bool,
    /// When a text without these characters can skip the added-token pass.
    added_starts: Option<AddedStarts>,
    /// The model's merges, run here on the direct path's pieces.
    merges: Option<bpe::ByteMerges>,
    add_special_tokens: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    max_id: u32,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("max_id", &self.max_id)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Parses a `tokenizer.json` and applies `step`'s options. The file's
    /// own truncation and padding are turned off: a field's `length` cuts
    /// and pads.
    pub fn from_bytes(bytes: &[u8], step: &Tokenize) -> Result<Tokenizer, String> {
        if let Some(encoding) = &step.encoding {
            return Self::from_ranks(bytes, encoding, step);
        }
        let load::Parsed {
            mut inner,
            model_max,
            merges,
        } = load::parse(bytes)
            .map_err(|e| format!("not a tokenizer file that {TOKENIZERS_LIBRARY} reads: {e}"))?;
        inner
            .with_truncation(None)
            .map_err(|e| format!("cannot turn off the file's truncation: {e}"))?;
        inner.with_padding(None);
        inner.set_encode_special_tokens(!step.special_tokens);
        let lookup = |key: &str, token: &Option<String>| -> Result<Option<u32>, String> {
            match token {
                None => Ok(None),
                Some(t) => inner.token_to_id(t).map(Some).ok_or_else(|| {
                    format!("{key} token {t:?} is not in the tokenizer's vocabulary")
                }),
            }
        };
        let bos = lookup("bos", &step.bos)?;
        let eos = lookup("eos", &step.eos)?;
        // With a chat template, bos and eos are the template's to place.
        let (bos, eos) = if step.chat_template.is_some() {
            (None, None)
        } else {
            (bos, eos)
        };
        let max_id = largest_id(&inner, model_max).ok_or("the tokenizer's vocabulary is empty")?;
        // BPE dropout samples merges: the same piece can give other ids.
        let dropout = match inner.get_model() {
            model::Model::Library(m) => match m.as_ref() {
                tokenizers::ModelWrapper::BPE(bpe) => bpe.dropout.is_some_and(|d| d > 0.0),
                _ => false,
            },
            _ => false,
        };
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Tokenizer {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            pieces_cached: !dropout && !step.add_special_tokens,
            added_starts: AddedStarts::new(&inner, step.special_tokens),
            merges,
            backend: Backend::Library(Box::new(inner)),
            add_special_tokens: step.add_special_tokens,
            bos,
            eos,
            max_id,
        })
    }

    /// A tiktoken rank file for `encoding`; `bos` and `eos` name its
    /// special tokens.
    fn from_ranks(bytes: &[u8], encoding: &str, step: &Tokenize) -> Result<Tokenizer, String> {
        let ranks = crate::ranks::RankTokenizer::from_bytes(bytes, encoding, step.special_tokens)?;
        let lookup = |key: &str, token: &Option<String>| -> Result<Option<u32>, String> {
            match token {
                None => Ok(None),
                Some(t) => ranks.special_id(t).map(Some).ok_or_else(|| {
                    format!("{key} token {t:?} is not a special token of {encoding}")
                }),
            }
        };
        let (bos, eos) = (lookup("bos", &step.bos)?, lookup("eos", &step.eos)?);
        let (bos, eos) = if step.chat_template.is_some() {
            (None, None)
        } else {
            (bos, eos)
        };
        Ok(Tokenizer {
            id: 0,
            pieces_cached: false,
            added_starts: None,
            merges: None,
            add_special_tokens: false,
            bos,
            eos,
            max_id: ranks.max_id(),
            backend: Backend::Ranks(Box::new(ranks)),
        })
    }

    /// The largest id the tokenizer can give (added tokens included).
    pub fn max_id(&self) -> u32 {
        self.max_id
    }

    /// The ids of one document: bos, the text's tokens, eos.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        self.encode_into(text, &mut out)?;
        Ok(out)
    }

    /// Appends the ids of one document (bos, tokens, eos) to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        out.extend(self.bos);
        match &self.backend {
            Backend::Ranks(r) => out.extend(r.encode(text)?),
            Backend::Library(inner) if self.pieces_cached => {
                self.encode_pieces(inner, text, out)
                    .map_err(|e| format!("the tokenizer failed: {e}"))?
            }
            Backend::Library(inner) => {
                let enc = inner
                    .encode_fast(text, self.add_special_tokens)
                    .map_err(|e| format!("the tokenizer failed: {e}"))?;
                out.extend_from_slice(enc.get_ids());
            }
        }
        out.extend(self.eos);
        Ok(())
    }

    /// The library's encoding, step by step, with the model's ids for each
    /// pre-tokenized piece remembered per thread: the same ids as
    /// `encode_fast` (the model is a function of the piece's text, and with
    /// `add_special_tokens` off the post-processor adds no ids), without
    /// building an `Encoding` (a string per token) for every document.
    fn encode_pieces(
        &self,
        inner: &Inner,
        text: &str,
        out: &mut Vec<u32>,
    ) -> tokenizers::Result<()> {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizer};
        let direct = inner.get_pre_tokenizer().and_then(|p| p.direct());
        PIECES.with(|cell| -> tokenizers::Result<()> {
            let mut guard = cell.borrow_mut();
            if guard.id != self.id {
                *guard = Pieces {
                    id: self.id,
                    ..Pieces::default()
                };
            }
            if guard.ids.len() > PIECES_MAX {
                guard.ids.clear();
            }
            let Pieces { ids, searchers, .. } = &mut *guard;
            let mut scratch = String::new();
            // No added token can start in the text and the normalizer
            // changes nothing: the library's first pass would leave the
            // text as one split, so it is skipped.
            if let Some(patterns) = &direct
                && self
                    .added_starts
                    .as_ref()
                    .is_some_and(|s| !s.may_start_in(text))
            {
                let searchers =
                    searchers.get_or_insert_with(|| crate::pretok::Searchers::new(patterns));
                return direct_ids(
                    inner,
                    self.merges.as_ref(),
                    patterns,
                    searchers,
                    text,
                    ids,
                    &mut scratch,
                    out,
                );
            }
            let mut pre = inner
                .get_added_vocabulary()
                .extract_and_normalize(inner.get_normalizer(), text);
            if direct.is_none()
                && let Some(p) = inner.get_pre_tokenizer()
            {
                p.pre_tokenize(&mut pre)?;
            }
            for (piece, _, tokens) in pre.get_splits(OffsetReferential::Original, OffsetType::None)
            {
                if let Some(tokens) = tokens {
                    out.extend(tokens.iter().map(|t| t.id));
                } else if let Some(patterns) = &direct {
                    let searchers =
                        searchers.get_or_insert_with(|| crate::pretok::Searchers::new(patterns));
                    direct_ids(
                        inner,
                        self.merges.as_ref(),
                        patterns,
                        searchers,
                        piece,
                        ids,
                        &mut scratch,
                        out,
                    )?;
                } else if let Some(known) = ids.get(piece) {
                    out.extend_from_slice(known);
                } else {
                    let new = model_ids(inner, piece)?;
                    out.extend_from_slice(&new);
                    ids.insert(piece, &new);
                }
            }
            Ok(())
        })
    }
}

/// The model's ids for one piece.
fn model_ids(inner: &Inner, piece: &str) -> tokenizers::Result<Vec<u32>> {
    use tokenizers::Model;
    Ok(inner
        .get_model()
        .tokenize(piece)?
        .iter()
        .map(|t| t.id)
        .collect())
}

/// The ids of `text` through the direct pre-tokenizer path: the split
/// patterns and the byte mapping done here, each piece remembered by its
/// text before the mapping.
#[allow(clippy::too_many_arguments)]
fn direct_ids(
    inner: &Inner,
    merges: Option<&bpe::ByteMerges>,
    patterns: &[crate::pretok::FastPattern],
    searchers: &mut crate::pretok::Searchers,
    text: &str,
    cache: &mut pieces::PieceCache,
    mapped: &mut String,
    out: &mut Vec<u32>,
) -> tokenizers::Result<()> {
    let mut pieces = Vec::new();
    crate::pretok::split_pieces(patterns, searchers, text, &mut pieces);
    for p in &pieces {
        if let Some(ids) = cache.get(p) {
            out.extend_from_slice(ids);
            continue;
        }
        let start = out.len();
        if !merges.is_some_and(|m| merge_into(inner, m, p, mapped, out)) {
            crate::pretok::map_bytes(p, mapped);
            out.extend(model_ids(inner, mapped)?);
        }
        cache.insert(p, &out[start..]);
    }
    Ok(())
}

/// Appends the ids of a raw piece by [`bpe::ByteMerges`] to `out`, or
/// returns `false` and appends nothing when the piece is the library's to
/// encode.
fn merge_into(
    inner: &Inner,
    merges: &bpe::ByteMerges,
    piece: &str,
    mapped: &mut String,
    out: &mut Vec<u32>,
) -> bool {
    use tokenizers::Model;
    if merges.ignore_merges {
        crate::pretok::map_bytes(piece, mapped);
        if let Some(id) = inner.get_model().token_to_id(mapped) {
            out.push(id);
            return true;
        }
    }
    merges.encode(piece.as_bytes(), out)
}

/// The first characters of the added tokens that can match (the special
/// ones only when special tokens are on), when the normalizer changes
/// nothing: a text with none of them holds no added token.
struct AddedStarts {
    ascii: [bool; 128],
    other: Vec<char>,
}

impl AddedStarts {
    fn new(inner: &Inner, special_tokens: bool) -> Option<AddedStarts> {
        let plain = match inner.get_normalizer() {
            None => true,
            Some(tokenizers::NormalizerWrapper::Sequence(s)) => s.as_ref().is_empty(),
            Some(_) => false,
        };
        if !plain {
            return None;
        }
        let mut starts = AddedStarts {
            ascii: [false; 128],
            other: Vec::new(),
        };
        for t in inner
            .get_added_vocabulary()
            .get_added_tokens_decoder()
            .values()
        {
            if t.special && !special_tokens {
                continue;
            }
            match t.content.chars().next() {
                Some(c) if c.is_ascii() => starts.ascii[c as usize] = true,
                Some(c) => starts.other.push(c),
                None => {}
            }
        }
        Some(starts)
    }

    fn may_start_in(&self, text: &str) -> bool {
        if self.other.is_empty() {
            text.bytes().any(|b| b < 128 && self.ascii[usize::from(b)])
        } else {
            text.chars().any(|c| {
                if c.is_ascii() {
                    self.ascii[c as usize]
                } else {
                    self.other.contains(&c)
                }
            })
        }
    }
}

impl Tokenizer {
    /// Appends the ids of a rendered conversation to `ids` and a train bit
    /// per token to `train`: 1 for a token whose text overlaps an assistant
    /// range (as `transformers`' assistant mask marks every token holding a
    /// character of the reply), 0 otherwise.
    pub fn encode_chat(
        &self,
        rendered: &Rendered,
        ids: &mut Vec<u32>,
        train: &mut Vec<u8>,
    ) -> Result<(), String> {
        let inner = match &self.backend {
            Backend::Library(inner) => inner,
            Backend::Ranks(r) => {
                // A rank file's tokens are byte strings that concatenate
                // to the text: offsets are their running lengths.
                let enc = r.encode(&rendered.text)?;
                let mut start = 0;
                for len in r.token_lengths(&enc)? {
                    train.push(u8::from(overlaps(&rendered.assistant, start, start + len)));
                    start += len;
                }
                ids.extend_from_slice(&enc);
                return Ok(());
            }
        };
        let enc = inner
            .encode(rendered.text.as_str(), self.add_special_tokens)
            .map_err(|e| format!("the tokenizer failed: {e}"))?;
        ids.extend_from_slice(enc.get_ids());
        for &(start, end) in enc.get_offsets() {
            train.push(u8::from(overlaps(&rendered.assistant, start, end)));
        }
        Ok(())
    }
}

/// Whether `[start, end)` (a token's bytes; empty for a token the text
/// does not spell, such as one a post-processor adds) overlaps one of
/// `ranges`. A conversation has few turns, so a scan is enough.
fn overlaps(ranges: &[Range<usize>], start: usize, end: usize) -> bool {
    ranges.iter().any(|r| {
        if end > start {
            r.start < end && start < r.end
        } else {
            r.contains(&start)
        }
    })
}

#[cfg(test)]
mod tests;
