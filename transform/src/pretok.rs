//! A faster pre-tokenizer for the common byte-level BPE files, with the
//! same splits as the `tokenizers` library's.
//!
//! In byte-level BPE tokenizers (GPT-2, Llama 3, DeepSeek-V3, ...) most of
//! the encoding time goes to the pre-tokenizer's regular expression, which
//! the library runs with Oniguruma because the patterns end in a look-ahead,
//! `\s+(?!\S)|\s+`. Everything before that suffix is a regular language, so
//! here the pattern runs on the `regex` crate's automata as
//! `PREFIX|\s+`, and a match of the last alternative is then cut as the
//! look-ahead would cut it: a run of whitespace followed by a non-space
//! gives up its last character (the next word takes it as its leading
//! space) when it has more than one.
//!
//! Why that is the same match: both patterns find a match at the same
//! leftmost position (`\s+(?!\S)` matches only where `\s+` does), and at that
//! position the alternatives are tried in order by both engines (the
//! `regex` crate's leftmost-first semantics are a backtracking engine's
//! preference order). When none of `PREFIX`'s alternatives matches there,
//! the original takes `\s+(?!\S)`: the greedy run, or, when a non-space
//! follows, the run less one character, failing only for a run of one
//! character, which `\s+` then takes whole.
//!
//! Only patterns of that shape, without anchors or word boundaries (their
//! meaning would change on a substring), and a `Sequence` of such `Split`s
//! and a `ByteLevel` without its own regex, or a `ByteLevel` with its
//! GPT-2 regex and no added prefix space, take this path; any other
//! pre-tokenizer is the library's own. python/tests/test_tokenize.py checks
//! the ids against the Python `tokenizers` package on real tokenizer files.

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::tokenizer::pattern::Pattern;
use tokenizers::{Offsets, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior};

/// The look-ahead suffix the fast path knows how to cut.
const LOOKAHEAD_SUFFIX: &str = r"|\s+(?!\S)|\s+";
/// The pattern of a `ByteLevel` pre-tokenizer with `use_regex` (GPT-2's).
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// A tokenizer file's pre-tokenizer: the fast splits when its shape allows,
/// else the library's own.
#[derive(Clone, Debug)]
pub enum PreTok {
    /// The steps, in order.
    Fast(Vec<FastStep>),
    /// Splits followed by a byte mapping, the shape of byte-level BPE
    /// files, which [`PreTok::direct`] hands to a caller that does the
    /// steps itself.
    Direct {
        /// The split patterns, in order.
        splits: Vec<FastPattern>,
        /// The byte mapping (a `ByteLevel` without regex or prefix space).
        bytes: PreTokenizerWrapper,
    },
    /// The library's pre-tokenizer, as the file describes it.
    Library(PreTokenizerWrapper),
}

/// One step of the fast path.
#[derive(Clone, Debug)]
pub enum FastStep {
    /// A `Split` with `behavior: Isolated`, `invert: false`.
    Split(FastPattern),
    /// A `ByteLevel` that only maps bytes to characters (no regex, no
    /// prefix space), run by the library.
    Bytes(PreTokenizerWrapper),
    /// Any other step, run by the library.
    Library(PreTokenizerWrapper),
}

impl PreTok {
    /// When the steps are splits followed by a byte mapping (the shape of
    /// byte-level BPE files), the split patterns: a text's pieces are then
    /// [`split_pieces`] of it, each mapped by [`byte_chars`], with no
    /// `PreTokenizedString` in between.
    pub fn direct(&self) -> Option<&[FastPattern]> {
        match self {
            PreTok::Direct { splits, .. } => Some(splits),
            _ => None,
        }
    }
}

/// One thread's search state for a list of split patterns: the regex
/// engine's cache of each, and its lazy DFA's. A search without one takes a cache from the
/// engine's shared pool and gives it back, a lock for every thread but the
/// first (measured: 5% of tokenizing with 2 threads).
pub struct Searchers(Vec<Caches>);

/// One pattern's search caches: the engine's, and its forward lazy DFA's
/// for the anchored searches done here.
pub struct Caches {
    meta: regex_automata::meta::Cache,
    dfa: Option<regex_automata::hybrid::dfa::Cache>,
}

impl Searchers {
    /// Fresh caches for `patterns`.
    pub fn new(patterns: &[FastPattern]) -> Searchers {
        Searchers(
            patterns
                .iter()
                .map(|p| Caches {
                    meta: p.all.create_cache(),
                    dfa: p.dfa.as_ref().map(|d| d.create_cache()),
                })
                .collect(),
        )
    }
}

