//! Highlights: the words of a hit's text that match the query's words, as the
//! embedded store's keyword analyzer sees them (lower-cased, stemmed, stop words left
//! out), so that "Vitamins" in a chunk is marked for the query "vitamin". One analyzer
//! for every store: the marks a person sees do not depend on where the index lives.

use std::collections::HashSet;

use tantivy::tokenizer::{TextAnalyzer, TokenStream};

use crate::store::embedded::keyword::{self, KeywordIndex};

/// The analyzed words of one query, and the analyzer that reads each hit's text
/// (built once a query: its stop-word set and stemmer are not free).
pub struct QueryWords {
    words: HashSet<String>,
    analyzer: TextAnalyzer,
}

impl QueryWords {
    pub fn of(query: &str) -> Self {
        let words = KeywordIndex::query_terms(query).into_iter().map(|(term, _)| term).collect();
        QueryWords { words, analyzer: keyword::analyzer() }
    }

    /// Where `text`'s matching words lie, in code points of the document whose text
    /// starts at `start_char`, in order.
    pub fn spans(&mut self, text: &str, start_char: u32) -> Vec<(u32, u32)> {
        if self.words.is_empty() {
            return Vec::new();
        }
        let mut stream = self.analyzer.token_stream(text);
        let mut position = CodePoints { byte: 0, chars: 0 };
        let mut spans = Vec::new();
        while let Some(token) = stream.next() {
            if self.words.contains(&token.text) {
                let from = position.at(text, token.offset_from);
                let to = position.at(text, token.offset_to);
                spans.push((start_char + from, start_char + to));
            }
        }
        spans
    }
}

/// Byte offsets to code points, moving forward through one text.
struct CodePoints {
    byte: usize,
    chars: u32,
}

impl CodePoints {
    fn at(&mut self, text: &str, byte: usize) -> u32 {
        self.chars += text[self.byte..byte].chars().count() as u32;
        self.byte = byte;
        self.chars
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stemmed_words_match_and_offsets_count_code_points() {
        let mut words = QueryWords::of("the vitamins of bones");
        let text = "Über Vitamin D: bone density and the vitamin's role.";
        let marked: Vec<String> = words
            .spans(text, 0)
            .iter()
            .map(|&(from, to)| text.chars().skip(from as usize).take((to - from) as usize).collect())
            .collect();
        assert_eq!(marked, ["Vitamin", "bone", "vitamin"]);
        // In document coordinates: the chunk starts at 100.
        assert_eq!(words.spans(text, 100)[0], (105, 112));
        assert!(QueryWords::of("the of and").spans(text, 0).is_empty(), "only stop words");
    }
}
