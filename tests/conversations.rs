//! Conversations end to end: a column of `{role, content}` turns rendered
//! with a chat template, tokenized by a small word-level tokenizer whose ids
//! the test computes itself, packed with a loss mask on the assistant
//! replies; the spec rules, the bad-mask error and skip, and what enters
//! the artifact hash. Real conversations, templates and tokenizers are
//! compared with jinja2 and the Python `tokenizers` package in
//! python/tests/test_chat.py.

use serde_json::json;
use std::path::PathBuf;
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera::spec::Spec;
use tessera_reader::Dataset;

/// Vocabulary: `<unk>` 0, then the markers (special tokens), then words.
const MARKERS: &[&str] = &["<u>", "<a>", "</t>"];
const WORDS: &[&str] = &["the", "cat", "sat", "on", "mat", "x"];

fn tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    for (i, w) in ["<unk>"].iter().chain(MARKERS).chain(WORDS).enumerate() {
        vocab.insert(w.to_string(), json!(i));
    }
    let added: Vec<_> = MARKERS
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({ "id": i + 1, "content": m, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true })
        })
        .collect();
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": { "type": "WhitespaceSplit" },
        "post_processor": null, "decoder": null,
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": "<unk>" }
    })
    .to_string()
}

/// A template in the shape of ChatML: a marker opens each turn and `</t>`
/// ends it; the generation prompt is the assistant's marker.
const TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'user' %}<u> {{ m.content }} </t> \
    {% else %}<a> {{ m.content }} </t> {% endif %}{% endfor %}\
    {% if add_generation_prompt %}<a> {% endif %}";

fn id(word: &str) -> u32 {
    ["<unk>"]
        .iter()
        .chain(MARKERS)
        .chain(WORDS)
        .position(|w| *w == word)
        .map_or(0, |p| p as u32)
}

/// The ids and train bits of a conversation, by the documented rule: the
/// reply and its `</t>` are trained on, the `<a>` header is prompt.
fn expected(conv: &[(&str, &str)]) -> (Vec<u32>, Vec<u8>) {
    let (mut ids, mut train) = (Vec::new(), Vec::new());
    for (role, content) in conv {
        let reply = u8::from(*role == "assistant");
        ids.push(id(if reply == 1 { "<a>" } else { "<u>" }));
        train.push(0);
        for w in content.split_whitespace() {
            ids.push(id(w));
            train.push(reply);
        }
        ids.push(id("</t>"));
        train.push(reply);
    }
    (ids, train)
}

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new(spec: &str, convs: &[Vec<(&str, &str)>]) -> Project {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("tok")).expect("tok dir");
        std::fs::write(root.join("tok/words.json"), tokenizer_json()).expect("tokenizer");
        std::fs::write(root.join("tok/chat.jinja"), TEMPLATE).expect("template");
        let lines: Vec<String> = convs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let turns: Vec<_> = c
                    .iter()
                    .map(|(r, t)| json!({ "role": r, "content": t }))
                    .collect();
                json!({ "id": i, "chat": turns }).to_string()
            })
            .collect();
        std::fs::write(root.join("rows.jsonl"), lines.join("\n") + "\n").expect("rows");
        std::fs::write(root.join("spec.yaml"), spec).expect("spec");
        Project { _tmp: tmp, root }
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
        build(&self.root.join("spec.yaml"), &opts).map_err(|e| e.to_string())
    }
}

fn spec(tokenize: &str, pack: &str) -> String {
    format!(
        "version: 1\nname: c\nsources:\n  t: {{ path: rows.jsonl }}\nfields:\n  \
         tok: {{ dtype: u32, column: chat, transform: {{ tokenize: {{ file: tok/words.json, {tokenize} }} }} }}\n\
         {pack}"
    )
}

fn convs() -> Vec<Vec<(&'static str, &'static str)>> {
    vec![
        vec![
            ("user", "the cat"),
            ("assistant", "sat on"),
            ("user", "x"),
            ("assistant", "mat"),
        ],
        vec![("user", "x x"), ("assistant", "the mat")],
        vec![("user", "cat")],
        vec![("user", "on"), ("assistant", ""), ("user", "sat")],
    ]
}

/// The packed documents, each as (ids, loss mask), sorted.
fn documents(report: &BuildReport) -> Vec<(Vec<u32>, Vec<u8>)> {
    let ds = Dataset::open(&report.path).expect("open");
    let mut docs = Vec::new();
    for i in 0..ds.len() {
        let toks = ds.field::<u32>(i, "tok").expect("tok");
        let seg = ds.field::<i32>(i, "segment_ids").expect("seg");
        let mask = ds.field::<u8>(i, "loss_mask").expect("mask");
        let mut last = 0;
        for k in 0..seg.len() {
            if seg[k] == 0 {
                continue;
            }
            if seg[k] != last {
                docs.push((Vec::new(), Vec::new()));
                last = seg[k];
            }
            let d = docs.last_mut().expect("piece");
            d.0.push(toks[k]);
            d.1.push(mask[k]);
        }
    }
    docs.sort();
    docs
}

