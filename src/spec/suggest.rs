//! "Did you mean" suggestions for misspelled keys and names.

/// The candidate closest to `word`, if it is close enough to be a likely typo.
///
/// Distance is the optimal-string-alignment edit distance (insertions,
/// deletions, substitutions and swaps of neighbours), compared
/// case-insensitively; a candidate qualifies within one edit for short
/// words and within a third of the word's length for longer ones.
pub(super) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word_lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|&c| (edit_distance(&word_lower, &c.to_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// `" (did you mean \"x\"?)"` or the empty string.
pub fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    match closest(word, candidates) {
        Some(c) => format!(" (did you mean {c:?}?)"),
        None => String::new(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Rows i-2, i-1 and i of the dynamic-programming table.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("standardise", "standardize"), 1);
        assert_eq!(edit_distance("dtpye", "dtype"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let keys = ["dtype", "column", "columns", "expr", "transform"];
        assert_eq!(closest("dtyp", &keys), Some("dtype"));
        assert_eq!(closest("colmns", &keys), Some("columns"));
        assert_eq!(closest("Transfrom", &keys), Some("transform"));
        assert_eq!(closest("zzz", &keys), None);
        assert_eq!(closest("x", &["f32", "u8"]), None);
        assert_eq!(
            did_you_mean("f3", &["f32", "f64", "u8"]),
            " (did you mean \"f32\"?)"
        );
    }
}