/// Appends the pieces of `text` after each split pattern in turn (each
/// piece of one pattern is split by the next), empty pieces left out;
/// `searchers` are this thread's, made for `patterns`.
pub fn split_pieces<'a>(
    patterns: &[FastPattern],
    searchers: &mut Searchers,
    text: &'a str,
    out: &mut Vec<&'a str>,
) {
    out.clear();
    out.push(text);
    let mut next = Vec::new();
    for (pattern, cache) in patterns.iter().zip(searchers.0.iter_mut()) {
        next.clear();
        for piece in out.iter() {
            pattern.each_split(Some(&mut *cache), piece, |a, b, _| next.push(&piece[a..b]));
        }
        std::mem::swap(out, &mut next);
    }
}

/// The characters byte-level BPE writes bytes as (GPT-2's table): the
/// printable bytes `!`..`~`, `\u{a1}`..`\u{ac}` and `\u{ae}`..`\u{ff}` stand for
/// themselves; the others, in byte order, for `\u{100}` onwards.
pub fn byte_chars() -> &'static [char; 256] {
    static TABLE: std::sync::OnceLock<[char; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let code = if printable {
                u32::from(b)
            } else {
                next += 1;
                next - 1
            };
            table[usize::from(b)] = char::from_u32(code).unwrap_or('\0');
        }
        table
    })
}

/// `piece`'s bytes written as [`byte_chars`], into `out`.
pub fn map_bytes(piece: &str, out: &mut String) {
    let table = byte_chars();
    out.clear();
    out.extend(piece.bytes().map(|b| table[usize::from(b)]));
}

/// A split pattern run on the `regex` crate (see the module documentation).
#[derive(Clone, Debug)]
pub struct FastPattern {
    /// `PREFIX|\s+`, or the whole pattern when it has no look-ahead suffix.
    all: regex_automata::meta::Regex,
    /// Per ASCII byte: whether a match can start with it. A piece of ASCII
    /// bytes none of which can start a match has no match, and is not
    /// searched (DeepSeek-V3's digit and CJK splits, on English text).
    ascii_starts: [bool; 128],
    /// `^(?:PREFIX)`, when the pattern had the suffix.
    prefix: Option<regex::Regex>,
    /// `all`'s forward lazy DFA, for anchored searches without the
    /// engine's dispatch (most pieces are a few bytes, so the cost of a
    /// search is mostly its setup).
    dfa: Option<Box<regex_automata::hybrid::dfa::DFA>>,
}

impl FastPattern {
    /// The fast form of `pattern`, or `None` when it cannot be run exactly.
    pub fn new(pattern: &str) -> Option<FastPattern> {
        if has_anchor(pattern.strip_suffix(LOOKAHEAD_SUFFIX).unwrap_or(pattern)) {
            return None;
        }
        let (all, prefix) = match pattern.strip_suffix(LOOKAHEAD_SUFFIX) {
            Some(prefix) => (
                format!(r"{prefix}|\s+"),
                Some(regex::Regex::new(&format!("^(?:{prefix})")).ok()?),
            ),
            // A pattern without look-around compiles as it is (the `regex`
            // crate refuses look-around).
            None => (pattern.to_string(), None),
        };
        let dfa = regex_automata::hybrid::dfa::DFA::new(&all)
            .ok()
            .map(Box::new);
        Some(FastPattern {
            ascii_starts: ascii_starts(dfa.as_deref()),
            dfa,
            all: regex_automata::meta::Regex::new(&all).ok()?,
            prefix,
        })
    }

    /// Calls `f(start, end, is_match)` for each non-empty split of `text`
    /// in order: the matches, cut by the look-ahead, and the text between;
    /// searching with `cache` (the engine's pool without one).
    fn each_split(
        &self,
        mut cache: Option<&mut Caches>,
        text: &str,
        mut f: impl FnMut(usize, usize, bool),
    ) {
        if text
            .bytes()
            .all(|b| b < 128 && !self.ascii_starts[usize::from(b)])
        {
            if !text.is_empty() {
                f(0, text.len(), false);
            }
            return;
        }
        let mut prev = 0;
        let mut at = 0;
        while at < text.len() {
            let Some(m) = self.find_at(cache.as_deref_mut(), text, at) else {
                break;
            };
            if m.start() == m.end() {
                // An empty match splits nothing; step over one character.
                at = m.end() + text[m.end()..].chars().next().map_or(1, char::len_utf8);
                continue;
            }
            let end = self.cut(text, m.start(), m.end());
            if prev != m.start() {
                f(prev, m.start(), false);
            }
            f(m.start(), end, true);
            prev = end;
            at = end;
        }
        if prev != text.len() {
            f(prev, text.len(), false);
        }
    }

