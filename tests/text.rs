//! Text fields end to end: `text: N` cut at a character boundary and
//! padded, `length_of` counts, `tokenize` with a small word-level tokenizer
//! whose ids the test computes itself, the errors, and what enters the
//! artifact hash (the tokenizer file's bytes, not its path). The ids of real
//! tokenizers are compared with the Python `tokenizers` package in
//! python/tests/test_tokenize.py.

use serde_json::json;
use std::path::PathBuf;
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera::spec::Spec;
use tessera_reader::Dataset;

/// Words of the test tokenizer's vocabulary, ids from 3 (0 is `<unk>`, 1 is
/// `<s>`, 2 is `</s>`).
const WORDS: &[&str] = &["the", "cat", "sat", "on", "mat", "é", "€", "😀", "x"];

/// A word-level tokenizer: whitespace split, each word its vocabulary id or
/// 0; `<s>` and `</s>` are special added tokens. `extra` words are appended
/// to the vocabulary (to make it large, or to change the file's bytes).
fn tokenizer_json(extra: usize) -> String {
    let mut vocab = serde_json::Map::new();
    for (i, w) in ["<unk>", "<s>", "</s>"].iter().chain(WORDS).enumerate() {
        vocab.insert(w.to_string(), json!(i));
    }
    for i in 0..extra {
        vocab.insert(format!("w{i}"), json!(3 + WORDS.len() + i));
    }
    let added = |id: u32, content: &str| {
        json!({ "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true })
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [added(1, "<s>"), added(2, "</s>")],
        "normalizer": null,
        "pre_tokenizer": { "type": "WhitespaceSplit" },
        "post_processor": null,
        "decoder": null,
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": "<unk>" }
    })
    .to_string()
}

/// The ids the test tokenizer gives `text` with `special_tokens: false`
/// (text that spells `<s>` is a word like any other).
fn word_ids(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .map(|w| match w {
            "<s>" => 1,
            "</s>" => 2,
            _ => WORDS
                .iter()
                .position(|x| *x == w)
                .map_or(0, |p| p as u32 + 3),
        })
        .collect()
}

/// The longest prefix of at most `n` bytes made of whole characters,
/// computed character by character.
fn prefix_of_whole_chars(s: &str, n: usize) -> &str {
    let mut end = 0;
    for c in s.chars() {
        if end + c.len_utf8() > n {
            break;
        }
        end += c.len_utf8();
    }
    &s[..end]
}

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new(spec: &str, rows: &[serde_json::Value]) -> Project {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("tok")).expect("tok dir");
        std::fs::write(root.join("tok/words.json"), tokenizer_json(0)).expect("tokenizer");
        let lines: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
        std::fs::write(root.join("rows.jsonl"), lines.join("\n") + "\n").expect("rows");
        std::fs::write(root.join("spec.yaml"), spec).expect("spec");
        Project { _tmp: tmp, root }
    }

    fn spec(&self) -> PathBuf {
        self.root.join("spec.yaml")
    }

    fn build(&self) -> Result<BuildReport, String> {
        let opts = BuildOptions {
            cache_dir: Some(self.root.join("cache")),
            threads: Some(2),
            memory_limit: None,
            progress: ProgressMode::Quiet,
            allow_empty: false,
            max_output: None,
        };
        build(&self.spec(), &opts).map_err(|e| e.to_string())
    }
}

const TITLES: &[&str] = &[
    "",
    "the cat",
    "abcdefgh",   // exactly 8 bytes
    "abcdefghij", // cut at 8
    "abcdeé€",    // é ends at byte 7, € would end at byte 10: cut to 7
    "abcdefgé",   // é spans bytes 8-9: cut to 7
    "€€€",        // 9 bytes: two whole € (6)
    "😀😀",       // 8 bytes exactly
    "a😀😀",      // the second 😀 would end at byte 9: cut to 5
    "the cat sat on the mat x x x",
    "x<s>x <s> </s> é € 😀 dog",
];

fn rows() -> Vec<serde_json::Value> {
    TITLES
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let xs = match i % 3 {
                0 => json!(null),
                1 => json!([1, 2]),
                _ => json!([5, 6, 7, 8]),
            };
            json!({ "id": i, "title": t, "xs": xs })
        })
        .collect()
}

