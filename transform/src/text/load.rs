//! Parsing a `tokenizer.json` into the library's tokenizer, faster than the
//! library's own parse and with the same result.
//!
//! The library reads a file's `model` through a `serde_json::Value` (the
//! model's `type` is a tag that may come anywhere in the object), so a BPE
//! vocabulary of 128,000 tokens is first built as a tree of JSON values,
//! then read again into the model, and its merges are buffered once more to
//! learn which of two forms they take. For DeepSeek-V3's file that is about
//! 0.2 s of a 0.25 s parse. Here a BPE model is read in one pass straight
//! into the library's [`BpeBuilder`], and the rest of the file (normalizer,
//! pre-tokenizer, post-processor, decoder, added tokens) through the
//! library's own types, assembled as its deserializer assembles them.
//!
//! Anything this path does not read exactly as the library would (another
//! model, a model without its `type`, merges of mixed forms, any error) is
//! handed to the library's own parse, so a file's errors are the library's.

use std::fmt;

use serde::Deserialize;
use serde::Deserializer as _;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tokenizers::models::bpe::{BPE, BpeBuilder, Vocab};
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PaddingParams,
    PostProcessorWrapper, TokenizerBuilder, TruncationParams,
};

use super::Inner;
use super::bpe::ByteMerges;
use super::model::{LazyBpe, Model};
use super::vocab::{HashedMergesVisitor, TableVisitor, TokenTable};
use crate::pretok::PreTok;

/// A parsed file, and its model's largest id when the parse saw the
/// vocabulary go by (asking the model afterwards copies every token).
pub(super) struct Parsed {
    pub(super) inner: Inner,
    pub(super) model_max: Option<u32>,
    /// A byte-level BPE model's merges for [`super::bpe`], when the parse
    /// read the model and it has no prefix, suffix or dropout.
    pub(super) merges: Option<ByteMerges>,
}

/// Parses `bytes` (a `tokenizer.json`) as the library does. The library
/// panics on some malformed files (a `continuing_subword_prefix` longer
/// than a merge's second part slices out of bounds); that is an error here.
pub(super) fn parse(bytes: &[u8]) -> tokenizers::Result<Parsed> {
    let run = || match fast(bytes) {
        Ok(parsed) => Ok(parsed),
        Err(Refused::Invalid(why)) => Err(why.into()),
        Err(Refused::AskLibrary(_)) => Inner::from_bytes(bytes).map(|inner| Parsed {
            inner,
            model_max: None,
            merges: None,
        }),
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        Err(format!("the tokenizers library failed on this file ({why})").into())
    })
}

/// Why the one-pass parse gave no tokenizer.
#[derive(Debug)]
pub(super) enum Refused {
    /// Ask the library (its reading, or its error, is the answer).
    AskLibrary(String),
    /// A file the library would not refuse cleanly.
    Invalid(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Refused::AskLibrary(why) => write!(f, "left to the library: {why}"),
            Refused::Invalid(why) => f.write_str(why),
        }
    }
}

/// The one-pass parse. A byte-level BPE model is read without a string
/// per token ([`super::vocab`]) and its library model is left to be built
/// when needed; any other BPE model is read again with strings, for the
/// library's model at once.
pub(super) fn fast(bytes: &[u8]) -> Result<Parsed, Refused> {
    let ask = |e: &dyn fmt::Display| Refused::AskLibrary(e.to_string());
    let (builder, model, tokens) = read(bytes, true)?;
    let model = model.ok_or_else(|| ask(&"no model"))?;
    if let Some(lazy) = model.lazy() {
        let Lazy {
            table,
            hashes,
            ignore_merges,
        } = lazy;
        let model_max = table.max_id();
        let table = std::sync::Arc::new(table);
        // The merges are resolved on a second thread while the tokenizer
        // is assembled here (the split patterns compiled, the added
        // tokens indexed).
        let (inner, ours) = std::thread::scope(|s| {
            let resolve = || ByteMerges::new(&table, &hashes, ignore_merges);
            let worker = std::thread::Builder::new().spawn_scoped(s, resolve).ok();
            let model = Model::Lazy(Box::new(LazyBpe::new(table.clone(), bytes)));
            let inner = assemble(builder, model, tokens);
            let ours = match worker {
                Some(w) => w.join().ok().flatten(),
                None => resolve(),
            };
            (inner, ours)
        });
        // Without our merges (a merge names a token that is not in the
        // vocabulary) the library's model is built now, and reports it.
        if let Some(ours) = ours {
            return Ok(Parsed {
                inner: inner?,
                model_max,
                merges: Some(ours),
            });
        }
    }
    let (builder, model, tokens) = read(bytes, false)?;
    let model = model.ok_or_else(|| ask(&"no model"))?;
    let model_max = match &model.vocab {
        VocabRead::Strings(v) => v.values().copied().max(),
        VocabRead::Table(t) => t.max_id(),
    };
    let bpe = model.eager()?;
    let model = Model::Library(Box::new(ModelWrapper::BPE(bpe)));
    Ok(Parsed {
        inner: assemble(builder, model, tokens)?,
        model_max,
        merges: None,
    })
}