    /// The leftmost-first match in `text` that starts at `at` or later.
    /// Most pieces start where the last one ended, so a match anchored at
    /// `at` is tried first: it needs only the forward automaton, where an
    /// unanchored search also runs a reverse one to find the start. When
    /// a match can start at `at` it is the unanchored search's match (the
    /// leftmost start, then the same preference among matches there).
    fn find_at(
        &self,
        mut cache: Option<&mut Caches>,
        text: &str,
        at: usize,
    ) -> Option<regex_automata::Match> {
        use regex_automata::{Anchored, Input};
        if let (Some(dfa), Some(Caches { dfa: Some(c), .. })) = (&self.dfa, cache.as_deref_mut())
            && let Ok(Some(end)) = anchored_end(dfa, c, text, at)
            && end > at
        {
            return Some(regex_automata::Match::must(0, at..end));
        }
        let input = Input::new(text).range(at..);
        let mut find = |input: &Input| match cache.as_deref_mut() {
            Some(c) => self.all.search_with(&mut c.meta, input),
            None => self.all.search(input),
        };
        match find(&input.clone().anchored(Anchored::Yes)) {
            Some(m) if !m.is_empty() => Some(m),
            _ => find(&input),
        }
    }

    /// The end of the match at `start..end` once the look-ahead has cut it.
    fn cut(&self, text: &str, start: usize, end: usize) -> usize {
        let Some(prefix) = &self.prefix else {
            return end;
        };
        let run = &text[start..end];
        // Only a whole run of whitespace followed by more text is cut, and
        // only when `\s+` (not one of the prefix's alternatives) matched.
        if end == text.len() || !run.chars().all(char::is_whitespace) {
            return end;
        }
        let Some(last) = run.chars().next_back() else {
            return end;
        };
        if run.len() == last.len_utf8() || prefix.is_match(run) {
            return end;
        }
        end - last.len_utf8()
    }
}

/// The end of the leftmost-first match of `dfa` anchored at `at` in
/// `text`, if there is one (it may be empty); an error when the lazy DFA
/// cannot answer (the caller then asks the engine). The DFA reports a
/// match one byte late: a match state entered on the byte at `i` means a
/// match ending at `i`; the search runs until the DFA dies, and the last
/// match seen is the leftmost-first one.
fn anchored_end(
    dfa: &regex_automata::hybrid::dfa::DFA,
    cache: &mut regex_automata::hybrid::dfa::Cache,
    text: &str,
    at: usize,
) -> Result<Option<usize>, ()> {
    use regex_automata::{Anchored, Input};
    let input = Input::new(text).range(at..).anchored(Anchored::Yes);
    let mut sid = dfa.start_state_forward(cache, &input).map_err(|_| ())?;
    let mut last = None;
    for (i, &b) in text.as_bytes().iter().enumerate().skip(at) {
        sid = dfa.next_state(cache, sid, b).map_err(|_| ())?;
        if sid.is_tagged() {
            if sid.is_match() {
                last = Some(i);
            } else if sid.is_dead() {
                return Ok(last);
            } else if sid.is_quit() || sid.is_unknown() {
                return Err(());
            }
        }
    }
    sid = dfa.next_eoi_state(cache, sid).map_err(|_| ())?;
    if sid.is_match() {
        last = Some(text.len());
    } else if sid.is_quit() || sid.is_unknown() {
        return Err(());
    }
    Ok(last)
}

/// Per ASCII byte, whether a match of the pattern of `dfa` (its forward
/// lazy DFA) can start with it: the byte does not take the DFA from its
/// anchored start to the dead state (a non-empty match starting with it
/// would leave the DFA alive). Every byte, when there is no DFA or it
/// gives up.
fn ascii_starts(dfa: Option<&regex_automata::hybrid::dfa::DFA>) -> [bool; 128] {
    use regex_automata::{Anchored, Input};
    let all = [true; 128];
    let Some(dfa) = dfa else {
        return all;
    };
    let mut cache = dfa.create_cache();
    let Ok(start) = dfa.start_state_forward(&mut cache, &Input::new("").anchored(Anchored::Yes))
    else {
        return all;
    };
    let mut starts = all;
    for (b, slot) in starts.iter_mut().enumerate() {
        match dfa.next_state(&mut cache, start, b as u8) {
            Ok(next) => *slot = !next.is_dead(),
            Err(_) => return all,
        }
    }
    starts
}