const SPEC: &str = r#"
version: 1
name: text
sources:
  t: { path: rows.jsonl }
fields:
  id:        { dtype: i64, column: id }
  title_len: { dtype: u8, length_of: title }
  title:     { text: 8, column: title, pad: 32 }
  xs:        { dtype: i32, column: xs, length: 3, pad: -1 }
  xs_len:    { dtype: u16, length_of: xs }
  tok:       { dtype: u16, column: title, length: 6, pad: 65535,
               transform: { tokenize: { file: tok/words.json, bos: "<s>", eos: "</s>" } } }
  tok_len:   { dtype: u32, length_of: tok }
"#;

fn u16s(rec: &[u8], off: u64, n: usize) -> Vec<u16> {
    let off = off as usize;
    (0..n)
        .map(|k| u16::from_le_bytes([rec[off + 2 * k], rec[off + 2 * k + 1]]))
        .collect()
}

fn i32s(rec: &[u8], off: u64, n: usize) -> Vec<i32> {
    let off = off as usize;
    (0..n)
        .map(|k| i32::from_le_bytes(rec[off + 4 * k..off + 4 * k + 4].try_into().unwrap()))
        .collect()
}

#[test]
fn text_lists_and_tokens_are_cut_padded_and_counted() {
    let p = Project::new(SPEC, &rows());
    let report = p.build().expect("build");
    let ds = Dataset::open(&report.path).expect("open");
    assert_eq!(ds.len(), TITLES.len() as u64);
    let layout = ds.layout();
    let off = |name: &str| layout.field(name).expect(name).offset;
    for (i, title) in TITLES.iter().enumerate() {
        let rec = ds.record(i as u64).expect("record");
        let id = i64::from_le_bytes(rec[off("id") as usize..][..8].try_into().unwrap());
        assert_eq!(id, i as i64);

        // text: whole characters within 8 bytes, then the pad byte.
        let kept = prefix_of_whole_chars(title, 8).as_bytes();
        let mut want = kept.to_vec();
        want.resize(8, b' ');
        let t = off("title") as usize;
        assert_eq!(&rec[t..t + 8], &want[..], "title row {i} ({title:?})");
        assert!(std::str::from_utf8(kept).is_ok());
        assert_eq!(
            rec[off("title_len") as usize],
            kept.len() as u8,
            "title_len row {i}"
        );

        // list: at most 3 elements, -1 after them; a null list stores none.
        let list: Vec<i32> = match i % 3 {
            0 => vec![],
            1 => vec![1, 2],
            _ => vec![5, 6, 7],
        };
        let mut want = list.clone();
        want.resize(3, -1);
        assert_eq!(i32s(rec, off("xs"), 3), want, "xs row {i}");
        assert_eq!(
            u16s(rec, off("xs_len"), 1)[0] as usize,
            list.len(),
            "xs_len row {i}"
        );

        // tokens: <s>, the words' ids, </s>, cut to 6 and padded with 65535.
        let mut ids = vec![1u32];
        ids.extend(word_ids(title));
        ids.push(2);
        ids.truncate(6);
        let stored = ids.len();
        let mut want: Vec<u16> = ids.iter().map(|&x| x as u16).collect();
        want.resize(6, 65535);
        assert_eq!(u16s(rec, off("tok"), 6), want, "tok row {i} ({title:?})");
        let n = off("tok_len") as usize;
        let got = u32::from_le_bytes(rec[n..n + 4].try_into().unwrap());
        assert_eq!(got as usize, stored, "tok_len row {i}");
    }
    ds.verify().expect("verify");
}

