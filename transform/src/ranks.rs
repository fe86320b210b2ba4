//! tiktoken-style BPE rank files (`cl100k_base.tiktoken`, ...): a token's
//! bytes in base64 and its rank per line. The file holds only the ranks;
//! the split pattern and the special tokens are the named encoding's, as
//! OpenAI's `tiktoken` defines them. Encoding runs through the `tiktoken-rs`
//! crate ([`TIKTOKEN_LIBRARY`]), the same algorithm as `tiktoken`'s.

use std::collections::HashMap;

use tiktoken_rs::CoreBPE;

/// The library and its exact version (pinned in Cargo.toml; a test checks
/// the lock file agrees).
pub const TIKTOKEN_LIBRARY: &str = "tiktoken-rs 0.12.1";

/// The encodings whose pattern and special tokens are known, by name.
pub const ENCODINGS: &[&str] = &["cl100k_base", "o200k_base", "p50k_base", "r50k_base"];

const R50K_PATTERN: &str =
    r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s";
const CL100K_PATTERN: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";
const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// The split pattern and special tokens of a named encoding.
fn encoding(name: &str) -> Option<(&'static str, Vec<(&'static str, u32)>)> {
    const END: &str = "<|endoftext|>";
    Some(match name {
        "r50k_base" | "p50k_base" => (R50K_PATTERN, vec![(END, 50256)]),
        "cl100k_base" => (
            CL100K_PATTERN,
            vec![
                (END, 100257),
                ("<|fim_prefix|>", 100258),
                ("<|fim_middle|>", 100259),
                ("<|fim_suffix|>", 100260),
                ("<|endofprompt|>", 100276),
            ],
        ),
        "o200k_base" => (
            O200K_PATTERN,
            vec![(END, 199999), ("<|endofprompt|>", 200018)],
        ),
        _ => return None,
    })
}

/// A rank file loaded for one encoding.
pub struct RankTokenizer {
    bpe: CoreBPE,
    specials: HashMap<String, u32>,
    /// `true`: text that spells a special token is that token.
    special_tokens: bool,
    max_id: u32,
}

impl RankTokenizer {
    /// Reads a rank file's bytes for the encoding `name`. A line that is
    /// not `BASE64 RANK` is an error naming the line.
    pub fn from_bytes(bytes: &[u8], name: &str, special_tokens: bool) -> Result<Self, String> {
        let (pattern, specials) = encoding(name).ok_or_else(|| {
            format!(
                "unknown tiktoken encoding {name:?}; use one of {}",
                ENCODINGS.join(", ")
            )
        })?;
        let text = std::str::from_utf8(bytes).map_err(|e| format!("not a rank file: {e}"))?;
        let mut ranks = HashMap::new();
        let mut max_id = 0;
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() {
                continue;
            }
            let bad = || format!("line {}: not `BASE64 RANK`: {:?}", i + 1, truncated(line));
            let (token, rank) = line.split_once(' ').ok_or_else(bad)?;
            let token = base64_decode(token).ok_or_else(bad)?;
            let rank: u32 = rank.parse().map_err(|_| bad())?;
            max_id = max_id.max(rank);
            ranks.insert(token, rank);
        }
        if ranks.is_empty() {
            return Err("the rank file is empty".into());
        }
        // Every byte must have a rank, or some text has no encoding.
        if let Some(b) = (0..=255u8).find(|b| !ranks.contains_key(&vec![*b])) {
            return Err(format!("the rank file has no rank for byte {b:#04x}"));
        }
        let specials: HashMap<String, u32> =
            specials.iter().map(|(t, r)| (t.to_string(), *r)).collect();
        max_id = specials.values().copied().fold(max_id, u32::max);
        let bpe = CoreBPE::new(
            ranks.into_iter().collect(),
            specials.iter().map(|(t, r)| (t.clone(), *r)).collect(),
            pattern,
        )
        .map_err(|e| format!("tiktoken encoding {name}: {e}"))?;
        Ok(RankTokenizer {
            bpe,
            specials,
            special_tokens,
            max_id,
        })
    }

    /// The id of a special token by its text.
    pub fn special_id(&self, token: &str) -> Option<u32> {
        self.specials.get(token).copied()
    }

    /// The largest id.
    pub fn max_id(&self) -> u32 {
        self.max_id
    }

    /// The ids of `text` (special tokens as the step says).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        // The library's regex engine can give up on a pathological input,
        // which it reports by panicking: that is an error for the row.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if self.special_tokens {
                self.bpe.encode_with_special_tokens(text)
            } else {
                self.bpe.encode_ordinary(text)
            }
        }))
        .map_err(|_| "the tiktoken encoder gave up on this text (regex backtracking limit)".into())
    }

    /// Each token's byte length, in order (the tokens' bytes concatenate to
    /// the text's).
    pub fn token_lengths(&self, ids: &[u32]) -> Result<Vec<usize>, String> {
        ids.iter()
            .map(|&id| {
                self.bpe
                    .decode_bytes(&[id])
                    .map(|b| b.len())
                    .map_err(|e| format!("token {id}: {e}"))
            })
            .collect()
    }
}

