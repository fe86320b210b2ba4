//! Conversations rendered with a chat template (SFT): a list of
//! `{role, content}` turns becomes one text, and the byte ranges of that text
//! that belong to assistant replies, which is where a loss is taken.
//!
//! Templates are the Jinja files model repositories ship (a `.jinja` file, or
//! the `chat_template` of a Hugging Face `tokenizer_config.json`). They are
//! rendered the way Hugging Face `transformers` renders them with `jinja2`:
//! `trim_blocks` and `lstrip_blocks` on, a final newline of the template
//! dropped, no HTML escaping, the variables `messages`,
//! `add_generation_prompt`, `bos_token` and `eos_token`, the function
//! `raise_exception(msg)`, a `tojson` filter that writes JSON as Python's
//! `json.dumps(..., ensure_ascii=False)` does, a `trim` filter and string
//! methods (`.strip()`, `.split()`, ...) that treat whitespace as Python's
//! `str.isspace` does, and the loop controls (`break`, `continue`). The
//! clock function `strftime_now` is left out on purpose: a build is
//! reproducible, so a template reads no date (templates that test
//! `strftime_now is defined` fall back to their fixed date).
//!
//! # The assistant mask
//!
//! For each assistant turn `i`, the conversation is rendered up to turn `i`
//! excluded with `add_generation_prompt = true` (the prompt the model sees
//! before it replies) and up to turn `i` included with
//! `add_generation_prompt = false`. Both must be prefixes of the full
//! rendering (a template that renders earlier turns differently once more
//! turns follow, such as one that drops the reasoning of earlier replies,
//! cannot give masks and is an error). The assistant range of turn `i` is
//! the text between the two prefix lengths: the reply and whatever the
//! template writes after it before the next turn starts, so the end-of-turn
//! marker (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, an `eos_token`) is
//! in the range and the model learns to stop. This is what the
//! `{% generation %}` blocks of the training templates that Hugging Face TRL
//! ships cover, except that those sometimes also cover the start of the
//! reply's header (for example the newline after `<|im_start|>assistant`)
//! that `add_generation_prompt` already writes: that text is the prompt the
//! model is given at inference, so it is not trained on here (tests/chat.rs
//! compares the two on every TRL training template: the ends always agree,
//! the starts agree except where a block also covers such a header part:
//! `\n`, `<think>\n`, `<|start|>assistant`). Templates that
//! carry `{% generation %}` tags themselves render as usual (the tags write
//! nothing); their mask follows the same rule.

use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, Value};

/// The name the template is stored under in its environment.
const TEMPLATE: &str = "chat";

/// A chat template, compiled once, rendered for many conversations.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Where the template came from (a file name), for errors.
    origin: String,
}

/// A rendered conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The conversation as the template renders it (no generation prompt).
    pub text: String,
    /// Byte ranges of `text` that belong to assistant turns, in order and
    /// disjoint: one per assistant turn (empty only if the template writes
    /// nothing for the reply).
    pub assistant: Vec<Range<usize>>,
}

/// The special tokens a `tokenizer_config.json` names, which its template
/// reads as `bos_token` and `eos_token`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigTokens {
    /// `bos_token`.
    pub bos: Option<String>,
    /// `eos_token`.
    pub eos: Option<String>,
}

/// A special token of a `tokenizer_config.json`: a string, or an added
/// token object `{"content": ...}`.
fn config_token(json: &serde_json::Value, key: &str) -> Option<String> {
    match json.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(m) => m.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .finish()
    }
}