#[test]
fn special_tokens_true_matches_special_token_text() {
    let spec = SPEC.replace("bos: \"<s>\", eos: \"</s>\"", "special_tokens: true");
    let p = Project::new(&spec, &rows());
    let report = p.build().expect("build");
    let ds = Dataset::open(&report.path).expect("open");
    let off = ds.layout().field("tok").expect("tok").offset;
    let last = ds.record(TITLES.len() as u64 - 1).expect("record");
    // "x<s>x <s> </s> é ...": `<s>` inside a word is the special token too.
    assert_eq!(u16s(last, off, 6), vec![11, 1, 11, 1, 2, 8]);
    // And with special_tokens: false (the default) it is text: "x<s>x" is
    // one unknown word.
    let spec = SPEC.replace("bos: \"<s>\", eos: \"</s>\"", "special_tokens: false");
    let p = Project::new(&spec, &rows());
    let ds = Dataset::open(&p.build().expect("build").path).expect("open");
    let last = ds.record(TITLES.len() as u64 - 1).expect("record");
    assert_eq!(u16s(last, off, 6), vec![0, 1, 2, 8, 9, 10]);
}

#[test]
fn the_hash_follows_the_tokenizer_bytes_not_its_path() {
    let p = Project::new(SPEC, &rows());
    let first = p.build().expect("build");
    // The same bytes under another name, and the spec pointing there.
    std::fs::create_dir_all(p.root.join("elsewhere")).unwrap();
    std::fs::rename(
        p.root.join("tok/words.json"),
        p.root.join("elsewhere/t.json"),
    )
    .unwrap();
    std::fs::write(p.spec(), SPEC.replace("tok/words.json", "elsewhere/t.json")).unwrap();
    let moved = p.build().expect("build");
    assert_eq!(
        moved.hash, first.hash,
        "moving the tokenizer file changed the hash"
    );
    assert!(moved.cache_hit);
    // The build parsed the tokenizer (and timed it); the cache hit did not.
    assert!(
        first.seconds.contains_key("tokenizers"),
        "{:?}",
        first.seconds
    );
    assert!(
        !moved.seconds.contains_key("tokenizers"),
        "{:?}",
        moved.seconds
    );
    // Other bytes (one more word in the vocabulary): another artifact.
    std::fs::write(p.root.join("elsewhere/t.json"), tokenizer_json(1)).unwrap();
    let changed = p.build().expect("build");
    assert_ne!(
        changed.hash, first.hash,
        "new tokenizer bytes kept the hash"
    );
    assert!(!changed.cache_hit);
    // The canonical form records the blake3 and the library, not the path.
    let spec = Spec::load(&p.spec()).expect("spec");
    let canonical = spec.canonical_json().to_string();
    let hash = blake3::hash(tokenizer_json(1).as_bytes())
        .to_hex()
        .to_string();
    assert!(canonical.contains(&hash), "{canonical}");
    assert!(canonical.contains("tokenizers 0.23.2"), "{canonical}");
    assert!(!canonical.contains("t.json"), "{canonical}");
}

/// The spec at `path` as a build reads it: loaded, then its tokenizers
/// parsed (a cache hit stops before the parse).
fn load_parsed(path: &std::path::Path) -> Result<Spec, tessera::spec::SpecError> {
    Spec::load(path)?.with_tokenizers()
}

/// The error of loading `spec` (with the test tokenizer in tok/words.json).
fn spec_error(spec: &str) -> String {
    let p = Project::new(spec, &rows());
    match load_parsed(&p.spec()) {
        Ok(_) => panic!("the spec loaded:\n{spec}"),
        Err(e) => e.to_string(),
    }
}

fn tok_spec(field: &str) -> String {
    format!("version: 1\nname: t\nsources:\n  t: {{ path: rows.jsonl }}\nfields:\n  {field}\n")
}

