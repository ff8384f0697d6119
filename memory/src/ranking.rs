//! Which lessons a repair is shown: of its language, those of its failure's exact signature
//! first (the most useful first), then the rest by Okapi BM25 over the lesson's text
//! (signature, case, analysis and diff) against the failure's, with words cut for code and
//! error messages (identifiers split at `_` and case changes, numbers dropped).
//!
//! BM25 is written out here (its formula, `k1` 1.2, `b` 0.75): the `bm25` crate depends on
//! `fxhash`, unmaintained (RUSTSEC-2025-0057), which the dependency policy refuses.

use std::collections::HashMap;

use proto::Language;
use store::Stored;

/// What a repair looks lessons up by.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    pub language: Language,
    /// The failure's signature (`signature::signature`).
    pub signature: &'a str,
    /// The failure's text: its error, failing case and code.
    pub text: &'a str,
}

/// Lessons of one or more sets, indexed for [`Ranking::nearest`].
pub struct Ranking {
    lessons: Vec<(Stored, bool)>,
    index: Bm25,
}

impl std::fmt::Debug for Ranking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranking")
            .field("lessons", &self.lessons.len())
            .finish_non_exhaustive()
    }
}

/// How useful a lesson has been: its repairs that passed, smoothed so that an unused one
/// counts as half.
pub fn usefulness(stored: &Stored) -> f64 {
    (stored.helped as f64 + 1.0) / (stored.retrieved as f64 + 2.0)
}

/// The text a lesson is found by.
fn text(stored: &Stored) -> String {
    let l = &stored.lesson;
    format!("{}\n{}\n{}\n{}", l.signature, l.case, l.analysis, l.diff)
}

impl Ranking {
    /// `lessons`, each with whether it is from the shared set.
    pub fn new(lessons: Vec<(Stored, bool)>) -> Self {
        let index = Bm25::new(lessons.iter().map(|(stored, _)| text(stored)));
        Self { lessons, index }
    }

    pub fn len(&self) -> usize {
        self.lessons.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lessons.is_empty()
    }

    /// The lessons that share words with `text`, nearest first, at most `limit` (a search
    /// of the listing).
    pub fn search(&self, text: &str, limit: usize) -> Vec<&Stored> {
        self.index
            .ranked(text)
            .into_iter()
            .take(limit)
            .map(|i| &self.lessons[i].0)
            .collect()
    }

    /// The `k` nearest lessons to `query`, each with whether it is shared and whether its
    /// signature matched exactly.
    pub fn nearest(&self, query: &Query<'_>, k: usize) -> Vec<(&Stored, bool, bool)> {
        if k == 0 {
            return Vec::new();
        }
        let of_language = |i: &usize| self.lessons[*i].0.lesson.language == query.language;
        let mut exact: Vec<usize> = (0..self.lessons.len())
            .filter(of_language)
            .filter(|i| self.lessons[*i].0.lesson.signature == query.signature)
            .collect();
        exact.sort_by(|a, b| {
            let (a, b) = (&self.lessons[*a].0, &self.lessons[*b].0);
            usefulness(b)
                .total_cmp(&usefulness(a))
                .then(b.lesson.created_ms.cmp(&a.lesson.created_ms))
        });
        let mut chosen: Vec<(usize, bool)> = exact.into_iter().take(k).map(|i| (i, true)).collect();
        if chosen.len() < k {
            let query_text = format!("{}\n{}", query.signature, query.text);
            for i in self.index.ranked(&query_text) {
                if chosen.len() == k {
                    break;
                }
                if of_language(&i) && !chosen.iter().any(|(c, _)| *c == i) {
                    chosen.push((i, false));
                }
            }
        }
        chosen
            .into_iter()
            .map(|(i, exact)| (&self.lessons[i].0, self.lessons[i].1, exact))
            .collect()
    }
}

/// Okapi BM25 over a fixed set of documents, as an inverted index: a query's cost follows the
/// postings of its words, not the number of documents times its words.
struct Bm25 {
    /// Per term, the documents it occurs in with its frequency there.
    postings: HashMap<String, Vec<(usize, u32)>>,
    /// Each document's length in words.
    lengths: Vec<usize>,
    average_length: f64,
}

const K1: f64 = 1.2;
const B: f64 = 0.75;

impl Bm25 {
    fn new(texts: impl Iterator<Item = String>) -> Self {
        let mut postings: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let mut lengths = Vec::new();
        for (i, text) in texts.enumerate() {
            let words = words(&text);
            lengths.push(words.len());
            let mut terms: HashMap<String, u32> = HashMap::new();
            for word in words {
                *terms.entry(word).or_default() += 1;
            }
            for (term, f) in terms {
                postings.entry(term).or_default().push((i, f));
            }
        }
        let total: usize = lengths.iter().sum();
        let average_length = (total as f64 / lengths.len().max(1) as f64).max(1.0);
        Self {
            postings,
            lengths,
            average_length,
        }
    }

