//! Splits a document into chunks the model can embed whole: windows of at most
//! `max_tokens` tokens that overlap by `overlap_tokens`, so a passage cut at a chunk
//! border is still whole in the neighbouring chunk.
//!
//! A window ends at a sentence boundary when one lies within `sentence_tolerance`
//! tokens of its limit, else between words (a chunk does not end in the middle of a
//! word), and the next window's overlap begins at a sentence start when one lies in
//! it: passages read as whole sentences. A sentence ends at `.`, `!` or `?` (closing
//! quotes and brackets after it included) followed by whitespace and a character that
//! is not a lower-case letter, so "e.g. the" and "3.5" do not end one.

/// Chunking settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSettings {
    /// Most tokens per chunk (special tokens excluded).
    pub max_tokens: usize,
    /// Tokens shared by consecutive chunks.
    pub overlap_tokens: usize,
    /// How many tokens short of `max_tokens` a chunk may end to end at a sentence
    /// boundary (0: cut between words only).
    pub sentence_tolerance: usize,
}

/// Where a chunk sits in its document's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Byte range, for slicing in Rust.
    pub start_byte: usize,
    pub end_byte: usize,
    /// Unicode code point range, for clients (Python slices by code points).
    pub start_char: usize,
    pub end_char: usize,
}

/// Chunks `text`, given the byte offsets of its tokens (in order, special tokens
/// excluded). A text of no tokens makes no chunk.
pub fn chunk_spans(text: &str, tokens: &[(usize, usize)], settings: ChunkSettings) -> Vec<ChunkSpan> {
    let window = settings.max_tokens.max(1);
    let overlap = settings.overlap_tokens.min(window - 1);
    let mut spans = Vec::new();
    let mut first = 0;
    // A sentence end may pull a cut back by at most half a window.
    let tolerance = settings.sentence_tolerance.min(window / 2);
    while first < tokens.len() {
        let mut end = (first + window).min(tokens.len());
        if end < tokens.len() {
            end = sentence_boundary_before(text, tokens, end, tolerance)
                .unwrap_or_else(|| word_boundary_before(text, tokens, first, end));
        }
        let (start_byte, end_byte) = (tokens[first].0, tokens[end - 1].1);
        spans.push(ChunkSpan { start_byte, end_byte, start_char: 0, end_char: 0 });
        if end == tokens.len() {
            break;
        }
        // Step forward by the window minus the overlap, but always make progress; the
        // overlap starts at the first sentence start in it, else at a word start.
        let earliest = end.saturating_sub(overlap).max(first + 1);
        first = match (earliest..end).find(|&index| starts_sentence(text, tokens, index)) {
            Some(sentence) if tolerance > 0 => sentence,
            _ => {
                let mut next = earliest;
                while next < end && !starts_word(text, tokens, next) {
                    next += 1;
                }
                next
            }
        };
    }
    fill_char_offsets(text, &mut spans);
    spans
}

/// The latest token in the `tolerance` tokens up to `end` that starts a sentence: a
/// cut there ends the chunk with a whole sentence.
fn sentence_boundary_before(text: &str, tokens: &[(usize, usize)], end: usize, tolerance: usize) -> Option<usize> {
    if tolerance == 0 {
        return None;
    }
    (end.saturating_sub(tolerance).max(1)..=end).rev().find(|&cut| starts_sentence(text, tokens, cut))
}

/// Whether token `index` begins a sentence: the text before it (after whitespace)
/// ends with `.`, `!` or `?`, perhaps followed by closing quotes or brackets, and it
/// does not begin with a lower-case letter.
fn starts_sentence(text: &str, tokens: &[(usize, usize)], index: usize) -> bool {
    if index == 0 || index >= tokens.len() {
        return index == 0;
    }
    let start = tokens[index].0;
    let before = &text[..start];
    let trimmed = before.trim_end();
    if trimmed.len() == before.len() || text[start..].starts_with(|c: char| c.is_lowercase()) {
        return false;
    }
    let closed = trimmed.trim_end_matches(['"', '\'', ')', ']', '\u{201d}', '\u{2019}']);
    closed.ends_with(['.', '!', '?'])
}

/// Moves a cut at token `end` back to the start of the word it falls in, unless that
/// loses more than half of the window (one very long "word" is cut anyway).
fn word_boundary_before(text: &str, tokens: &[(usize, usize)], first: usize, end: usize) -> usize {
    let floor = first + (end - first).div_ceil(2);
    (floor..=end).rev().find(|&cut| starts_word(text, tokens, cut)).unwrap_or(end)
}

/// Whether token `index` begins a word: whitespace or punctuation precedes it, or it
/// is the first token.
fn starts_word(text: &str, tokens: &[(usize, usize)], index: usize) -> bool {
    if index == 0 || index >= tokens.len() {
        return true;
    }
    let gap = &text[tokens[index - 1].1..tokens[index].0];
    !gap.is_empty() || !is_word_char(text, tokens[index].0) || !is_word_char(text, tokens[index - 1].0)
}

fn is_word_char(text: &str, byte: usize) -> bool {
    text[byte..].chars().next().is_some_and(char::is_alphanumeric)
}

/// Converts byte offsets to code point offsets in one pass over the text.
fn fill_char_offsets(text: &str, spans: &mut [ChunkSpan]) {
    let mut byte_to_char = Vec::with_capacity(spans.len() * 2);
    for span in spans.iter() {
        byte_to_char.push(span.start_byte);
        byte_to_char.push(span.end_byte);
    }
    byte_to_char.sort_unstable();
    byte_to_char.dedup();
    let mut positions = std::collections::HashMap::with_capacity(byte_to_char.len());
    let mut wanted = byte_to_char.iter().peekable();
    for (char_index, (byte_index, _)) in text.char_indices().chain(std::iter::once((text.len(), ' '))).enumerate() {
        while wanted.peek().is_some_and(|&&b| b == byte_index) {
            positions.insert(byte_index, char_index);
            wanted.next();
        }
    }
    for span in spans {
        span.start_char = positions[&span.start_byte];
        span.end_char = positions[&span.end_byte];
    }
}