/// The tokenizer of `builder` with `model`, and the added tokens added as
/// the library adds them: once the model is there (an added token that is
/// in the vocabulary keeps its id there).
fn assemble(builder: Builder, model: Model, tokens: Vec<AddedToken>) -> Result<Inner, Refused> {
    let ask = |e: &dyn fmt::Display| Refused::AskLibrary(e.to_string());
    let mut inner = builder.with_model(model).build().map_err(|e| ask(&e))?;
    inner.add_tokens(tokens).map_err(|e| ask(&e))?;
    Ok(inner)
}

/// The library's BPE model of a file [`fast`] read as a lazy one.
pub(super) fn eager_model(bytes: &[u8]) -> Result<BPE, Refused> {
    let (_, model, _) = read(bytes, false)?;
    model
        .ok_or_else(|| Refused::AskLibrary("no model".into()))?
        .eager()
}

/// Reads the file: the builder with everything but the model, the model's
/// parts (with `hashed`, its vocabulary and merges as [`super::vocab`]
/// reads them), and the added tokens.
fn read(bytes: &[u8], hashed: bool) -> Result<FileParts, Refused> {
    let ask = |e: &dyn fmt::Display| Refused::AskLibrary(e.to_string());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parts = (&mut de)
        .deserialize_map(FileVisitor { hashed })
        .map_err(|e| ask(&e))?;
    de.end().map_err(|e| ask(&e))?;
    Ok(parts)
}

type FileParts = (Builder, Option<BpeParts>, Vec<AddedToken>);

type Builder =
    TokenizerBuilder<Model, NormalizerWrapper, PreTok, PostProcessorWrapper, DecoderWrapper>;

/// An entry of `added_tokens`. The id must be there, as the library
/// requires, but it is only the file's claim, which the library checks only
/// to warn: the vocabulary decides.
#[derive(Deserialize)]
struct AddedWithId {
    #[allow(dead_code)]
    id: u32,
    #[serde(flatten)]
    token: AddedToken,
}

struct FileVisitor {
    hashed: bool,
}

impl<'de> Visitor<'de> for FileVisitor {
    type Value = FileParts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tokenizer.json object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut builder = Builder::new();
        let mut model = None;
        let mut tokens: Vec<AddedWithId> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "version" => {
                    let v: String = map.next_value()?;
                    if v != "1.0" {
                        return Err(A::Error::custom(format!("version {v}")));
                    }
                }
                "truncation" => {
                    builder = builder.with_truncation(map.next_value::<Option<TruncationParams>>()?)
                }
                "padding" => {
                    builder = builder.with_padding(map.next_value::<Option<PaddingParams>>()?)
                }
                "added_tokens" => tokens = map.next_value()?,
                "normalizer" => builder = builder.with_normalizer(map.next_value()?),
                "pre_tokenizer" => builder = builder.with_pre_tokenizer(map.next_value()?),
                "model" => {
                    model = Some(map.next_value_seed(BpeVisitor {
                        hashed: self.hashed,
                    })?)
                }
                "decoder" => builder = builder.with_decoder(map.next_value()?),
                "post_processor" => builder = builder.with_post_processor(map.next_value()?),
                // The library reads no value for a key it does not know,
                // so the file is an error there.
                other => return Err(A::Error::custom(format!("the key {other}"))),
            }
        }
        Ok((
            builder,
            model,
            tokens.into_iter().map(|t| t.token).collect(),
        ))
    }
}

