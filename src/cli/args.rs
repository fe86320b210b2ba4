//! Parsers of argument values that clap does not know: `KEY=VALUE` storage
//! options, byte sizes, and the bounded counts and times whose limits the
//! error messages state.

/// `--storage KEY=VALUE`.
pub fn parse_storage_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!(
            "{s:?} is not KEY=VALUE (for example endpoint=http://127.0.0.1:8333)"
        )),
    }
}

/// A byte size (`2GiB`, `500MB`), read as every size in tessera is
/// ([`tessera_reader::durable::parse_size`]).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    tessera_reader::durable::parse_size(s)
}

/// Most build threads: more would only add memory and scheduling overhead
/// (each one also gets a query partition), and absurd counts hang the start.
const MAX_BUILD_THREADS: usize = 1024;

/// A whole number from 1 to `max`, or an error naming it `what`.
fn count_arg(s: &str, max: usize, what: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a {what} from 1 to {max}")),
    }
}

pub fn parse_threads_arg(s: &str) -> Result<usize, String> {
    count_arg(s, MAX_BUILD_THREADS, "thread count")
}

/// Deepest prefetch: each batch ahead is a buffer of `batch_size x stride`
/// bytes per thread, so more only costs memory.
const MAX_PREFETCH: usize = 1024;

pub fn parse_prefetch_arg(s: &str) -> Result<usize, String> {
    count_arg(s, MAX_PREFETCH, "prefetch depth")
}

/// Longest simulated step: a minute per batch is already far slower than
/// any training step.
const MAX_STEP_MS: f64 = 60_000.0;

pub fn parse_step_ms_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(ms) if (0.0..=MAX_STEP_MS).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{s:?} is not a step time in milliseconds from 0 to {MAX_STEP_MS}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_options_split_at_the_first_equals_sign() {
        assert_eq!(
            parse_storage_option(" endpoint =http://h:1/?a=b").unwrap(),
            ("endpoint".to_string(), "http://h:1/?a=b".to_string())
        );
        assert_eq!(
            parse_storage_option("allow_http=").unwrap(),
            ("allow_http".to_string(), String::new())
        );
        for bad in ["endpoint", "=x", " =x", ""] {
            let e = parse_storage_option(bad).unwrap_err();
            assert!(e.contains("KEY=VALUE"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn counts_and_times_are_taken_within_their_bounds_only() {
        assert_eq!(parse_threads_arg("1"), Ok(1));
        assert_eq!(parse_threads_arg(" 1024 "), Ok(MAX_BUILD_THREADS));
        for bad in ["0", "1025", "-1", "2.5", "many", ""] {
            assert!(
                parse_threads_arg(bad).unwrap_err().contains("1 to 1024"),
                "{bad:?}"
            );
        }
        assert_eq!(parse_prefetch_arg("1024"), Ok(MAX_PREFETCH));
        for bad in ["0", "1025", "x"] {
            assert!(
                parse_prefetch_arg(bad).unwrap_err().contains("1 to 1024"),
                "{bad:?}"
            );
        }
        assert_eq!(parse_step_ms_arg("0"), Ok(0.0));
        assert_eq!(parse_step_ms_arg("2.5"), Ok(2.5));
        assert_eq!(parse_step_ms_arg("60000"), Ok(MAX_STEP_MS));
        for bad in ["-0.5", "60000.5", "NaN", "inf", "soon"] {
            assert!(
                parse_step_ms_arg(bad).unwrap_err().contains("0 to 60000"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size_arg("1KiB"), Ok(1024));
        assert_eq!(parse_size_arg("2GiB"), Ok(2 << 30));
        assert!(parse_size_arg("2XB").is_err());
        assert!(parse_size_arg("").is_err());
    }
}