fn truncated(line: &str) -> &str {
    crate::text::truncate_utf8(line, 60)
}

/// Standard base64 with padding, or `None`.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (k, quad) in bytes.chunks(4).enumerate() {
        let last = k + 1 == bytes.len() / 4;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&three[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_the_standard() {
        assert_eq!(base64_decode("IQ==").as_deref(), Some(&b"!"[..]));
        assert_eq!(base64_decode("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("aGV5").as_deref(), Some(&b"hey"[..]));
        assert_eq!(base64_decode("IGhlbGxv").as_deref(), Some(&b" hello"[..]));
        assert_eq!(base64_decode("a=b="), None);
        assert_eq!(base64_decode("abc"), None);
        assert_eq!(base64_decode("ab*="), None);
    }

    /// A rank file with the 256 bytes and a few merges.
    fn small_file() -> String {
        let mut lines = Vec::new();
        let enc = |b: &[u8]| {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut s = String::new();
            for chunk in b.chunks(3) {
                let n = chunk.iter().fold(0u32, |n, &c| (n << 8) | u32::from(c))
                    << (8 * (3 - chunk.len()));
                for k in 0..=chunk.len() {
                    s.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
                }
                s.push_str(&"=".repeat(3 - chunk.len()));
            }
            s
        };
        for b in 0..=255u8 {
            lines.push(format!("{} {b}", enc(&[b])));
        }
        lines.push(format!("{} 256", enc(b"he")));
        lines.push(format!("{} 257", enc(b"hel")));
        lines.join("\n")
    }

    #[test]
    fn ranks_encode_and_bad_files_name_the_line() {
        let t = RankTokenizer::from_bytes(small_file().as_bytes(), "r50k_base", false).unwrap();
        assert_eq!(t.encode("hel h").unwrap(), vec![257, 32, 104]);
        assert_eq!(t.special_id("<|endoftext|>"), Some(50256));
        assert_eq!(t.max_id(), 50256);
        // Special tokens off: the text is ordinary bytes.
        let ids = t.encode("<|endoftext|>").unwrap();
        assert!(ids.len() > 1 && !ids.contains(&50256));
        let on = RankTokenizer::from_bytes(small_file().as_bytes(), "r50k_base", true).unwrap();
        assert_eq!(on.encode("<|endoftext|>").unwrap(), vec![50256]);
        assert_eq!(t.token_lengths(&[257, 32]).unwrap(), vec![3, 1]);

        let bad = format!("{}\nnot-base64 12", small_file());
        let e = RankTokenizer::from_bytes(bad.as_bytes(), "r50k_base", false)
            .err()
            .unwrap();
        assert!(e.contains("line 259"), "{e}");
        let e = RankTokenizer::from_bytes(b"IQ== 0", "r50k_base", false)
            .err()
            .unwrap();
        assert!(e.contains("no rank for byte 0x00"), "{e}");
        let e = RankTokenizer::from_bytes(b"IQ== 0", "gpt9", false)
            .err()
            .unwrap();
        assert!(
            e.contains("unknown tiktoken encoding") && e.contains("cl100k_base"),
            "{e}"
        );
    }

    #[test]
    fn the_lock_file_has_the_recorded_library_version() {
        crate::test_support::assert_locked(TIKTOKEN_LIBRARY);
    }
}
