//! Unit tests of chat templates: masks, Python semantics, `tojson`.

use super::*;

fn conv(turns: &[(&str, &str)]) -> Vec<(String, String)> {
    turns
        .iter()
        .map(|(r, c)| (r.to_string(), c.to_string()))
        .collect()
}

/// The ChatML template of the Qwen2 family, shortened.
const CHATML: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[test]
fn chatml_masks_cover_replies_and_end_markers() {
    let t = ChatTemplate::from_source("chatml", CHATML.to_string()).unwrap();
    let c = conv(&[
        ("system", "Be brief."),
        ("user", "2+2?"),
        ("assistant", "4"),
        ("user", "3+3?"),
        ("assistant", "6"),
    ]);
    let r = t.render(&c, "", "").unwrap();
    assert_eq!(
        r.text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n\
             <|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n\
             <|im_start|>assistant\n6<|im_end|>\n"
    );
    let parts: Vec<&str> = r.assistant.iter().map(|a| &r.text[a.clone()]).collect();
    assert_eq!(parts, ["4<|im_end|>\n", "6<|im_end|>\n"]);
}

#[test]
fn empty_reply_still_trains_the_end_marker() {
    let t = ChatTemplate::from_source("chatml", CHATML.to_string()).unwrap();
    let r = t
        .render(&conv(&[("user", ""), ("assistant", "")]), "", "")
        .unwrap();
    assert_eq!(&r.text[r.assistant[0].clone()], "<|im_end|>\n");
}

#[test]
fn no_assistant_turn_gives_no_ranges() {
    let t = ChatTemplate::from_source("chatml", CHATML.to_string()).unwrap();
    let r = t.render(&conv(&[("user", "hi")]), "", "").unwrap();
    assert!(r.assistant.is_empty());
}

#[test]
fn bos_eos_and_trim_as_python() {
    // Llama-2 style: bos and eos around each exchange, content trimmed.
    let src = "{% for m in messages %}{% if m.role == 'user' %}{{ bos_token + '[INST] ' + m.content | trim + ' [/INST]' }}\
{% else %}{{ ' ' + m.content | trim + ' ' + eos_token }}{% endif %}{% endfor %}";
    let t = ChatTemplate::from_source("llama2", src.to_string()).unwrap();
    // U+001F is white space to Python (str.isspace), not to Rust.
    let c = conv(&[
        ("user", "\u{1f} héllo \u{3000}"),
        ("assistant", "\u{1f}ok\u{1f}"),
    ]);
    let r = t.render(&c, "<s>", "</s>").unwrap();
    assert_eq!(r.text, "<s>[INST] héllo [/INST] ok </s>");
    assert_eq!(&r.text[r.assistant[0].clone()], " ok </s>");
}

#[test]
fn generation_tags_render_as_jinja2_renders_them() {
    let src = "{% for m in messages %}{{ m.role }}:\n{% if m.role == 'assistant' %}\n  {%- generation -%}\n  {{ m.content }}!\n  {%- endgeneration %}\n{% else %}{{ m.content }}{% endif %}\n{% endfor %}";
    let t = ChatTemplate::from_source("t", src.to_string()).unwrap();
    let r = t
        .render(&conv(&[("user", "q"), ("assistant", "a")]), "", "")
        .unwrap();
    // As jinja2 renders it (trim_blocks eats the newlines after tags).
    assert_eq!(r.text, "user:\nqassistant:\na!");
    assert_eq!(&r.text[r.assistant[0].clone()], "assistant:\na!");
}

#[test]
fn raise_exception_is_an_error() {
    let src = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}x";
    let t = ChatTemplate::from_source("t.jinja", src.to_string()).unwrap();
    let e = t.render(&conv(&[("system", "s")]), "", "").unwrap_err();
    assert!(
        e.contains("t.jinja") && e.contains("System role not supported"),
        "{e}"
    );
}

#[test]
fn a_template_that_rewrites_earlier_turns_cannot_give_masks() {
    // Writes an end-of-conversation marker only after the last message.
    let src = "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if loop.last %} END{% endif %}\n{% endfor %}";
    let t = ChatTemplate::from_source("t", src.to_string()).unwrap();
    let e = t
        .render(
            &conv(&[("user", "a"), ("assistant", "b"), ("user", "c")]),
            "",
            "",
        )
        .unwrap_err();
    assert!(e.contains("incrementally"), "{e}");
}

