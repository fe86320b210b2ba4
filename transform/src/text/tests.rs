//! Tests of the tokenize step and the tokenizer.

use super::*;

/// One of the tokenizer files the `litellm` package ships (installed by
/// scripts/setup.sh --test): `deepseek_tokenizer.json` (DeepSeek-V3) or
/// `anthropic_tokenizer.json`. The Python tests compare ids on the same
/// files.
pub(super) fn litellm_tokenizer(name: &str) -> Vec<u8> {
    let python = match std::env::var("TESSERA_VENV") {
        Ok(v) if !v.is_empty() => format!("{v}/bin/python"),
        _ => concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/python").to_string(),
    };
    let out = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.util as u; print(list(u.find_spec('litellm').submodule_search_locations)[0])",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} (scripts/setup.sh --test makes it): {e}"));
    assert!(
        out.status.success(),
        "litellm is not installed: scripts/setup.sh --test installs it"
    );
    let path = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("litellm_core_utils/tokenizers")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn truncation_never_splits_a_character() {
    // "é" is 2 bytes, "€" 3, "😀" 4.
    let s = "aé€😀";
    assert_eq!(truncate_utf8(s, 100), s);
    assert_eq!(truncate_utf8(s, 10), s);
    assert_eq!(truncate_utf8(s, 9), "aé€");
    assert_eq!(truncate_utf8(s, 7), "aé€");
    assert_eq!(truncate_utf8(s, 6), "aé€");
    assert_eq!(truncate_utf8(s, 5), "aé");
    assert_eq!(truncate_utf8(s, 3), "aé");
    assert_eq!(truncate_utf8(s, 2), "a");
    assert_eq!(truncate_utf8(s, 1), "a");
    assert_eq!(truncate_utf8(s, 0), "");
}

/// A word-level tokenizer file with `vocab` and `added` tokens.
fn word_level(vocab: &str, added: &str) -> Vec<u8> {
    format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{added}],
        "normalizer":null,"pre_tokenizer":{{"type":"Whitespace"}},"post_processor":null,
        "decoder":null,"model":{{"type":"WordLevel","vocab":{{{vocab}}},"unk_token":"a"}}}}"#
    )
    .into_bytes()
}

#[test]
fn the_largest_id_is_the_largest_of_the_whole_vocabulary() {
    let added = r#"{"id":9,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}"#;
    for (vocab, added, want) in [
        // Dense ids: the last one.
        (r#""a":0,"b":1,"c":2"#, "", 2),
        // Sparse ids: found by searching, not taken from the count.
        (r#""a":0,"b":7,"c":2"#, "", 7),
        (r#""a":0,"b":1,"c":3"#, "", 3),
        // An added token: the library numbers it after the model's
        // count of ids (2 here), whatever the file says.
        (r#""a":0,"b":1"#, added, 2),
        (r#""a":0,"b":5"#, added, 5),
    ] {
        let bytes = word_level(vocab, added);
        let got = Tokenizer::from_bytes(&bytes, &Tokenize::default())
            .expect("tokenizer")
            .max_id();
        // The library's own answer, from a copy of its whole vocabulary.
        let lib = Inner::from_bytes(&bytes).expect("library");
        let all = lib.get_vocab(true).values().copied().max();
        assert_eq!(Some(got), all, "{vocab} + [{added}]");
        assert_eq!(got, want, "{vocab} + [{added}]");
    }
}

#[test]
fn the_lock_file_has_the_recorded_library_version() {
    crate::test_support::assert_locked(TOKENIZERS_LIBRARY);
}

/// The speed of a build rests on this: a byte-level file's text, special
/// tokens and long runs included, is encoded without the library's model
/// object, whose build takes longer than the rest of reading the file.
#[test]
fn encoding_byte_level_text_never_builds_the_librarys_model() {
    let bytes = litellm_tokenizer("deepseek_tokenizer.json");
    let step = Tokenize {
        eos: Some("<｜end▁of▁sentence｜>".into()),
        ..Default::default()
    };
    let tok = Tokenizer::from_bytes(&bytes, &step).expect("the tokenizer");
    let Backend::Library(inner) = &tok.backend else {
        panic!("a tokenizer.json has the library's backend");
    };
    let model_built = || match inner.get_model() {
        model::Model::Lazy(lazy) => lazy.is_built(),
        model::Model::Library(_) => true,
    };
    assert!(!model_built(), "built while reading the file");
    let long = " ".repeat(1000) + &"ab".repeat(500);
    for text in [
        include_str!("mod.rs"),
        "東京は日本の首都です。😀👩‍💻 café",
        &long,
        "before <｜end▁of▁sentence｜> after",
        "",
    ] {
        let ids = tok.encode(text).expect("ids");
        assert_eq!(ids.last(), tok.eos.as_ref(), "{:.40}", text);
    }
    assert!(!model_built(), "built while encoding");
    // Something that needs it builds it, and gets the same ids.
    use tokenizers::Model;
    let by_library: Vec<u32> = inner
        .get_model()
        .tokenize("Ġhello")
        .expect("the library's model")
        .iter()
        .map(|t| t.id)
        .collect();
    assert!(model_built());
    let mut want = by_library;
    want.extend(tok.eos);
    assert_eq!(tok.encode(" hello").expect("ids"), want);
}
