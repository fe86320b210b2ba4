//! The `tojson` filter: JSON written as Python's `json.dumps` writes it.

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Error, ErrorKind, Value};
use std::fmt::Write as _;

/// `tojson` as `transformers` defines it: Python's `json.dumps` with
/// `ensure_ascii=False` unless asked, and the `indent`, `separators` and
/// `sort_keys` options.
pub(super) fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
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
