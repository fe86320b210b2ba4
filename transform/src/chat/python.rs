//! The Python side of templates: `raise_exception`, the `trim` filter and
//! the string methods (`.strip()`, `.split()`, ...), with Python's notion of
//! white space (`str.isspace`).

use minijinja::{Error, ErrorKind, State, Value};

/// `raise_exception(msg)`: the template rejects the conversation.
pub(super) fn raise_exception(msg: String) -> Result<Value, Error> {
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
pub(super) fn trim_filter(s: &str, chars: Option<&str>) -> String {
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
pub(super) fn python_method(
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