/// A `model` object of `"type": "BPE"` as read, with the library's meaning
/// of each key: the options in the library's builder, the vocabulary and
/// merges beside it until [`BpeParts::lazy`] or [`BpeParts::eager`].
struct BpeParts {
    builder: BpeBuilder,
    vocab: VocabRead,
    merges: MergesRead,
    prefix: Option<String>,
    /// Whether the model has an `end_of_word_suffix`, dropout, or
    /// `ignore_merges`.
    suffix: bool,
    dropout: bool,
    ignore_merges: bool,
}

/// What [`BpeParts::lazy`] keeps.
struct Lazy {
    table: TokenTable,
    hashes: Vec<[u64; 3]>,
    ignore_merges: bool,
}

/// A vocabulary as the library reads it, or as a [`TokenTable`].
enum VocabRead {
    Strings(Vocab),
    Table(TokenTable),
}

/// Merges as the library reads them, or hashed.
enum MergesRead {
    Strings(Vec<(String, String)>),
    Hashes(Vec<[u64; 3]>),
}

impl BpeParts {
    /// A model read hashed, whose library model can wait: a byte-level
    /// model (no prefix, suffix or dropout) with a vocabulary the table
    /// answers exactly.
    fn lazy(self) -> Option<Lazy> {
        let (VocabRead::Table(table), MergesRead::Hashes(hashes)) = (self.vocab, self.merges)
        else {
            return None;
        };
        if self.prefix.is_some() || self.suffix || self.dropout || table.clash {
            return None;
        }
        Some(Lazy {
            table,
            hashes,
            ignore_merges: self.ignore_merges,
        })
    }

    /// The library's model, from parts read with strings. The library cuts
    /// the prefix off each merge's second part without looking (a part
    /// without it panics or splits a character there): such a merge is
    /// refused first, naming it.
    fn eager(self) -> Result<BPE, Refused> {
        let (VocabRead::Strings(vocab), MergesRead::Strings(merges)) = (self.vocab, self.merges)
        else {
            return Err(Refused::AskLibrary("a model read hashed".into()));
        };
        if let Some(prefix) = &self.prefix
            && let Some((a, b)) = merges.iter().find(|(_, b)| !b.starts_with(prefix.as_str()))
        {
            return Err(Refused::Invalid(format!(
                "the merge \"{a} {b}\" does not have the model's continuing_subword_prefix {prefix:?} on its second part"
            )));
        }
        // The tokenizer's pieces are remembered by the caller (per thread,
        // before the model is asked), so the model's own cache of words
        // would only be filled, never hit: it is off.
        self.builder
            .vocab_and_merges(vocab, merges)
            .cache_capacity(0)
            .build()
            .map_err(|e| Refused::AskLibrary(e.to_string()))
    }
}

struct BpeVisitor {
    hashed: bool,
}

