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
//! nothing); their mask follows the same rule.//!
//! Here: loading and rendering templates and deriving the mask;
//! [`python`]: the Python built-ins and string methods templates call;
//! [`json`]: the `tojson` filter, written as Python's `json.dumps`.

mod json;
mod python;
#[cfg(test)]
mod tests;

use json::tojson;
use python::{python_method, raise_exception, trim_filter};

use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr};
use minijinja::{AutoEscape, Environment, Error, Value};

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
    #[allow(
        clippy::expect_used,
        reason = "a constant pattern: it compiles on every input or on none, and the \
                  generation-tag tests run it"
    )]
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
