//! Text hygiene before chunking: one canonical form per text, so the same content
//! always chunks, hashes and embeds the same way.

use unicode_normalization::UnicodeNormalization;

/// Unicode NFC, every run of whitespace folded to one space, trimmed.
pub fn normalize_text(text: &str) -> String {
    let mut normalized = String::with_capacity(text.len());
    for word in text.nfc().collect::<String>().split_whitespace() {
        if !normalized.is_empty() {
            normalized.push(' ');
        }
        normalized.push_str(word);
    }
    normalized
}

/// Identifies a chunk's content: identical chunks share one stored vector.
pub type ContentHash = [u8; 32];

/// The content hash of a chunk's text.
pub fn content_hash(chunk: &str) -> ContentHash {
    *blake3::hash(chunk.as_bytes()).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_whitespace_and_composes_characters() {
        // "e" + combining acute accent composes to "é".
        assert_eq!(normalize_text("  caf\u{0065}\u{0301}\t\n au  lait \r\n"), "caf\u{e9} au lait");
        assert_eq!(normalize_text(" \n\t "), "");
    }

    #[test]
    fn equal_texts_hash_equal() {
        assert_eq!(content_hash("a b"), content_hash("a b"));
        assert_ne!(content_hash("a b"), content_hash("a  b"));
    }
}