fn assert_has(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

#[test]
fn tokenizer_errors_name_the_field_and_the_file() {
    // A file that is not there.
    let e = spec_error(&tok_spec(
        "tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/nope.json } } }",
    ));
    assert_has(&e, &["spec.yaml:6", "fields.tok", "tokenize", "nope.json"]);

    // A file that is not a tokenizer.
    let p = Project::new(
        &tok_spec(
            "tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/bad.json } } }",
        ),
        &rows(),
    );
    std::fs::write(p.root.join("tok/bad.json"), "{\"model\": 3}").unwrap();
    let e = load_parsed(&p.spec()).unwrap_err().to_string();
    assert_has(&e, &["fields.tok", "bad.json", "not a tokenizer file"]);
    // The hash needs only the file's bytes, so loading the spec (all a
    // cache hit does) does not parse it; a build that has work to do does,
    // and says the same.
    let spec = Spec::load(&p.spec()).expect("loading reads the bytes only");
    let bad = blake3::hash(b"{\"model\": 3}").to_hex().to_string();
    assert!(spec.canonical_json().to_string().contains(&bad));
    let e = p.build().expect_err("a build parses the file").to_string();
    assert_has(&e, &["fields.tok", "bad.json", "not a tokenizer file"]);

    // A bos token the vocabulary lacks.
    let e = spec_error(&tok_spec(
        "tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/words.json, bos: \"<bos>\" } } }",
    ));
    assert_has(
        &e,
        &[
            "fields.tok",
            "words.json",
            "bos token \"<bos>\" is not in the tokenizer's vocabulary",
        ],
    );

    // u16 cannot hold ids of a vocabulary of 70000 words.
    let p = Project::new(
        &tok_spec(
            "tok: { dtype: u16, column: title, length: 4, transform: { tokenize: { file: tok/big.json } } }",
        ),
        &rows(),
    );
    std::fs::write(p.root.join("tok/big.json"), tokenizer_json(70_000)).unwrap();
    let e = load_parsed(&p.spec()).unwrap_err().to_string();
    assert_has(
        &e,
        &[
            "fields.tok",
            "ids up to 70011",
            "dtype u16",
            "largest 65535",
        ],
    );
    // ... which u32 can.
    std::fs::write(
        p.spec(),
        tok_spec("tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/big.json } } }"),
    )
    .unwrap();
    load_parsed(&p.spec()).expect("u32 holds the ids");

    // A rank file needs a known encoding and has no post-processor.
    let e = spec_error(&tok_spec(
        "tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/words.json, encoding: gpt9 } } }",
    ));
    assert_has(
        &e,
        &[
            "fields.tok",
            "unknown tiktoken encoding \"gpt9\"",
            "cl100k_base",
        ],
    );
    let e = spec_error(&tok_spec(
        "tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/words.json, encoding: cl100k_base, add_special_tokens: true } } }",
    ));
    assert_has(&e, &["fields.tok", "add_special_tokens", "rank file"]);
    // A tokenizer.json read as a rank file names the line at fault.
    let e = spec_error(&tok_spec(
        "tok: { dtype: u32, column: title, length: 4, transform: { tokenize: { file: tok/words.json, encoding: r50k_base } } }",
    ));
    assert_has(&e, &["fields.tok", "words.json", "line 1", "BASE64 RANK"]);
}

#[test]
fn spec_rules_for_text_and_length_fields() {
    let cases: &[(&str, &[&str])] = &[
        (
            "t: { dtype: f32, text: 8, column: title }",
            &["text", "needs dtype u8"],
        ),
        (
            "t: { text: 8, column: title, fill_null: 0 }",
            &["fill_null", "null is an error"],
        ),
        (
            "t: { text: 8, column: title, length: 3 }",
            &["text cannot be combined with length"],
        ),
        (
            "t: { text: 8, column: title, pad: 256 }",
            &["pad 256 cannot be stored as u8"],
        ),
        (
            "t: { text: 8, column: title, transform: log1p }",
            &["tokenize"],
        ),
        (
            "t: { dtype: u32, column: title, transform: { tokenize: { file: tok/words.json } } }",
            &["tokenize needs length"],
        ),
        (
            "t: { dtype: f32, column: title, length: 3, transform: { tokenize: { file: tok/words.json } } }",
            &["integer dtype"],
        ),
        (
            "t: { dtype: u32, column: title, length: 3, fill_null: 0, transform: { tokenize: { file: tok/words.json } } }",
            &["fill_null does not apply to a tokenize field"],
        ),
        (
            "t: { dtype: u32, column: title, length: 3, transform: [ { tokenize: { file: tok/words.json } }, { clip: { max: 3 } } ] }",
            &["tokenize must be the only transform"],
        ),
        (
            "t: { dtype: u32, column: title, length: 3, transform: { tokenize: { file: tok/words.json, eos: 3 } } }",
            &["eos"],
        ),
        (
            "n: { dtype: u8, length_of: nope }\n  t: { text: 8, column: title }",
            &["length_of names no field"],
        ),
        (
            "n: { dtype: u8, length_of: t }\n  t: { dtype: i64, column: id }",
            &["length_of needs a text field"],
        ),
        (
            "n: { dtype: u8, length_of: t }\n  t: { text: 300, column: title }",
            &["up to 300 bytes", "u8"],
        ),
        (
            "n: { dtype: f32, length_of: t }\n  t: { text: 3, column: title }",
            &["f32"],
        ),
        (
            "n: { dtype: u8, length_of: t, pad: 1 }\n  t: { text: 3, column: title }",
            &["takes only dtype, not pad"],
        ),
        (
            "n: { dtype: u8, length_of: t, column: x }\n  t: { text: 3, column: title }",
            &["cannot both be given"],
        ),
    ];
    for (field, parts) in cases {
        let e = spec_error(&tok_spec(field));
        assert_has(&e, parts);
        assert!(e.contains("spec.yaml:"), "{e}");
    }
}

#[test]
fn a_null_text_and_a_number_column_are_row_errors() {
    let mut rs = rows();
    rs[4]["title"] = json!(null);
    let p = Project::new(SPEC, &rs);
    let e = p.build().unwrap_err();
    // NDJSON inputs are named by file (their rows are not numbered; a
    // Parquet or CSV input would add the row or line).
    assert_has(&e, &["fields.title", "rows.jsonl", "null", "COALESCE"]);

    let p = Project::new(&tok_spec("t: { text: 8, column: id }"), &rows());
    let e = p.build().unwrap_err();
    assert_has(&e, &["fields.t", "text column", "Int64"]);

    // An empty text stores only bos and eos ids; COALESCE gives one for a null.
    let p = Project::new(
        &tok_spec(
            "t: { dtype: i64, expr: \"COALESCE(CASE WHEN id = 0 THEN NULL ELSE title END, '')\", length: 3, pad: -1, transform: { tokenize: { file: tok/words.json, bos: \"<s>\", eos: \"</s>\" } } }",
        ),
        &rows(),
    );
    let ds = Dataset::open(&p.build().expect("build").path).expect("open");
    let rec = ds.record(0).expect("record");
    let off = ds.layout().field("t").unwrap().offset as usize;
    let got: Vec<i64> = (0..3)
        .map(|k| i64::from_le_bytes(rec[off + 8 * k..off + 8 * k + 8].try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![1, 2, -1]);
}

/// Text tokenized and packed (`tokenize` + `pack:`): every window's pieces,
/// read back, are the test tokenizer's ids of whole documents (bos and eos
/// included), each document exactly once, in best-fit windows of 12 + 1.
#[test]
fn tokenized_text_packs_into_windows_of_whole_documents() {
    let spec = "version: 1\nname: t\nsources:\n  t: { path: rows.jsonl }\nfields:\n  \
                tok: { dtype: u32, column: title, transform: { tokenize: { file: tok/words.json, bos: \"<s>\", eos: \"</s>\" } } }\n\
                pack: { length: 12, labels: true }\n";
    let p = Project::new(spec, &rows());
    let r = p.build().expect("build");
    let ds = Dataset::open(&r.path).expect("open");
    let mut want: Vec<Vec<u32>> = TITLES
        .iter()
        .map(|t| {
            let mut ids = vec![1];
            ids.extend(word_ids(t));
            ids.push(2);
            ids
        })
        .collect();
    let mut got: Vec<Vec<u32>> = Vec::new();
    for i in 0..ds.len() {
        let toks = ds.field::<u32>(i, "tok").expect("tok");
        let seg = ds.field::<i32>(i, "segment_ids").expect("seg");
        assert_eq!(toks.len(), 13);
        let mut last = 0;
        for (t, s) in toks.iter().zip(seg) {
            if *s == 0 {
                continue;
            }
            if *s != last {
                got.push(Vec::new());
                last = *s;
            }
            got.last_mut().expect("piece").push(*t);
        }
    }
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let pack = &r.pack.as_ref().expect("pack report")["all"];
    assert_eq!(pack["documents"].as_u64(), Some(TITLES.len() as u64));
    assert_eq!(pack["split_documents"].as_u64(), Some(0));
}