#[test]
fn tojson_as_python_json_dumps() {
    let src = "{{ messages[0] | tojson }}|{{ messages | tojson(indent=2) }}|{{ 'é\"\\n' | tojson(ensure_ascii=True) }}|{{ {'b': 1, 'a': [1.5, none, true]} | tojson(sort_keys=True) }}";
    let t = ChatTemplate::from_source("t", src.to_string()).unwrap();
    let out = t
        .render_text(&conv(&[("user", "x")]), false, "", "")
        .unwrap();
    assert_eq!(
        out,
        "{\"role\": \"user\", \"content\": \"x\"}|[\n  {\n    \"role\": \"user\",\n    \"content\": \"x\"\n  }\n]|\"\\u00e9\\\"\\n\"|{\"a\": [1.5, null, true], \"b\": 1}"
    );
}

#[test]
fn tojson_ensure_ascii_as_python() {
    let src = "{{ messages[0].content | tojson(ensure_ascii=True) }}";
    let t = ChatTemplate::from_source("t", src.to_string()).unwrap();
    let out = t
        .render_text(&conv(&[("user", "é\u{7f}😀")]), false, "", "")
        .unwrap();
    // json.dumps("é\x7f😀", ensure_ascii=True): all but ' '..='~' escaped
    // (DEL too), the emoji as a surrogate pair.
    assert_eq!(out, "\"\\u00e9\\u007f\\ud83d\\ude00\"");
}

#[test]
fn python_string_methods() {
    let src = "{{ messages[0].content.strip() }}|{{ messages[0].content.split() | join(',') }}|{{ messages[0].content.startswith('\u{1f}') }}|{{ messages[0].content.rstrip().endswith('b') }}";
    let t = ChatTemplate::from_source("t", src.to_string()).unwrap();
    let out = t
        .render_text(&conv(&[("user", "\u{1f}a b\u{1f}")]), false, "", "")
        .unwrap();
    // Booleans print as Python prints them.
    assert_eq!(out, "a b|a,b|True|True");
}

#[test]
fn trim_blocks_and_lstrip_blocks_as_transformers() {
    let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\nU:{{ m.content }}\n    {% endif %}\n{% endfor %}\n";
    let t = ChatTemplate::from_source("t", src.to_string()).unwrap();
    let out = t
        .render_text(&conv(&[("user", "x"), ("user", "y")]), false, "", "")
        .unwrap();
    assert_eq!(out, "U:x\nU:y\n");
}

#[test]
fn tokenizer_config_string_list_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tokenizer_config.json");
    std::fs::write(&p, r#"{"chat_template": "{{ messages[0].content }}"}"#).unwrap();
    let t = ChatTemplate::from_file(&p).unwrap();
    assert_eq!(
        t.render_text(&conv(&[("user", "q")]), false, "", "")
            .unwrap(),
        "q"
    );

    std::fs::write(
            &p,
            r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}"#,
        )
        .unwrap();
    let t = ChatTemplate::from_file(&p).unwrap();
    assert_eq!(t.render_text(&[], false, "", "").unwrap(), "D");

    std::fs::write(
        &p,
        r#"{"chat_template": [{"name": "tool_use", "template": "T"}]}"#,
    )
    .unwrap();
    let e = ChatTemplate::from_file(&p).unwrap_err();
    assert!(
        e.contains("tokenizer_config.json") && e.contains("default"),
        "{e}"
    );

    std::fs::write(&p, r#"{"bos_token": "<s>"}"#).unwrap();
    let e = ChatTemplate::from_file(&p).unwrap_err();
    assert!(
        e.contains("tokenizer_config.json") && e.contains("no chat_template"),
        "{e}"
    );

    let j = dir.path().join("chat.jinja");
    std::fs::write(&j, "{% for m in messages %}").unwrap();
    let e = ChatTemplate::from_file(&j).unwrap_err();
    assert!(e.contains("chat.jinja"), "{e}");
    let e = ChatTemplate::from_file(&dir.path().join("missing.jinja")).unwrap_err();
    assert!(e.contains("missing.jinja"), "{e}");
}

#[test]
fn a_config_gives_its_special_tokens_as_string_or_added_token() {
    let config = br#"{"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
            "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"}"#;
    let (t, tokens) = ChatTemplate::from_bytes("tokenizer_config.json", config).unwrap();
    assert_eq!(tokens.bos.as_deref(), Some("<s>"));
    assert_eq!(tokens.eos.as_deref(), Some("</s>"));
    let text = t
        .render_text(&conv(&[("user", "q")]), false, "<s>", "</s>")
        .unwrap();
    assert_eq!(text, "<s>q</s>");
    let (_, none) = ChatTemplate::from_bytes("chat.jinja", b"{{ bos_token }}").unwrap();
    assert_eq!(none, ConfigTokens::default());
    let e = ChatTemplate::from_bytes("chat.jinja", b"\xff").unwrap_err();
    assert!(e.contains("chat.jinja") && e.contains("UTF-8"), "{e}");
}