impl ChatTemplate {
    /// Loads a template from a file: a Hugging Face `tokenizer_config.json`
    /// when the name ends in `.json`, otherwise a Jinja template file.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the chat template {}: {e}", path.display()))?;
        Ok(Self::from_bytes(&path.display().to_string(), &bytes)?.0)
    }

    /// Loads a Jinja template file.
    pub fn from_jinja_file(path: &Path) -> Result<Self, String> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| format!("chat template {}: {e}", path.display()))?;
        Self::from_source(&path.display().to_string(), source)
    }

    /// Loads the `chat_template` of a Hugging Face `tokenizer_config.json`.
    pub fn from_tokenizer_config(path: &Path) -> Result<Self, String> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
        Ok(Self::from_config_text(&name, &text)?.0)
    }

    /// Compiles the template in a file's bytes; `name` is the file's name: a
    /// name ending in `.json` is a Hugging Face `tokenizer_config.json`,
    /// anything else a Jinja template. Also returns the configuration's
    /// special tokens (none for a Jinja file).
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<(Self, ConfigTokens), String> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| format!("the chat template {name} is not UTF-8: {e}"))?;
        if name.ends_with(".json") {
            Self::from_config_text(name, text)
        } else {
            Ok((
                Self::from_source(name, text.to_string())?,
                ConfigTokens::default(),
            ))
        }
    }

    /// The `chat_template` of a `tokenizer_config.json`'s text: a string, or
    /// a list of `{name, template}` of which the one named `default` is
    /// taken; with the file's `bos_token` and `eos_token`.
    fn from_config_text(name: &str, text: &str) -> Result<(Self, ConfigTokens), String> {
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{name}: not JSON: {e}"))?;
        let source = match json.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(list)) => {
                let mut found = None;
                for (i, entry) in list.iter().enumerate() {
                    let entry_name = entry.get("name").and_then(|n| n.as_str());
                    let template = entry.get("template").and_then(|t| t.as_str());
                    match (entry_name, template) {
                        (Some("default"), Some(t)) => found = Some(t.to_string()),
                        (Some(_), Some(_)) => {}
                        _ => {
                            return Err(format!(
                                "{name}: chat_template[{i}] is not an object with string keys \
                                 `name` and `template`"
                            ));
                        }
                    }
                }
                found.ok_or_else(|| {
                    format!("{name}: chat_template is a list with no template named `default`")
                })?
            }
            Some(_) => {
                return Err(format!(
                    "{name}: chat_template is neither a string nor a list of {{name, template}}"
                ));
            }
            None => return Err(format!("{name}: no chat_template key")),
        };
        let tokens = ConfigTokens {
            bos: config_token(&json, "bos_token"),
            eos: config_token(&json, "eos_token"),
        };
        Ok((
            Self::from_source(&format!("{name} (chat_template)"), source)?,
            tokens,
        ))
    }

    /// Compiles a template from its source; `origin` names it in errors.
    pub fn from_source(origin: &str, source: String) -> Result<Self, String> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| format!("chat template {origin}: {e}"))?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(python_method);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_filter("trim", trim_filter);
        env.add_template_owned(TEMPLATE, without_generation_tags(&source))
            .map_err(|e| format!("chat template {origin}: {}", describe(&e)))?;
        Ok(ChatTemplate {
            env,
            origin: origin.to_string(),
        })
    }

    /// Where the template came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Renders `messages` (role, content) as the template does with
    /// `add_generation_prompt` as given.
    pub fn render_text(
        &self,
        messages: &[(String, String)],
        add_generation_prompt: bool,
        bos: &str,
        eos: &str,
    ) -> Result<String, String> {
        let template = self
            .env
            .get_template(TEMPLATE)
            .map_err(|e| format!("chat template {}: {}", self.origin, describe(&e)))?;
        let list: Vec<Value> = messages
            .iter()
            .map(|(role, content)| {
                Value::from_object(Message {
                    role: Value::from(role.as_str()),
                    content: Value::from(content.as_str()),
                })
            })
            .collect();
        let ctx = minijinja::context! {
            messages => list,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos,
            eos_token => eos,
        };
        template
            .render(ctx)
            .map_err(|e| format!("chat template {}: {}", self.origin, describe(&e)))
    }

    /// Renders a conversation and finds the byte ranges of its assistant
    /// turns (see the module documentation for the rule). Errors say what
    /// went wrong; the caller adds the row.
    pub fn render(
        &self,
        messages: &[(String, String)],
        bos: &str,
        eos: &str,
    ) -> Result<Rendered, String> {
        let text = self.render_text(messages, false, bos, eos)?;
        let mut assistant = Vec::new();
        let mut last_end = 0;
        for (i, (role, _)) in messages.iter().enumerate() {
            if role != "assistant" {
                continue;
            }
            let before = self.render_text(&messages[..i], true, bos, eos)?;
            let after = self.render_text(&messages[..=i], false, bos, eos)?;
            for (prefix, what) in [
                (&before, "with the generation prompt"),
                (&after, "without the generation prompt"),
            ] {
                if !text.starts_with(prefix.as_str()) {
                    return Err(format!(
                        "chat template {}: the conversation up to message {i} \
                         ({what}) is not a prefix of the whole conversation: \
                         the template does not render conversations incrementally, \
                         so the assistant mask cannot be derived",
                        self.origin
                    ));
                }
            }
            if before.len() > after.len() || before.len() < last_end {
                return Err(format!(
                    "chat template {}: the reply of message {i} does not follow the \
                     text before it, so the assistant mask cannot be derived",
                    self.origin
                ));
            }
            assistant.push(before.len()..after.len());
            last_end = after.len();
        }
        Ok(Rendered { text, assistant })
    }
}

