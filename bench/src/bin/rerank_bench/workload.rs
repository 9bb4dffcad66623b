//! The calls: one query and `texts_per_call` passages each, from real text (the
//! Python docstrings of [`embedwire_bench::corpus`]): queries are its one-line
//! docstring sentences, passages its paragraphs of 50 to 70 tokens (the
//! cross-encoder's tokenizer counts them), what a retrieval stage hands a reranker.
//!
//! Call k takes query k mod Q and the `texts_per_call` passages from (k x
//! texts_per_call) mod P on, wrapping. P is prime, so each lap over the pool shifts
//! the windows: consecutive calls (the concurrent ones) never share a passage, and a
//! call's query and passages come back together only after Q x P calls.

use std::time::{Duration, Instant};

use embedwire_bench::corpus::{self, Docstring};
use embedwire_bench::latency::LatencySummary;
use embedwire_server::model::pair_tokenizer::{PairTokenizer, TokenizedPair, TruncationSide};

/// Tokens of a passage alone (no special tokens): about 60.
pub const PASSAGE_TOKENS: std::ops::RangeInclusive<usize> = 50..=70;
/// Passages in the pool (prime, see the module's doc).
const POOL_PASSAGES: usize = 1009;
/// Queries in rotation.
const QUERIES: usize = 101;

/// The fixed pools the calls are made from.
#[derive(Debug, Clone)]
pub struct Workload {
    pub queries: Vec<String>,
    pub passages: Vec<String>,
    /// Tokens of each passage alone.
    pub passage_tokens: Vec<usize>,
    pub texts_per_call: usize,
}

impl Workload {
    /// Picks the queries and passages from `docstrings`: passages spread over the
    /// whole corpus (visited with a stride coprime to its size) rather than the first
    /// modules' docstrings.
    pub fn build(docstrings: &[Docstring], tokenizer: &PairTokenizer, texts_per_call: usize) -> anyhow::Result<Self> {
        let eligible = corpus::select(docstrings, 0, 0, 0)?.paragraphs;
        let corpus = corpus::select(docstrings, eligible, 0, QUERIES)?;
        let paragraphs = corpus.documents;
        let stride = coprime_stride(paragraphs.len());
        let mut passages = Vec::with_capacity(POOL_PASSAGES);
        let mut passage_tokens = Vec::with_capacity(POOL_PASSAGES);
        for k in 0..paragraphs.len() {
            let text = &paragraphs[k * stride % paragraphs.len()].text;
            let tokens = tokenizer.text_offsets(text)?.len();
            if PASSAGE_TOKENS.contains(&tokens) {
                passages.push(text.clone());
                passage_tokens.push(tokens);
                if passages.len() == POOL_PASSAGES {
                    break;
                }
            }
        }
        anyhow::ensure!(
            passages.len() == POOL_PASSAGES,
            "the docstrings hold {} paragraphs of {}-{} tokens, fewer than the {POOL_PASSAGES} needed",
            passages.len(),
            PASSAGE_TOKENS.start(),
            PASSAGE_TOKENS.end()
        );
        anyhow::ensure!(texts_per_call <= POOL_PASSAGES, "--texts-per-call above the pool of {POOL_PASSAGES}");
        Ok(Workload { queries: corpus.queries, passages, passage_tokens, texts_per_call })
    }

    /// Call `k`'s query and passages.
    pub fn call(&self, k: usize) -> (String, Vec<String>) {
        let start = k.wrapping_mul(self.texts_per_call) % self.passages.len();
        let texts =
            (0..self.texts_per_call).map(|i| self.passages[(start + i) % self.passages.len()].clone()).collect();
        (self.queries[k % self.queries.len()].clone(), texts)
    }

    /// The pairs of the first `calls` calls, tokenized as the server tokenizes them
    /// (right truncation, no per-text cut), and the time each call's tokenizing took.
    pub fn tokenize(
        &self,
        tokenizer: &PairTokenizer,
        calls: usize,
    ) -> anyhow::Result<(Vec<TokenizedPair>, Tokenizing)> {
        let mut pairs = Vec::with_capacity(calls * self.texts_per_call);
        let mut times = Vec::with_capacity(calls);
        for k in 0..calls {
            let (query, texts) = self.call(k);
            let started = Instant::now();
            for text in &texts {
                pairs.push(tokenizer.tokenize(&query, text, TruncationSide::Right)?);
            }
            times.push(started.elapsed());
        }
        let pair_tokens: Vec<usize> = pairs.iter().map(|pair| pair.ids.len()).collect();
        let tokenizing = Tokenizing {
            per_call: LatencySummary::from_samples(times),
            mean_pair_tokens: pair_tokens.iter().sum::<usize>() as f64 / pair_tokens.len().max(1) as f64,
            max_pair_tokens: pair_tokens.iter().copied().max().unwrap_or(0),
        };
        Ok((pairs, tokenizing))
    }

    /// Mean tokens of a passage alone.
    pub fn mean_passage_tokens(&self) -> f64 {
        self.passage_tokens.iter().sum::<usize>() as f64 / self.passage_tokens.len().max(1) as f64
    }
}

/// What tokenizing the calls' pairs cost, on one thread, as the server does it on
/// the request path.
#[derive(Debug, Clone)]
pub struct Tokenizing {
    /// Time to tokenize one call's pairs.
    pub per_call: LatencySummary,
    /// Tokens of a pair, special tokens included.
    pub mean_pair_tokens: f64,
    pub max_pair_tokens: usize,
}

impl Tokenizing {
    /// Mean time of one call's tokenizing.
    pub fn mean(&self) -> Duration {
        self.per_call.mean
    }
}

/// A stride near 0.6180 x `n` that shares no factor with `n`, so that `k x stride mod
/// n` visits every index once, far apart.
fn coprime_stride(n: usize) -> usize {
    if n <= 2 {
        return 1;
    }
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (n * 618 / 1000..n).find(|&s| gcd(s, n) == 1).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stride_visits_every_index_once() {
        for n in [1, 2, 3, 10, 1009, 1024, 30_000] {
            let stride = coprime_stride(n);
            let mut seen = vec![false; n];
            for k in 0..n {
                seen[k * stride % n] = true;
            }
            assert!(seen.iter().all(|&s| s), "n = {n}, stride {stride}");
        }
    }

    #[test]
    fn consecutive_calls_share_no_passage_and_windows_shift_each_lap() {
        let workload = Workload {
            queries: (0..3).map(|i| format!("q{i}")).collect(),
            passages: (0..7).map(|i| format!("p{i}")).collect(),
            passage_tokens: vec![60; 7],
            texts_per_call: 3,
        };
        assert_eq!(workload.call(0), ("q0".into(), vec!["p0".into(), "p1".into(), "p2".into()]));
        assert_eq!(workload.call(1), ("q1".into(), vec!["p3".into(), "p4".into(), "p5".into()]));
        assert_eq!(workload.call(2).1, ["p6", "p0", "p1"], "wraps, shifted by one");
        assert_eq!(workload.call(3).0, "q0");
    }
}