#[test]
fn replies_and_their_end_markers_are_trained_on_and_headers_are_not() {
    let mut convs = convs();
    convs.remove(2); // the conversation without a reply
    let p = Project::new(
        &spec("chat_template: tok/chat.jinja", "pack: { length: 32 }\n"),
        &convs,
    );
    let r = p.build().expect("build");
    let mut want: Vec<_> = convs.iter().map(|c| expected(c)).collect();
    want.sort();
    assert_eq!(documents(&r), want);
    // An empty reply still trains its end marker.
    assert!(
        want.iter()
            .any(|(ids, m)| ids.len() == 8 && m == &[0, 0, 0, 0, 1, 0, 0, 0])
    );
    let pack = &r.pack.as_ref().expect("pack report")["all"];
    assert_eq!(pack["documents"].as_u64(), Some(3));
    assert_eq!(pack["skipped_conversations"].as_u64(), Some(0));
}

#[test]
fn a_conversation_without_a_reply_is_an_error_naming_the_row_or_skipped() {
    let p = Project::new(
        &spec("chat_template: tok/chat.jinja", "pack: { length: 32 }\n"),
        &convs(),
    );
    let e = p.build().expect_err("a conversation has no reply");
    // NDJSON errors name the file but not yet the row (Parquet and CSV
    // errors name both: python/tests/test_chat.py).
    for part in ["fields.tok", "rows.jsonl", "all zeros", "on_bad_mask: skip"] {
        assert!(e.contains(part), "{e:?} lacks {part:?}");
    }
    assert!(
        !p.root.join("cache").exists()
            || walk(&p.root.join("cache"))
                .iter()
                .all(|f| !f.ends_with("manifest.json")),
        "a failed build published something"
    );

    let p = Project::new(
        &spec(
            "chat_template: tok/chat.jinja, on_bad_mask: skip",
            "pack: { length: 32 }\n",
        ),
        &convs(),
    );
    let r = p.build().expect("build");
    let pack = &r.pack.as_ref().expect("pack report")["all"];
    assert_eq!(pack["skipped_conversations"].as_u64(), Some(1));
    assert_eq!(pack["documents"].as_u64(), Some(3));
    let mut want: Vec<_> = convs()
        .iter()
        .filter(|c| c.len() > 1)
        .map(|c| expected(c))
        .collect();
    want.sort();
    assert_eq!(documents(&r), want);
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn spec_error(spec: &str) -> String {
    let p = Project::new(spec, &convs());
    match Spec::load(&p.root.join("spec.yaml")) {
        Ok(_) => panic!("the spec loaded:\n{spec}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn spec_rules_for_conversations() {
    let packed = "pack: { length: 32 }\n";
    let cases: &[(String, &[&str])] = &[
        (
            spec("chat_template: tok/chat.jinja", ""),
            &["fields.tok.transform", "needs its field packed"],
        ),
        (
            spec(
                "chat_template: tok/chat.jinja, special_tokens: false",
                packed,
            ),
            &["special_tokens", "cannot be false with a chat_template"],
        ),
        (
            spec("on_bad_mask: skip", packed),
            &["on_bad_mask", "needs a chat_template"],
        ),
        (
            spec("chat_template: tok/chat.jinja, on_bad_mask: drop", packed),
            &[
                "on_bad_mask",
                "unknown on_bad_mask \"drop\"; use error or skip",
            ],
        ),
        (
            spec("chat_template: tok/nope.jinja", packed),
            &["fields.tok.transform.tokenize.chat_template", "nope.jinja"],
        ),
    ];
    for (text, parts) in cases {
        let e = spec_error(text);
        for part in *parts {
            assert!(e.contains(part), "{e:?} lacks {part:?}\nspec:\n{text}");
        }
    }
    // A template that does not compile names the file.
    let p = Project::new(&spec("chat_template: tok/bad.jinja", packed), &convs());
    std::fs::write(p.root.join("tok/bad.jinja"), "{% for m in messages %}").expect("write");
    let e = Spec::load(&p.root.join("spec.yaml"))
        .expect_err("bad template")
        .to_string();
    assert!(
        e.contains("bad.jinja") && e.contains("chat_template"),
        "{e}"
    );
}

#[test]
fn the_hash_follows_the_template_bytes_not_its_path() {
    let packed = "pack: { length: 32 }\n";
    let p = Project::new(&spec("chat_template: tok/chat.jinja", packed), &convs());
    let hash = |p: &Project| {
        let mut s = Spec::load(&p.root.join("spec.yaml")).expect("spec");
        s.resolve_files().expect("files");
        s.canonical_json().to_string()
    };
    let first = hash(&p);
    assert!(first.contains(&blake3::hash(TEMPLATE.as_bytes()).to_hex().to_string()));
    std::fs::create_dir_all(p.root.join("elsewhere")).expect("dir");
    std::fs::write(p.root.join("elsewhere/t.jinja"), TEMPLATE).expect("copy");
    std::fs::write(
        p.root.join("spec.yaml"),
        spec("chat_template: elsewhere/t.jinja", packed),
    )
    .expect("spec");
    assert_eq!(hash(&p), first, "moving the template changed the meaning");
    std::fs::write(p.root.join("elsewhere/t.jinja"), format!("{TEMPLATE} ")).expect("edit");
    assert_ne!(hash(&p), first, "a changed template kept the meaning");
}
