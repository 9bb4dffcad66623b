//! The pseudo backend's "model": each text maps to a fixed vector derived from a hash
//! of its bytes. No weights, no tokenizer, microseconds per text: it measures the
//! transport and the server around the model, and gives tests stable vectors.

use super::TokenizedText;

/// Token id standing for [CLS] and [SEP] in pseudo tokenization (BERT's ids).
const CLS_ID: u32 = 101;
const SEP_ID: u32 = 102;
/// Pseudo token ids fall in BERT's vocabulary range.
const VOCAB_SIZE: u64 = 30522;

/// Deterministic hash vectors of a fixed dimension.
#[derive(Debug, Clone)]
pub struct PseudoModel {
    /// Dimensions of every vector.
    pub dim: usize,
    /// Longest pseudo tokenization, special tokens included.
    pub max_tokens: usize,
}

impl PseudoModel {
    /// The vector of `text`: unnormalized values in [-1, 1), the same on every call.
    pub fn embed_one(&self, text: &str, out: &mut [f32]) {
        let mut state = fnv1a(text.as_bytes());
        for value in out.iter_mut().take(self.dim) {
            state = splitmix64(state);
            // The top 24 bits give an exactly representable f32 in [0, 1).
            *value = ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        }
    }

    /// One token per whitespace-separated word, framed by [CLS] and [SEP], truncated
    /// like a real tokenizer so that `truncate` behaves the same on every backend.
    pub fn tokenize(&self, text: &str) -> TokenizedText {
        let words: Vec<u32> = text.split_whitespace().map(|w| (fnv1a(w.as_bytes()) % VOCAB_SIZE) as u32).collect();
        let room = self.max_tokens.saturating_sub(2);
        let mut ids = Vec::with_capacity(words.len().min(room) + 2);
        ids.push(CLS_ID);
        ids.extend(words.iter().take(room));
        ids.push(SEP_ID);
        TokenizedText { truncated: words.len() > room, untruncated_count: words.len() + 2, ids }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ *b as u64).wrapping_mul(0x0100_0000_01b3))
}

fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_deterministic_and_differ_between_texts() {
        let model = PseudoModel { dim: 8, max_tokens: 16 };
        let (mut a, mut b, mut c) = ([0.0; 8], [0.0; 8], [0.0; 8]);
        model.embed_one("hello", &mut a);
        model.embed_one("hello", &mut b);
        model.embed_one("world", &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
    }

    #[test]
    fn tokenization_truncates_and_counts() {
        let model = PseudoModel { dim: 8, max_tokens: 4 };
        let t = model.tokenize("a b c d e");
        assert_eq!(t.ids.len(), 4);
        assert!(t.truncated);
        assert_eq!(t.untruncated_count, 7);
    }
}
