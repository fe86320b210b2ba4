//! Chat templates against Python: every template the TRL package ships
//! (`trl/chat_templates/*.jinja`) is rendered by tessera (minijinja) and by
//! jinja2 set up as Hugging Face transformers sets it up
//! (tests/chat_reference.py), on the same conversations, and the texts must
//! agree byte for byte (or both must fail, with the template's own message
//! when it raises one). The assistant ranges tessera
//! derives are compared with the `{% generation %}` blocks of TRL's
//! `_training` templates.
//!
//! Needs the project's Python environment with `trl` and `jinja2`
//! (scripts/setup.sh --test); it fails, never skips, without them.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use tessera::pack::chat::ChatTemplate;

/// Templates tessera does not render, each with the reason. The test checks
/// that each one still fails, so the list cannot go stale.
const UNSUPPORTED: &[(&str, &str)] = &[];

fn conversations() -> Vec<Vec<(String, String)>> {
    let raw: &[&[(&str, &str)]] = &[
        &[("user", "Hello!"), ("assistant", "Hi, how can I help?")],
        &[
            ("system", "You are terse."),
            ("user", "What is 2+2?"),
            ("assistant", "4"),
            ("user", "And 3+3?"),
            ("assistant", "6"),
        ],
        &[
            ("user", "Grüße, 世界 🌍\nwie geht's?\u{1f}"),
            ("assistant", "  Très bien ✓ — ありがとう\u{3000}\n"),
        ],
        &[("user", ""), ("assistant", "")],
        &[("user", "Q"), ("assistant", "A"), ("user", "follow-up")],
        &[
            (
                "user",
                "<|im_end|> {{ not a tag }} \"quotes\" \\ back\tslash </s>",
            ),
            ("assistant", "<think>\nhmm\n</think>\n\nfine"),
        ],
        &[("system", "Only a system prompt.")],
    ];
    raw.iter()
        .map(|c| {
            c.iter()
                .map(|(r, t)| (r.to_string(), t.to_string()))
                .collect()
        })
        .collect()
}

const BOS: &str = "<bos>";
const EOS: &str = "<eos>";

fn python() -> String {
    match std::env::var("TESSERA_VENV") {
        Ok(v) if !v.is_empty() => format!("{v}/bin/python"),
        _ => "python3".to_string(),
    }
}

fn reference(convs: &[Vec<(String, String)>]) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/chat_reference.py");
    let request = serde_json::json!({"conversations": convs, "bos": BOS, "eos": EOS});
    let py = python();
    let mut child = Command::new(&py)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {py}: {e} (scripts/setup.sh --test makes the venv)")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{py} {script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn first_difference(a: &str, b: &str) -> String {
    let i = a
        .bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let lo = i.saturating_sub(30);
    let near = |s: &str| {
        let bytes = &s.as_bytes()[lo.min(s.len())..(i + 30).min(s.len())];
        String::from_utf8_lossy(bytes).into_owned()
    };
    format!(
        "first difference at byte {i}: python {:?} / tessera {:?}",
        near(a),
        near(b)
    )
}