impl<'de> DeserializeSeed<'de> for BpeVisitor {
    type Value = BpeParts;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<BpeParts, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BpeVisitor {
    type Value = BpeParts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a BPE model object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BpeParts, A::Error> {
        let mut builder = BpeBuilder::new();
        let mut typed = false;
        let mut vocab: Option<VocabRead> = None;
        let mut merges: Option<MergesRead> = None;
        let mut prefix: Option<String> = None;
        let (mut suffix, mut dropout, mut ignore_merges) = (false, false, false);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "type" => {
                    let t: String = map.next_value()?;
                    if t != "BPE" {
                        return Err(A::Error::custom(format!("a {t} model")));
                    }
                    typed = true;
                }
                "dropout" => {
                    if let Some(p) = map.next_value::<Option<f32>>()? {
                        dropout = p != 0.0;
                        builder = builder.dropout(p);
                    }
                }
                "unk_token" => {
                    if let Some(s) = map.next_value::<Option<String>>()? {
                        builder = builder.unk_token(s);
                    }
                }
                "continuing_subword_prefix" => {
                    prefix = map.next_value::<Option<String>>()?;
                    if let Some(s) = &prefix {
                        builder = builder.continuing_subword_prefix(s.clone());
                    }
                }
                "end_of_word_suffix" => {
                    if let Some(s) = map.next_value::<Option<String>>()? {
                        suffix = true;
                        builder = builder.end_of_word_suffix(s);
                    }
                }
                "fuse_unk" => {
                    if let Some(b) = map.next_value::<Option<bool>>()? {
                        builder = builder.fuse_unk(b);
                    }
                }
                "byte_fallback" => {
                    if let Some(b) = map.next_value::<Option<bool>>()? {
                        builder = builder.byte_fallback(b);
                    }
                }
                "ignore_merges" => {
                    if let Some(b) = map.next_value::<Option<bool>>()? {
                        ignore_merges = b;
                        builder = builder.ignore_merges(b);
                    }
                }
                "vocab" if self.hashed => {
                    vocab = Some(VocabRead::Table(map.next_value_seed(Seed(TableVisitor))?))
                }
                "vocab" => vocab = Some(VocabRead::Strings(map.next_value()?)),
                "merges" if self.hashed => {
                    merges = Some(MergesRead::Hashes(
                        map.next_value_seed(Seed(HashedMergesVisitor))?,
                    ))
                }
                "merges" => merges = Some(MergesRead::Strings(map.next_value::<Merges>()?.0)),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // Without its `type` the library tries each kind of model in turn.
        if !typed {
            return Err(A::Error::custom("a model without its type"));
        }
        let (Some(vocab), Some(merges)) = (vocab, merges) else {
            return Err(A::Error::custom("missing vocab or merges"));
        };
        Ok(BpeParts {
            builder,
            vocab,
            merges,
            prefix,
            suffix,
            dropout,
            ignore_merges,
        })
    }
}

/// A visitor as a seed (for a value read in place of a type's own).
struct Seed<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Seed<V> {
    type Value = V::Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_any(self.0)
    }
}

/// The merges, in either of the library's forms: all `"a b"` strings (the
/// legacy form, `#version` lines left out) or all `["a", "b"]` pairs.
struct Merges(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Merges {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Merges, D::Error> {
        d.deserialize_seq(MergesVisitor)
    }
}

struct MergesVisitor;

impl<'de> Visitor<'de> for MergesVisitor {
    type Value = Merges;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of merges")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Merges, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut legacy = None;
        while let Some(item) = seq.next_element::<Merge>()? {
            let is_legacy = matches!(item, Merge::Legacy(_));
            if *legacy.get_or_insert(is_legacy) != is_legacy {
                return Err(A::Error::custom("merges of both forms"));
            }
            match item {
                Merge::Pair(a, b) => out.push((a, b)),
                Merge::Legacy(None) => {}
                Merge::Legacy(Some(pair)) => out.push(pair),
            }
        }
        Ok(Merges(out))
    }
}

/// One merge: a pair, or a legacy line (`None` for a `#version` line).
enum Merge {
    Pair(String, String),
    Legacy(Option<(String, String)>),
}

impl<'de> Deserialize<'de> for Merge {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Merge, D::Error> {
        d.deserialize_any(MergeVisitor)
    }
}

struct MergeVisitor;