    /// The documents that share a word with `query`, best first (ties: the earlier first).
    fn ranked(&self, query: &str) -> Vec<usize> {
        let mut terms = words(query);
        terms.sort();
        terms.dedup();
        let n = self.lengths.len() as f64;
        let mut scores = vec![0.0_f64; self.lengths.len()];
        for postings in terms.iter().filter_map(|t| self.postings.get(t)) {
            let df = postings.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(i, f) in postings {
                let f = f64::from(f);
                let norm = K1 * (1.0 - B + B * self.lengths[i] as f64 / self.average_length);
                scores[i] += idf * f * (K1 + 1.0) / (f + norm);
            }
        }
        let mut scored: Vec<(usize, f64)> = scores
            .into_iter()
            .enumerate()
            .filter(|(_, score)| *score > 0.0)
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.into_iter().map(|(i, _)| i).collect()
    }
}

/// Words of code and error messages: lowercase, split at anything not a letter or digit and
/// at case changes (`isPrime` → `is`, `prime`), numbers and one-letter words left out.
pub fn words(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let mut current = String::new();
        let mut previous_lower = false;
        for c in word.chars() {
            if c.is_uppercase() && previous_lower && !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            previous_lower = c.is_lowercase();
            current.extend(c.to_lowercase());
        }
        if !current.is_empty() {
            tokens.push(current);
        }
    }
    tokens.retain(|t| t.chars().count() > 1 && !t.chars().all(|c| c.is_ascii_digit()));
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::lesson::{Lesson, LessonSource};
    use proto::{ErrorKind, TaskId};

    fn stored(id: &str, signature: &str, analysis: &str, retrieved: u64, helped: u64) -> Stored {
        Stored {
            lesson: Lesson {
                id: id.into(),
                language: Language::Python,
                error_kind: ErrorKind::WrongOutput,
                signature: signature.into(),
                case: String::new(),
                diff: String::new(),
                analysis: analysis.into(),
                model: "m".into(),
                job: TaskId::new(),
                function: "f".into(),
                source: LessonSource::Repair,
                created_ms: 1,
                given: false,
            },
            retrieved,
            helped,
        }
    }

    #[test]
    fn code_words_split_at_case_changes_and_underscores() {
        assert_eq!(
            words("isPrime(n_max) raised ValueError: <n>"),
            ["is", "prime", "max", "raised", "value", "error"]
        );
    }

    #[test]
    fn exact_signatures_come_first_the_most_useful_first_then_the_lexically_nearest() {
        let ranking = Ranking::new(vec![
            (
                stored(
                    "empty",
                    "runtime: IndexError: list index out of range",
                    "an empty list was indexed",
                    0,
                    0,
                ),
                false,
            ),
            (
                stored(
                    "short-poor",
                    "wrong_output: a list, 1 item short",
                    "the range stopped early",
                    6,
                    1,
                ),
                false,
            ),
            (
                stored(
                    "short-good",
                    "wrong_output: a list, 1 item short",
                    "the range stopped early",
                    6,
                    5,
                ),
                true,
            ),
            (
                stored(
                    "float",
                    "wrong_output: a number, differs",
                    "rounded too soon",
                    0,
                    0,
                ),
                false,
            ),
        ]);
        let query = Query {
            language: Language::Python,
            signature: "wrong_output: a list, 1 item short",
            text: "",
        };
        let ids: Vec<&str> = ranking
            .nearest(&query, 2)
            .iter()
            .map(|(s, _, _)| s.lesson.id.as_str())
            .collect();
        assert_eq!(ids, ["short-good", "short-poor"]);
        let found = ranking.nearest(&query, 1);
        assert!(found[0].1 && found[0].2, "shared, exact");
        // No exact match: the words decide.
        let query = Query {
            language: Language::Python,
            signature: "runtime: IndexError: tuple index out of range",
            text: "indexing an empty tuple",
        };
        let nearest = ranking.nearest(&query, 1);
        assert_eq!(nearest[0].0.lesson.id, "empty");
        assert!(!nearest[0].2);
        // Another language's lessons are never shown; k = 0 is off.
        let query = Query {
            language: Language::Rust,
            ..query
        };
        assert!(ranking.nearest(&query, 2).is_empty());
        assert!(
            ranking
                .nearest(
                    &Query {
                        language: Language::Python,
                        ..query
                    },
                    0
                )
                .is_empty()
        );
    }
}