#[test]
fn trl_templates_render_as_jinja2() {
    let convs = conversations();
    let reference = reference(&convs);
    let templates = reference["templates"].as_array().unwrap();
    assert!(
        templates.len() >= 70,
        "expected TRL's ~72 templates, found {}",
        templates.len()
    );
    let unsupported: BTreeMap<&str, &str> = UNSUPPORTED.iter().copied().collect();
    let mut failures = Vec::new();
    let (mut texts_equal, mut both_error, mut templates_equal, mut originals) = (0, 0, 0, 0);
    for t in templates {
        let name = t["name"].as_str().unwrap();
        originals += 1;
        assert!(
            t.get("parse_error").is_none(),
            "{name}: jinja2 cannot parse it: {}",
            t["parse_error"]
        );
        let source = t["source"].as_str().unwrap().to_string();
        let compiled = ChatTemplate::from_source(name, source);
        if let Some(reason) = unsupported.get(name) {
            assert!(
                compiled.is_err(),
                "{name} is listed as unsupported ({reason}) but now compiles: take it off the list"
            );
            continue;
        }
        let template = match compiled {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: does not compile: {e}"));
                continue;
            }
        };
        let renders = t["renders"].as_array().unwrap();
        let mut all = true;
        for (k, expected) in renders.iter().enumerate() {
            let conv = &convs[k / 2];
            let add = k % 2 == 1;
            let got = template.render_text(conv, add, BOS, EOS);
            match (expected.get("text").and_then(|v| v.as_str()), &got) {
                (Some(want), Ok(have)) if want == have => texts_equal += 1,
                (Some(want), Ok(have)) => {
                    all = false;
                    failures.push(format!(
                        "{name}, conversation {}, add_generation_prompt={add}: {}",
                        k / 2,
                        first_difference(want, have)
                    ))
                }
                (None, Err(e)) => {
                    both_error += 1;
                    // A template's own exception carries its message.
                    let msg = expected["error"].as_str().unwrap_or_default();
                    if let Some(m) = msg.strip_prefix("TemplateError: ")
                        && !e.contains(m)
                    {
                        all = false;
                        failures.push(format!("{name}: python raised {m:?}, tessera: {e}"));
                    }
                }
                (Some(_), Err(e)) => {
                    all = false;
                    failures.push(format!(
                        "{name}, conversation {}, add_generation_prompt={add}: python renders, tessera fails: {e}",
                        k / 2
                    ))
                }
                (None, Ok(_)) => {
                    all = false;
                    failures.push(format!(
                        "{name}, conversation {}, add_generation_prompt={add}: python fails ({}), tessera renders",
                        k / 2,
                        expected["error"]
                    ))
                }
            }
        }
        if all {
            templates_equal += 1;
        }
        // Which conversations give masks (informative: a template that
        // rewrites earlier turns gives none for multi-turn conversations).
        let rejected: Vec<usize> = (0..convs.len())
            .filter(|&k| {
                matches!(template.render(&convs[k], BOS, EOS), Err(e) if e.contains("incrementally"))
            })
            .collect();
        if !rejected.is_empty() {
            eprintln!("{name}: no mask for conversations {rejected:?} (not incremental)");
        }
    }
    eprintln!(
        "chat templates: {templates_equal} of {originals} agree with jinja2 {} on every rendering \
         ({texts_equal} texts equal byte for byte, {both_error} renderings fail in both)",
        reference["jinja2"]
    );
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn assistant_ranges_against_trl_generation_blocks() {
    let convs = conversations();
    let reference = reference(&convs);
    let mut failures = Vec::new();
    let (mut same, mut wider, mut checked, mut not_incremental) = (0, 0, 0, 0);
    for t in reference["templates"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        if !name.ends_with("_training.jinja") {
            continue;
        }
        let source = t["source"].as_str().unwrap().to_string();
        let template = match ChatTemplate::from_source(name, source) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: does not compile: {e}"));
                continue;
            }
        };
        for (k, g) in t["generation"].as_array().unwrap().iter().enumerate() {
            let Some(text) = g.get("text").and_then(|v| v.as_str()) else {
                continue;
            };
            // Blocks that touch are one range (phi3's training template
            // closes a reply's block and opens another for the final eos).
            let mut ranges: Vec<(usize, usize)> = Vec::new();
            for r in g["ranges"].as_array().unwrap() {
                let (s, e) = (
                    r[0].as_u64().unwrap() as usize,
                    r[1].as_u64().unwrap() as usize,
                );
                match ranges.last_mut() {
                    Some(last) if last.1 == s => last.1 = e,
                    _ => ranges.push((s, e)),
                }
            }
            let rendered = match template.render(&convs[k], BOS, EOS) {
                Ok(r) => r,
                Err(e) if e.contains("incrementally") => {
                    not_incremental += 1;
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{name}, conversation {k}: {e}"));
                    continue;
                }
            };
            if rendered.text != text {
                failures.push(format!(
                    "{name}, conversation {k}: {}",
                    first_difference(text, &rendered.text)
                ));
                continue;
            }
            if rendered.assistant.len() != ranges.len() {
                failures.push(format!(
                    "{name}, conversation {k}: {} assistant ranges, {} generation blocks",
                    rendered.assistant.len(),
                    ranges.len()
                ));
                continue;
            }
            for (ours, (start, end)) in rendered.assistant.iter().zip(&ranges) {
                checked += 1;
                // The end (the reply's end-of-turn marker included) must be the
                // same; the generation block may start earlier, inside what
                // the generation prompt already writes.
                let prompt_part = &text[*start..ours.start.max(*start)];
                if ours.end != *end || ours.start < *start {
                    failures.push(format!(
                        "{name}, conversation {k}: tessera {:?} {:?}, generation block {:?} {:?}",
                        ours,
                        &text[ours.clone()],
                        start..end,
                        &text[*start..*end]
                    ));
                } else if ours.start == *start {
                    same += 1;
                } else {
                    wider += 1;
                    eprintln!(
                        "{name}, conversation {k}: the generation block also covers {prompt_part:?}"
                    );
                }
            }
        }
    }
    eprintln!(
        "assistant ranges: {checked} compared with generation blocks: {same} equal, {wider} where \
         the block also covers part of the generation prompt; {not_incremental} conversations \
         rejected as not incremental"
    );
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