impl<'de> Visitor<'de> for MergeVisitor {
    type Value = Merge;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a merge")
    }

    fn visit_str<E: serde::de::Error>(self, line: &str) -> Result<Merge, E> {
        if line.starts_with("#version") {
            return Ok(Merge::Legacy(None));
        }
        let mut parts = line.split(' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), None) => Ok(Merge::Legacy(Some((a.to_string(), b.to_string())))),
            _ => Err(E::custom("a merge line without exactly two parts")),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Merge, A::Error> {
        let a: String = seq
            .next_element()?
            .ok_or_else(|| A::Error::custom("a merge pair without parts"))?;
        let b: String = seq
            .next_element()?
            .ok_or_else(|| A::Error::custom("a merge pair of one part"))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(A::Error::custom("a merge of more than two parts"));
        }
        Ok(Merge::Pair(a, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the two parses must agree on, as JSON: the model (its vocab,
    /// merges and options), the normalizer, pre-tokenizer kind,
    /// post-processor, decoder, truncation, padding and added tokens.
    fn summary(t: &Inner) -> serde_json::Value {
        let mut added: Vec<_> = t.get_added_tokens_decoder().into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        serde_json::json!({
            "model": t.get_model(),
            "normalizer": t.get_normalizer(),
            "post_processor": t.get_post_processor(),
            "decoder": t.get_decoder(),
            "pre_tokenizer": t.get_pre_tokenizer().map(|p| format!("{p:?}")),
            "truncation": t.get_truncation().map(|p| format!("{p:?}")),
            "padding": t.get_padding().map(|p| format!("{p:?}")),
            "added": added,
        })
    }

    fn assert_same(bytes: &[u8], texts: &[&str], what: &str) {
        let lib = Inner::from_bytes(bytes).unwrap_or_else(|e| {
            panic!(
                "{what}: the library refuses it: {e}\n{}",
                String::from_utf8_lossy(bytes)
            )
        });
        let parsed = fast(bytes).unwrap_or_else(|e| panic!("{what}: the fast parse refused: {e}"));
        let all = lib.get_vocab(false).values().copied().max();
        assert_eq!(parsed.model_max, all, "{what}: the model's largest id");
        let fast = parsed.inner;
        // A lazy model answers from the vocabulary as read, before the
        // library's model is built (by `summary`).
        for with_added in [false, true] {
            assert_eq!(
                fast.get_vocab(with_added),
                lib.get_vocab(with_added),
                "{what}: the vocabulary"
            );
            assert_eq!(
                fast.get_vocab_size(with_added),
                lib.get_vocab_size(with_added)
            );
        }
        for (token, id) in lib.get_vocab(true) {
            assert_eq!(fast.token_to_id(&token), Some(id), "{what}: {token:?}");
        }
        assert_eq!(fast.token_to_id("<no such token>"), None);
        assert_eq!(summary(&fast), summary(&lib), "{what}");
        for text in texts {
            let a = fast
                .encode_fast(*text, false)
                .expect("fast")
                .get_ids()
                .to_vec();
            let b = lib
                .encode_fast(*text, false)
                .expect("library")
                .get_ids()
                .to_vec();
            assert_eq!(a, b, "{what}: {text:?}");
        }
    }

    /// A byte-level BPE file: `model` holds the model's keys after its
    /// vocabulary and merges.
    fn bpe(merges: &str, model: &str, added: &str, rest: &str) -> Vec<u8> {
        format!(
            r#"{{"version":"1.0","added_tokens":[{added}],{rest}
            "pre_tokenizer":{{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}},
            "model":{{"vocab":{{"a":0,"b":1,"c":2,"ab":3,"abc":4,"Ġ":5,"Ġa":6,"<unk>":7}},
            "merges":[{merges}]{model}}}}}"#
        )
        .into_bytes()
    }

    const TEXTS: &[&str] = &["abc ab a", "", "c b a abc<x>", "zz ab"];

    #[test]
    fn the_fast_parse_builds_the_librarys_tokenizer() {
        let added = r#"{"id":8,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
            {"id":3,"content":"ab","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false}"#;
        let legacy = r##""#version: 0.2","a b","ab c","Ġ a""##;
        let pairs = r#"["a","b"],["ab","c"],["Ġ","a"]"#;
        let typed = r#","type":"BPE""#;
        let options = r#","type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,
            "end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":false,"ignore_merges":true,"extra":[1,{"x":2}]"#;
        let rest = r#""truncation":{"direction":"Right","max_length":8,"strategy":"LongestFirst","stride":0},
            "padding":null,"normalizer":{"type":"Lowercase"},
            "post_processor":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},
            "decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},"#;
        for (merges, model, added, rest, what) in [
            (legacy, typed, "", "", "legacy merges with a #version line"),
            (pairs, typed, "", "", "merges as pairs"),
            (pairs, options, added, rest, "every option and part"),
            ("", typed, "", "", "no merges"),
        ] {
            assert_same(&bpe(merges, model, added, rest), TEXTS, what);
        }
        let affixes = br###"{"model":{"type":"BPE","unk_token":"<unk>","continuing_subword_prefix":"##",
            "end_of_word_suffix":"</w>","vocab":{"<unk>":0,"a":1,"##b":2,"ab":3,"b</w>":4,"##b</w>":5,"ab</w>":6},
            "merges":["a ##b","a ##b</w>"]},"pre_tokenizer":{"type":"Whitespace"}}"###;
        assert_same(affixes, &["ab ab b a"], "prefix and suffix");
        // The `type` key first, as most files have it.
        let first = br#"{"version":"1.0","model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"added_tokens":[]}"#;
        assert_same(first, &["abba"], "type first");
    }

    #[test]
    fn files_the_fast_parse_does_not_read_go_to_the_library() {
        let word_piece = br###"{"version":"1.0","model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":{"[UNK]":0,"a":1}}}"###;
        let untyped = bpe(r#""a b""#, "", "", "");
        for (bytes, what) in [
            (&word_piece[..], "a WordPiece model"),
            (&untyped[..], "a model without its type"),
        ] {
            assert!(fast(bytes).is_err(), "{what}");
            let lib = Inner::from_bytes(bytes).expect("the library parses it");
            let got = parse(bytes).expect("parse hands it to the library");
            assert_eq!(got.model_max, None, "{what}");
            assert_eq!(summary(&got.inner), summary(&lib), "{what}");
        }
        // Errors are the library's own.
        for (bytes, what) in [
            (
                bpe(r#""a b",["ab","c"]"#, r#","type":"BPE""#, "", ""),
                "merges of both forms",
            ),
            (
                bpe(r#""a b c""#, r#","type":"BPE""#, "", ""),
                "a merge of three parts",
            ),
            (
                bpe(r#""a zz""#, r#","type":"BPE""#, "", ""),
                "a merge out of the vocabulary",
            ),
            (
                br#"{"version":"2.0","model":{"type":"BPE","vocab":{},"merges":[]}}"#.to_vec(),
                "another version",
            ),
            (br#"{"version":"1.0"}"#.to_vec(), "no model"),
            (
                br#"{"version":"1.0","notes":"x","model":{"type":"BPE","vocab":{},"merges":[]}}"#
                    .to_vec(),
                "a key the library does not know",
            ),
            (b"{\"version\":\"1.0\",".to_vec(), "cut short"),
        ] {
            let lib = Inner::from_bytes(&bytes).err().map(|e| e.to_string());
            let got = parse(&bytes).err().map(|e| e.to_string());
            assert!(lib.is_some(), "{what}: the library reads it");
            assert_eq!(got, lib, "{what}");
        }
        // Files the library panics on are errors: a merge without the
        // prefix (checked before the library sees it), and a panic inside
        // the library (a file without the model's type takes its path).
        let bytes = br###"{"model":{"type":"BPE","continuing_subword_prefix":"##","vocab":{"a":0,"b":1},"merges":["a b"]}}"###;
        let err = parse(bytes)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(
                r###"the merge "a b" does not have the model's continuing_subword_prefix "##""###
            ),
            "{err}"
        );
        let bytes = br###"{"model":{"continuing_subword_prefix":"##","vocab":{"a":0,"b":1},"merges":["a b"]}}"###;
        let err = parse(bytes)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("the tokenizers library failed on this file ("),
            "{err}"
        );
    }

    /// The real files the Python tests compare ids on (the `litellm`
    /// package's DeepSeek-V3 and Claude tokenizers, installed by
    /// scripts/setup.sh --test): the same tokenizer from both parses.
    #[test]
    fn real_tokenizer_files_parse_as_the_library_parses_them() {
        let texts = [
            "Shall I compare thee to a summer's day?",
            "fn main() {\n    println!(\"{}\", 1);\n}\n\n\n   ",
            "東京は日本の首都です。😀👩‍💻",
            "<｜end▁of▁sentence｜><EOT> <|endoftext|>",
        ];
        for name in ["deepseek_tokenizer.json", "anthropic_tokenizer.json"] {
            assert_same(&super::super::tests::litellm_tokenizer(name), &texts, name);
        }
    }
}