/// Replaces the `{% generation %}` / `{% endgeneration %}` tags (a
/// `transformers` extension that marks assistant output, shipped by some
/// models and by TRL's training templates) with a block that does nothing
/// and has the same whitespace control, so the text renders as jinja2
/// renders it. The mask still follows the rule of the module documentation.
fn without_generation_tags(source: &str) -> String {
    static TAG: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = TAG.get_or_init(|| {
        regex::Regex::new(r"\{%([-+]?)\s*(end)?generation\s*([-+]?)%\}").expect("a valid pattern")
    });
    re.replace_all(source, |c: &regex::Captures| {
        let tag = if c.get(2).is_some() {
            "endif"
        } else {
            "if true"
        };
        format!("{{%{} {} {}%}}", &c[1], tag, &c[3])
    })
    .into_owned()
}

/// An error with its cause chain, on one line.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let _ = write!(s, ": {cause}");
        source = cause.source();
    }
    s
}

/// One message: a map of `role` then `content`, in that order (as the
/// Python dict a caller of `apply_chat_template` passes).
#[derive(Debug)]
struct Message {
    role: Value,
    content: Value,
}

impl Object for Message {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "role" => Some(self.role.clone()),
            "content" => Some(self.content.clone()),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["role", "content"])
    }
}

/// `raise_exception(msg)`: the template rejects the conversation.
fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("the template raised an exception: {msg}"),
    ))
}

/// Python's `str.isspace` for one character: Unicode white space and the
/// four ASCII separators U+001C to U+001F.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The `trim` filter as jinja2 has it: Python's `str.strip(chars)`.
fn trim_filter(s: &str, chars: Option<&str>) -> String {
    strip(s, chars, true, true)
}

fn strip(s: &str, chars: Option<&str>, left: bool, right: bool) -> String {
    let test = |c: char| match chars {
        Some(set) => set.contains(c),
        None => py_space(c),
    };
    let mut out = s;
    if left {
        out = out.trim_start_matches(test);
    }
    if right {
        out = out.trim_end_matches(test);
    }
    out.to_string()
}