/// Whether `pattern` has an anchor or a word boundary outside its
/// character classes (`^`, `$`, `\b`, `\B`, `\A`, `\z`, `\Z`, `\G`): they
/// mean something else on the substring the prefix check reads.
fn has_anchor(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    let mut class = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('b' | 'B' | 'A' | 'z' | 'Z' | 'G') if class == 0 => return true,
                _ => {}
            },
            '[' => {
                class += 1;
                // A `]` or `^]` right after the opening bracket is literal.
                let rest = chars.as_str();
                let skip = if rest.starts_with("^]") {
                    2
                } else {
                    usize::from(rest.starts_with(']'))
                };
                for _ in 0..skip {
                    chars.next();
                }
            }
            ']' if class > 0 => class -= 1,
            '^' | '$' if class == 0 => return true,
            _ => {}
        }
    }
    false
}

impl Pattern for &FastPattern {
    fn find_matches(&self, inside: &str) -> tokenizers::Result<Vec<(Offsets, bool)>> {
        if inside.is_empty() {
            return Ok(vec![((0, 0), false)]);
        }
        let mut splits = Vec::new();
        self.each_split(None, inside, |a, b, m| splits.push(((a, b), m)));
        Ok(splits)
    }
}

impl PreTokenizer for PreTok {
    fn pre_tokenize(&self, pretokenized: &mut PreTokenizedString) -> tokenizers::Result<()> {
        match self {
            PreTok::Library(p) => p.pre_tokenize(pretokenized),
            PreTok::Direct { splits, bytes } => {
                for pattern in splits {
                    pretokenized.split(|_, normalized| {
                        normalized.split(pattern, SplitDelimiterBehavior::Isolated)
                    })?;
                }
                bytes.pre_tokenize(pretokenized)
            }
            PreTok::Fast(steps) => {
                for step in steps {
                    match step {
                        FastStep::Split(pattern) => pretokenized.split(|_, normalized| {
                            normalized.split(pattern, SplitDelimiterBehavior::Isolated)
                        })?,
                        FastStep::Bytes(p) | FastStep::Library(p) => {
                            p.pre_tokenize(pretokenized)?
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

impl<'de> Deserialize<'de> for PreTok {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        if let Some(mut steps) = fast_steps(&value) {
            // Splits then a byte mapping: the direct form.
            let direct = matches!(steps.last(), Some(FastStep::Bytes(_)))
                && steps[..steps.len() - 1]
                    .iter()
                    .all(|s| matches!(s, FastStep::Split(_)));
            if let (true, Some(FastStep::Bytes(bytes))) = (direct, steps.pop()) {
                let splits = steps
                    .into_iter()
                    .filter_map(|s| match s {
                        FastStep::Split(p) => Some(p),
                        _ => None,
                    })
                    .collect();
                return Ok(PreTok::Direct { splits, bytes });
            }
            return Ok(PreTok::Fast(steps));
        }
        PreTokenizerWrapper::deserialize(value)
            .map(PreTok::Library)
            .map_err(serde::de::Error::custom)
    }
}

/// The fast steps of a pre-tokenizer's JSON, or `None` when some part of it
/// has no exact fast form (or nothing would be faster).
fn fast_steps(value: &Value) -> Option<Vec<FastStep>> {
    let mut steps = Vec::new();
    let list: Vec<&Value> = match value.get("type")?.as_str()? {
        "Sequence" => value.get("pretokenizers")?.as_array()?.iter().collect(),
        _ => vec![value],
    };
    for v in list {
        match v.get("type")?.as_str()? {
            "Split" => {
                let pattern = v.get("pattern")?.get("Regex")?.as_str()?;
                let isolated = v.get("behavior")?.as_str()? == "Isolated";
                let invert = v.get("invert").and_then(Value::as_bool).unwrap_or(false);
                if !isolated || invert {
                    return None;
                }
                steps.push(FastStep::Split(FastPattern::new(pattern)?));
            }
            "ByteLevel" => {
                let flag =
                    |k: &str, default: bool| v.get(k).and_then(Value::as_bool).unwrap_or(default);
                // A prefix space is added before the regex splits: keep the
                // library's step whole then.
                if flag("add_prefix_space", true) {
                    steps.push(FastStep::Library(
                        PreTokenizerWrapper::deserialize(v.clone()).ok()?,
                    ));
                    continue;
                }
                if flag("use_regex", true) {
                    steps.push(FastStep::Split(FastPattern::new(GPT2_PATTERN)?));
                }
                let byte_level = ByteLevel::new(false, flag("trim_offsets", true), false);
                steps.push(FastStep::Bytes(PreTokenizerWrapper::ByteLevel(byte_level)));
            }
            _ => steps.push(FastStep::Library(
                PreTokenizerWrapper::deserialize(v.clone()).ok()?,
            )),
        }
    }
    steps
        .iter()
        .any(|s| matches!(s, FastStep::Split(_)))
        .then_some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Splits = Vec<(Offsets, bool)>;

    /// The splits of `text` by the fast pattern and by Oniguruma.
    fn both(pattern: &str, text: &str) -> (Splits, Splits) {
        let fast = FastPattern::new(pattern).expect("fast form");
        let sys = tokenizers::utils::SysRegex::new(pattern).expect("onig");
        (
            (&fast).find_matches(text).expect("fast"),
            (&sys).find_matches(text).expect("onig"),
        )
    }

    #[test]
    fn whitespace_runs_split_as_the_lookahead_splits_them() {
        let texts = [
            "a  b",
            "a b",
            "a   b  ",
            "  lead",
            "tail  ",
            "x\t\t y",
            "one\n\n  two",
            "\u{3000}\u{3000}x",
            " \u{a0} y",
            "",
            " ",
            "  ",
            "a\r\n\r\n b",
            "中文  テキスト 12345",
            "it's  we'll 'd",
            "f(x)  =  y;\n    return",
            "😀  😀",
            "a \n b",
        ];
        for pattern in [
            GPT2_PATTERN,
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            r"\p{N}{1,3}",
        ] {
            for text in texts {
                let (fast, onig) = both(pattern, text);
                assert_eq!(fast, onig, "pattern {pattern:?}, text {text:?}");
            }
        }
    }

    #[test]
    fn ascii_bytes_that_cannot_start_a_match_are_known() {
        let starts = |p: &str| {
            let f = FastPattern::new(p).expect("fast form");
            (0u8..128)
                .filter(|&b| f.ascii_starts[usize::from(b)])
                .map(char::from)
                .collect::<String>()
        };
        assert_eq!(starts(r"\p{N}{1,3}"), "0123456789");
        assert_eq!(starts("[一-龥\u{3040}-ゟ゠-ヿ]+"), "");
        assert_eq!(starts(r"[a-c]+|x\d"), "abcx");
        // The look-ahead form: whitespace starts its `\s+`.
        assert_eq!(starts(r"[a-c]+|\s+(?!\S)|\s+"), "\t\n\u{b}\u{c}\r abc");
    }

    /// Random texts over the characters the patterns treat differently
    /// (kinds of whitespace, letters of several scripts and cases, marks,
    /// digits, punctuation, symbols, apostrophes, emoji), split by both
    /// engines: a deterministic generator, so a failure reproduces.
    #[test]
    fn random_texts_split_as_oniguruma_splits_them() {
        const ALPHABET: &[char] = &[
            ' ', ' ', ' ', '\t', '\n', '\r', '\u{a0}', '\u{3000}', '\u{2028}', '\u{85}', 'a', 'b',
            'Z', 'é', 'ß', 'ſ', 'K', '\u{212a}', 'ǅ', 'ʰ', '中', 'テ', 'ー', 'ぁ', '한', 'ж', 'ا',
            '\u{301}', '\u{200d}', '0', '7', '٣', '½', '\'', '’', '.', ',', '!', '-', '/', '$',
            '€', '+', '<', '|', '😀', '🇫', '\u{fe0f}', 's', 't', 'l', 'd', 'v', 'e', 'r', 'm', 'S',
            'T',
        ];
        let patterns = [
            GPT2_PATTERN,
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            // DeepSeek-V3's first two splits match only some of the text:
            // the searches for the next match run between pieces.
            r"\p{N}{1,3}",
            "[一-龥\u{3040}-ゟ゠-ヿ]+",
        ];
        let compiled: Vec<(FastPattern, tokenizers::utils::SysRegex)> = patterns
            .iter()
            .map(|p| {
                (
                    FastPattern::new(p).expect("fast form"),
                    tokenizers::utils::SysRegex::new(p).expect("onig"),
                )
            })
            .collect();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            // Half the texts ASCII only: the pieces no search is run on.
            let ascii = next() % 2 == 0;
            let text: String = (0..len)
                .map(|_| {
                    loop {
                        let c = ALPHABET[(next() % ALPHABET.len() as u64) as usize];
                        if !ascii || c.is_ascii() {
                            break c;
                        }
                    }
                })
                .collect();
            for (k, (fast, sys)) in compiled.iter().enumerate() {
                let a = fast.find_matches(&text).expect("fast");
                let b = sys.find_matches(&text).expect("onig");
                assert_eq!(a, b, "pattern {k}, text {text:?}");
                let mut pieces = Vec::new();
                let one = std::slice::from_ref(fast);
                split_pieces(one, &mut Searchers::new(one), &text, &mut pieces);
                let want: Vec<&str> = b
                    .iter()
                    .filter(|((x, y), _)| x < y)
                    .map(|((x, y), _)| &text[*x..*y])
                    .collect();
                assert_eq!(pieces, want, "pattern {k}, text {text:?}");
            }
        }
    }

    #[test]
    fn the_byte_table_is_the_libraries() {
        let ours: std::collections::BTreeSet<char> = byte_chars().iter().copied().collect();
        let theirs: std::collections::BTreeSet<char> = ByteLevel::alphabet().into_iter().collect();
        assert_eq!(ours.len(), 256);
        assert_eq!(ours, theirs);
        // Piece by piece, as the library maps them.
        let text = "a b\tc\u{a0}é€😀\u{7f}\u{0}~¡¬\u{ad}®ÿ";
        let mut pre = PreTokenizedString::from(text);
        ByteLevel::new(false, true, false)
            .pre_tokenize(&mut pre)
            .expect("byte level");
        let splits = pre.get_splits(
            tokenizers::OffsetReferential::Original,
            tokenizers::OffsetType::None,
        );
        let mut mapped = String::new();
        map_bytes(text, &mut mapped);
        assert_eq!(splits.len(), 1);
        assert_eq!(splits[0].0, mapped);
    }

    #[test]
    fn direct_pieces_are_the_library_pieces() {
        let json = serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
            {"type": "Split", "pattern": {"Regex": GPT2_PATTERN}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
        let fast = PreTok::deserialize(json.clone()).expect("fast");
        let library = PreTokenizerWrapper::deserialize(json).expect("library");
        let patterns = fast.direct().expect("direct");
        for text in [
            "It's  12345 apples,\n\n  and 7 pears!",
            "",
            "   ",
            "中文 €5",
        ] {
            let mut pre = PreTokenizedString::from(text);
            library.pre_tokenize(&mut pre).expect("library");
            let want: Vec<String> = pre
                .get_splits(
                    tokenizers::OffsetReferential::Original,
                    tokenizers::OffsetType::None,
                )
                .iter()
                .map(|s| s.0.to_string())
                .collect();
            let mut pieces = Vec::new();
            split_pieces(patterns, &mut Searchers::new(patterns), text, &mut pieces);
            let got: Vec<String> = pieces
                .iter()
                .map(|p| {
                    let mut m = String::new();
                    map_bytes(p, &mut m);
                    m
                })
                .collect();
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn anchors_and_other_lookaround_keep_the_library_path() {
        assert!(FastPattern::new(r"\bword\b|\s+(?!\S)|\s+").is_none());
        assert!(FastPattern::new(r"^a|\s+(?!\S)|\s+").is_none());
        assert!(FastPattern::new(r"[^a$]|\s+(?!\S)|\s+").is_some());
        assert!(FastPattern::new(GPT2_PATTERN).is_some());
        assert!(FastPattern::new(r"a(?=b)").is_none());
        assert!(FastPattern::new(r"a(?!b)").is_none());
        let v: Value = serde_json::json!({"type": "ByteLevel", "add_prefix_space": true});
        assert!(fast_steps(&v).is_none());
        let v: Value = serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": false}]});
        let steps = fast_steps(&v).expect("the split is fast");
        assert!(
            matches!(steps[1], FastStep::Library(_)),
            "the prefix space is kept"
        );
        assert!(
            PreTok::deserialize(v)
                .expect("pre-tokenizer")
                .direct()
                .is_none()
        );
        let v: Value = serde_json::json!({"type": "Whitespace"});
        assert!(fast_steps(&v).is_none());
    }
}