/// Byte offsets of whitespace-separated words: the unit of chunking when no
/// tokenizer is at hand (pseudo and remote backends).
pub fn word_offsets(text: &str) -> Vec<(usize, usize)> {
    let mut offsets = Vec::new();
    let mut start = None;
    for (index, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                offsets.push((s, index));
                start = None;
            }
            (false, None) => start = Some(index),
            _ => {}
        }
    }
    if let Some(s) = start {
        offsets.push((s, text.len()));
    }
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks_of(text: &str, max_tokens: usize, overlap_tokens: usize) -> Vec<&str> {
        chunk_spans(text, &word_offsets(text), ChunkSettings { max_tokens, overlap_tokens, sentence_tolerance: 0 })
            .iter()
            .map(|s| &text[s.start_byte..s.end_byte])
            .collect()
    }

    #[test]
    fn short_text_is_one_chunk() {
        assert_eq!(chunks_of("one two three", 10, 2), vec!["one two three"]);
        assert!(chunks_of("", 10, 2).is_empty());
    }

    #[test]
    fn windows_overlap_and_cover_everything() {
        let text = "a b c d e f g h i j";
        assert_eq!(chunks_of(text, 4, 1), vec!["a b c d", "d e f g", "g h i j"]);
        assert_eq!(chunks_of(text, 4, 0), vec!["a b c d", "e f g h", "i j"]);
    }

    #[test]
    fn cuts_move_back_to_word_starts() {
        // Tokens: "un" "##believ" "##able" " " "story" ... as byte ranges.
        let text = "unbelievable story here";
        let tokens = [(0, 2), (2, 9), (9, 12), (13, 18), (19, 23)];
        let spans =
            chunk_spans(text, &tokens, ChunkSettings { max_tokens: 4, overlap_tokens: 0, sentence_tolerance: 0 });
        let chunks: Vec<&str> = spans.iter().map(|s| &text[s.start_byte..s.end_byte]).collect();
        assert_eq!(chunks, vec!["unbelievable story", "here"]);
    }

    #[test]
    fn char_offsets_count_code_points() {
        let text = "héllo wörld ünïcode";
        let spans = chunk_spans(
            text,
            &word_offsets(text),
            ChunkSettings { max_tokens: 1, overlap_tokens: 0, sentence_tolerance: 0 },
        );
        let as_chars: Vec<String> =
            spans.iter().map(|s| text.chars().skip(s.start_char).take(s.end_char - s.start_char).collect()).collect();
        assert_eq!(as_chars, vec!["héllo", "wörld", "ünïcode"]);
    }

    fn sentence_chunks(text: &str, max_tokens: usize, overlap_tokens: usize, sentence_tolerance: usize) -> Vec<&str> {
        let settings = ChunkSettings { max_tokens, overlap_tokens, sentence_tolerance };
        chunk_spans(text, &word_offsets(text), settings).iter().map(|s| &text[s.start_byte..s.end_byte]).collect()
    }

    #[test]
    fn chunks_end_at_a_sentence_end_within_the_tolerance() {
        let text = "One two three. Four five six seven eight. Nine ten eleven twelve.";
        // Words as tokens; windows of 6: the first ends after "three." (3 words short).
        assert_eq!(
            sentence_chunks(text, 6, 0, 3),
            vec!["One two three.", "Four five six seven eight.", "Nine ten eleven twelve."]
        );
        // A tolerance of 2 cannot reach back to "three.": the cut falls between words.
        assert_eq!(sentence_chunks(text, 6, 0, 2)[0], "One two three. Four five six");
        assert_eq!(sentence_chunks(text, 6, 0, 0)[0], "One two three. Four five six");
    }

    #[test]
    fn the_overlap_starts_at_a_sentence_start_when_one_lies_in_it() {
        let text = "Alpha beta gamma. Delta epsilon zeta eta. Theta iota kappa.";
        let chunks = sentence_chunks(text, 6, 4, 2);
        // No sentence end within 2 words of the limit: a cut between words, and the
        // next chunk starts at the sentence that begins in the overlap.
        assert_eq!(chunks[0], "Alpha beta gamma. Delta epsilon zeta");
        assert_eq!(chunks[1], "Delta epsilon zeta eta.");
        // No sentence starts in the next overlap ("epsilon zeta eta."): a word start.
        assert_eq!(chunks[2], "epsilon zeta eta. Theta iota kappa.");
    }

    #[test]
    fn an_overlap_larger_than_the_chunk_still_moves_forward() {
        let text = "Alpha beta gamma. Delta epsilon zeta eta. Theta iota kappa.";
        let chunks = sentence_chunks(text, 5, 4, 2);
        assert_eq!(chunks[0], "Alpha beta gamma.");
        assert!(chunks.last().unwrap().ends_with("kappa."), "{chunks:?}");
    }

    #[test]
    fn abbreviations_numbers_and_quotes() {
        assert!(!starts_sentence("see e.g. the list", &word_offsets("see e.g. the list"), 2), "lower case after e.g.");
        let text = "It rose 3.5 times. \"Done.\" Then more.";
        let tokens = word_offsets(text);
        let starts: Vec<usize> = (0..tokens.len()).filter(|&i| starts_sentence(text, &tokens, i)).collect();
        // "It", "\"Done.\"" (after "times."), "Then" (after a closing quote).
        assert_eq!(starts, vec![0, 4, 5]);
    }
}