/// Python methods on values: `strip`, `lstrip`, `rstrip` and `split`
/// without arguments here, with Python's white space; the others through
/// `minijinja_contrib::pycompat`.
fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let chars = match args {
            [] => None,
            [a] if a.is_none() => None,
            [a] => a.as_str(),
            _ => {
                return minijinja_contrib::pycompat::unknown_method_callback(
                    state, value, method, args,
                );
            }
        };
        let whitespace_only = chars.is_none();
        match method {
            "strip" if args.len() <= 1 && (whitespace_only || args[0].as_str().is_some()) => {
                return Ok(Value::from(strip(s, chars, true, true)));
            }
            "lstrip" if args.len() <= 1 && (whitespace_only || args[0].as_str().is_some()) => {
                return Ok(Value::from(strip(s, chars, true, false)));
            }
            "rstrip" if args.len() <= 1 && (whitespace_only || args[0].as_str().is_some()) => {
                return Ok(Value::from(strip(s, chars, false, true)));
            }
            "split" if whitespace_only => {
                return Ok(Value::from(
                    s.split(py_space)
                        .filter(|p| !p.is_empty())
                        .map(Value::from)
                        .collect::<Vec<_>>(),
                ));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `tojson` as `transformers` defines it: Python's `json.dumps` with
/// `ensure_ascii=False` unless asked, and the `indent`, `separators` and
/// `sort_keys` options.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let mut opts = JsonOptions {
        ensure_ascii: false,
        indent: None,
        item_sep: ", ".to_string(),
        key_sep: ": ".to_string(),
        sort_keys: false,
    };
    // Positional arguments follow json.dumps' order in transformers' filter:
    // ensure_ascii, indent, separators, sort_keys.
    let positional = &args.0;
    let get = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        let kw: Option<Value> = kwargs.get(name)?;
        Ok(kw.or_else(|| positional.get(i).cloned()))
    };
    if let Some(v) = get(0, "ensure_ascii")? {
        opts.ensure_ascii = v.is_true();
    }
    let indent = get(1, "indent")?;
    if let Some(v) = &indent {
        if let Some(s) = v.as_str() {
            opts.indent = Some(s.to_string());
        } else if let Some(n) = v.as_i64() {
            opts.indent = Some(" ".repeat(n.max(0) as usize));
        } else if !v.is_none() {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: indent is neither an integer nor a string",
            ));
        }
    }
    if opts.indent.is_some() {
        opts.item_sep = ",".to_string();
    }
    if let Some(v) = get(2, "separators")?.filter(|v| !v.is_none()) {
        let parts: Vec<Value> = v.try_iter()?.collect();
        match parts.as_slice() {
            [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                opts.item_sep = a.as_str().unwrap_or_default().to_string();
                opts.key_sep = b.as_str().unwrap_or_default().to_string();
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators is not a pair of strings",
                ));
            }
        }
    }
    if let Some(v) = get(3, "sort_keys")? {
        opts.sort_keys = v.is_true();
    }
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, &opts, 0)?;
    Ok(Value::from(out))
}

struct JsonOptions {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn newline(out: &mut String, opts: &JsonOptions, depth: usize) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn write_json(out: &mut String, v: &Value, opts: &JsonOptions, depth: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = v.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Ok(f) = f64::try_from(v.clone()) {
                if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else if f == f.trunc() && f.abs() < 1e16 {
                    // Python's repr of a float: `2.0`. (Outside 1e-4..1e16
                    // Python switches to exponents, which Rust does not; no
                    // conversation carries floats.)
                    let _ = write!(out, "{f:.1}");
                } else {
                    let _ = write!(out, "{f}");
                }
            } else {
                let _ = write!(out, "{v}");
            }
        }
        ValueKind::String => write_json_str(out, v.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(out, opts, depth + 1);
                write_json(out, item, opts, depth + 1)?;
            }
            newline(out, opts, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(out, opts, depth + 1);
                let name = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_string(),
                    ValueKind::None => "null".to_string(),
                    ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
                    ValueKind::Number => {
                        let mut s = String::new();
                        write_json(&mut s, key, opts, 0)?;
                        s
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!("tojson: a map key of kind {} is not JSON", key.kind()),
                        ));
                    }
                };
                write_json_str(out, &name, opts.ensure_ascii);
                out.push_str(&opts.key_sep);
                write_json(out, &v.get_item(key)?, opts, depth + 1)?;
            }
            newline(out, opts, depth);
            out.push('}');
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of kind {other} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

/// A JSON string as Python's `json.dumps` writes it.
fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
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
        let config =
            br#"{"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
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
}
