//! Splits a document into chunks the model can embed whole: windows of at most
//! `max_tokens` tokens that overlap by `overlap_tokens`, so a passage cut at a chunk
//! border is still whole in the neighbouring chunk. Cuts fall between words when a
//! word boundary is near, so a chunk does not end in the middle of a word.

/// Chunking settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSettings {
    /// Most tokens per chunk (special tokens excluded).
    pub max_tokens: usize,
    /// Tokens shared by consecutive chunks.
    pub overlap_tokens: usize,
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
    while first < tokens.len() {
        let mut end = (first + window).min(tokens.len());
        if end < tokens.len() {
            end = word_boundary_before(text, tokens, first, end);
        }
        let (start_byte, end_byte) = (tokens[first].0, tokens[end - 1].1);
        spans.push(ChunkSpan { start_byte, end_byte, start_char: 0, end_char: 0 });
        if end == tokens.len() {
            break;
        }
        // Step forward by the window minus the overlap, but always make progress.
        first = (end - overlap).max(first + 1);
        while first < end && !starts_word(text, tokens, first) {
            first += 1;
        }
    }
    fill_char_offsets(text, &mut spans);
    spans
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
        chunk_spans(text, &word_offsets(text), ChunkSettings { max_tokens, overlap_tokens })
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
        let spans = chunk_spans(text, &tokens, ChunkSettings { max_tokens: 4, overlap_tokens: 0 });
        let chunks: Vec<&str> = spans.iter().map(|s| &text[s.start_byte..s.end_byte]).collect();
        assert_eq!(chunks, vec!["unbelievable story", "here"]);
    }

    #[test]
    fn char_offsets_count_code_points() {
        let text = "héllo wörld ünïcode";
        let spans = chunk_spans(text, &word_offsets(text), ChunkSettings { max_tokens: 1, overlap_tokens: 0 });
        let as_chars: Vec<String> =
            spans.iter().map(|s| text.chars().skip(s.start_char).take(s.end_char - s.start_char).collect()).collect();
        assert_eq!(as_chars, vec!["héllo", "wörld", "ünïcode"]);
    }
}
