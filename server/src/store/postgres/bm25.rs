//! Keyword search as BM25 over a postings table, in plain SQL.
//!
//! Core PostgreSQL ranks a `tsquery` with `ts_rank`, which must read the tsvector of
//! every matching chunk: a query of a few ordinary words matches most of the index,
//! so that cost grows with the index (39 ms a query on SciFact's 11,995 chunks), and
//! `ts_rank` is not BM25 (nDCG@10 0.603 there, against 0.664 for BM25).
//!
//! Migration 3 ([`super::schema`]) keeps one `chunk_terms` row per (chunk, lexeme)
//! with the lexeme's count in the chunk and the chunk's length, written by a trigger
//! on every insert of chunks and removed with them by a cascading foreign key, so no
//! write path has to remember it. A search reads only the postings of the query's
//! lexemes through an index-only scan and sums BM25 per chunk, with the same k1 and b
//! as the embedded store's tantivy and Weaviate: on SciFact's train split, keyword
//! p50 3.5 ms and nDCG@10 0.686 (`embedwire-bench retrieval`).
//!
//! A term's chunk count (its IDF) needs all its postings too, as many again as the
//! sum: counts are kept for a few seconds ([`TermCounts`]), so a search asks for the
//! query's lexemes, counts only the terms not seen lately, then sums. At 10,000
//! SciFact documents keyword p50 went from 8.3 to 5.3 ms, and hybrid from 1.62 x
//! vector p50 to 1.35 x (same rankings).
//!
//! Most of what is left is the common words' postings: [`search_sql`] sums only the
//! rare terms' and looks the common ones up for the best candidates (migration 4's
//! `chunk_terms_term_chunk` index), falling back to [`exhaustive_search_sql`] when
//! that finds fewer hits than asked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// BM25's term-frequency saturation and length normalisation: Lucene's and
/// Weaviate's defaults, as the other stores use.
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// The corpus figures (chunk count, mean length) are read again after this long.
const CORPUS_MAX_AGE: Duration = Duration::from_secs(5);
/// Below this many chunks they are read for every search: cheap there, and a small
/// index changes proportionally fast (a first ingest).
const ALWAYS_FRESH_BELOW: f64 = 10_000.0;

/// What BM25 needs to know about the whole index.
#[derive(Debug, Clone, Copy)]
pub struct CorpusFigures {
    pub chunks: f64,
    pub mean_length: f64,
}

/// The SQL that reads [`CorpusFigures`]: an index-only scan of `chunks_keyword_length`.
pub fn corpus_sql(schema: &str) -> String {
    format!("SELECT count(*)::float8, coalesce(avg(keyword_length), 0)::float8 FROM {schema}.chunks")
}

/// The last corpus figures read, and when.
#[derive(Default)]
pub struct CorpusCache(Mutex<Option<(Instant, CorpusFigures)>>);

impl CorpusCache {
    /// The cached figures while they are recent enough to rank with.
    pub fn fresh(&self) -> Option<CorpusFigures> {
        let cached = *self.0.lock().expect("lock");
        cached
            .filter(|(read_at, figures)| figures.chunks >= ALWAYS_FRESH_BELOW && read_at.elapsed() < CORPUS_MAX_AGE)
            .map(|(_, figures)| figures)
    }

    pub fn store(&self, figures: CorpusFigures) {
        *self.0.lock().expect("lock") = Some((Instant::now(), figures));
    }
}

/// How many chunks hold each term, as read a moment ago: a term's count is the one
/// part of BM25 that reads all its postings (as many again as the sum does), and it
/// changes slowly, as the corpus figures do. Counts are kept [`CORPUS_MAX_AGE`], and
/// not at all below [`ALWAYS_FRESH_BELOW`] chunks.
#[derive(Default)]
pub struct TermCounts(Mutex<HashMap<String, (Instant, f64)>>);

/// Terms whose counts are kept at most; past it the cache starts again.
const MAX_CACHED_TERMS: usize = 100_000;

impl TermCounts {
    /// The counts known and fresh for `terms`, and the terms to count.
    pub fn split(&self, terms: Vec<String>, corpus: CorpusFigures) -> (Vec<(String, f64)>, Vec<String>) {
        if corpus.chunks < ALWAYS_FRESH_BELOW {
            return (Vec::new(), terms);
        }
        let cached = self.0.lock().expect("lock");
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for term in terms {
            match cached.get(&term) {
                Some((read_at, count)) if read_at.elapsed() < CORPUS_MAX_AGE => known.push((term, *count)),
                _ => unknown.push(term),
            }
        }
        (known, unknown)
    }

    pub fn store(&self, counts: &[(String, f64)]) {
        let mut cached = self.0.lock().expect("lock");
        if cached.len() + counts.len() > MAX_CACHED_TERMS {
            cached.clear();
        }
        let now = Instant::now();
        for (term, count) in counts {
            cached.insert(term.clone(), (now, *count));
        }
    }
}

/// The query's distinct lexemes, in the chunks' English configuration: `$1` the text.
pub const LEXEMES_SQL: &str = "SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', $1))";

/// The number of chunks holding each of `$1` (a text array): an index-only count each.
pub fn term_counts_sql(schema: &str) -> String {
    format!(
        "SELECT t, (SELECT count(*) FROM {schema}.chunk_terms p WHERE p.term = t)::float8 FROM unnest($1::text[]) t"
    )
}

/// Candidates the rare terms pick, per hit wanted, and at least: each is then scored
/// with the common terms too, by index lookups.
const CANDIDATES_PER_HIT: usize = 3;
const MIN_CANDIDATES: usize = 50;

/// How many chunks the rare terms pick for `hits` hits wanted.
pub fn candidates_for(hits: usize) -> i64 {
    (hits.saturating_mul(CANDIDATES_PER_HIT)).max(MIN_CANDIDATES) as i64
}

/// The BM25 weight of one posting `p`, `idf` its term's: `$4` the mean chunk length.
fn posting_score(idf: &str) -> String {
    format!(
        "{idf} * p.frequency * {k1_plus_1} / (p.frequency + {K1} * (1 - {B} + {B} * p.chunk_length / greatest($4::float8, 1)))",
        k1_plus_1 = K1 + 1.0
    )
}

/// Each of the query's lexemes with its IDF and whether it is rare: `$1` the lexemes,
/// `$5` their chunk counts, `$3` the chunk count, `$6` the rare terms' budget. A chunk
/// count read a moment ago may be below a term's count: the greater of the two keeps
/// the IDF positive.
const TERMS_CTE: &str = "WITH terms AS MATERIALIZED (
         SELECT term, ln(1 + (greatest($3::float8, n) - n + 0.5) / (n + 0.5)) AS idf,
                sum(n) OVER (ORDER BY n, term) - n < $6::float8 AS rare
         FROM unnest($1::text[], $5::float8[]) AS counted(term, n)
         WHERE n > 0)";

/// The keyword search, as a search engine's "common terms" query: every posting of the
/// query's rare terms is read and summed, the best `$7` chunks so found are scored
/// with the common terms too (an index lookup per chunk and term), and the best `$2`
/// of them returned. A query's common words ("cell", "increase") each hold a large
/// share of all chunks and weigh little; summing all their postings made the cost
/// grow with the index. At 10,000 SciFact documents (23,173 chunks, 10,104 postings
/// a train query on average) the statement took 9.4 ms a query against 3.5 ms this
/// way in one run, 2,000 rare postings and 60 candidates for 20 hits; nDCG@10 of the 20 chunks
/// 0.5356 and 0.5358, and 0.686 for the benchmark's 300 before and after (README).
///
/// A chunk holding none of the rare terms is never a candidate: when fewer than `$2`
/// hits come back, [`exhaustive_search_sql`] is asked.
/// Parameters as there, plus `$6` the rare terms' budget (`--postgres-keyword-rare-postings`,
/// see [`has_common_term`]) and `$7` the candidates; a filter's from `$8` on.
pub fn search_sql(schema: &str, columns: &str, filter: Option<&str>) -> String {
    let rare_sum = format!(
        "SELECT p.doc_id, p.chunk_index, sum({score}) AS partial
         FROM terms JOIN {schema}.chunk_terms p ON p.term = terms.term
         WHERE terms.rare
         GROUP BY p.doc_id, p.chunk_index",
        score = posting_score("terms.idf")
    );
    let candidates = match filter {
        None => format!("{rare_sum} ORDER BY partial DESC, doc_id, chunk_index LIMIT $7"),
        Some(condition) => format!(
            "SELECT summed.doc_id, summed.chunk_index, summed.partial
             FROM ({rare_sum}) summed JOIN {schema}.chunks c USING (doc_id, chunk_index)
             WHERE {condition}
             ORDER BY summed.partial DESC, summed.doc_id, summed.chunk_index LIMIT $7"
        ),
    };
    // A correlated sum: the planner then looks each (term, chunk) up in
    // chunk_terms_term_chunk instead of hashing every posting of the common terms.
    let common_sum = format!(
        "SELECT sum({score}) FROM common JOIN {schema}.chunk_terms p
             ON p.term = common.term AND p.doc_id = candidates.doc_id AND p.chunk_index = candidates.chunk_index",
        score = posting_score("common.idf")
    );
    format!(
        "{TERMS_CTE},
         common AS MATERIALIZED (SELECT term, idf FROM terms WHERE NOT rare),
         candidates AS ({candidates}),
         scored AS (
             SELECT doc_id, chunk_index, partial + coalesce(({common_sum}), 0) AS score
             FROM candidates ORDER BY score DESC, doc_id, chunk_index LIMIT $2)
         SELECT {columns} FROM scored JOIN {schema}.chunks c USING (doc_id, chunk_index)
         ORDER BY scored.score DESC, scored.doc_id, scored.chunk_index"
    )
}

/// Whether a term of the query is common, given each term's chunk count: the rarest
/// terms are rare while the postings of those rarer than them stay under `budget`
/// (the rarest one always). Only then can the exhaustive search find more than
/// [`search_sql`].
pub fn has_common_term(counts: &[f64], budget: f64) -> bool {
    let mut sorted: Vec<f64> = counts.iter().copied().filter(|n| *n > 0.0).collect();
    sorted.sort_by(f64::total_cmp);
    let mut before = 0.0;
    sorted.iter().any(|n| {
        let common = before >= budget;
        before += n;
        common
    })
}

/// The keyword search over every posting of every term: `$1` the query's lexemes, `$2`
/// the hits wanted, `$3` the chunk count, `$4` the mean chunk length, `$5` each
/// lexeme's chunk count; a filter's parameters from `$6` on, its condition over the
/// chunk's columns in `filter` (None: no filter). `columns` name the chunk's columns
/// with the score as `scored.score`.
pub fn exhaustive_search_sql(schema: &str, columns: &str, filter: Option<&str>) -> String {
    let idf = "WITH terms AS MATERIALIZED (
             SELECT term, ln(1 + (greatest($3::float8, n) - n + 0.5) / (n + 0.5)) AS idf
             FROM unnest($1::text[], $5::float8[]) AS counted(term, n)
             WHERE n > 0)";
    let sum = format!(
        "SELECT p.doc_id, p.chunk_index, sum({score}) AS score
         FROM terms JOIN {schema}.chunk_terms p ON p.term = terms.term
         GROUP BY p.doc_id, p.chunk_index",
        score = posting_score("terms.idf")
    );
    let order = "ORDER BY scored.score DESC, scored.doc_id, scored.chunk_index";
    match filter {
        // Without a filter the best chunks are known before any chunk row is read.
        None => format!(
            "{idf}, scored AS ({sum} ORDER BY score DESC, doc_id, chunk_index LIMIT $2)
             SELECT {columns} FROM scored JOIN {schema}.chunks c USING (doc_id, chunk_index) {order}"
        ),
        Some(condition) => format!(
            "{idf}, scored AS ({sum})
             SELECT {columns} FROM scored JOIN {schema}.chunks c USING (doc_id, chunk_index)
             WHERE {condition} {order} LIMIT $2"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_is_common_only_once_the_rarer_ones_fill_the_budget() {
        assert!(!has_common_term(&[], 2_000.0));
        // The rarest term is rare however many chunks hold it.
        assert!(!has_common_term(&[50_000.0], 2_000.0));
        assert!(!has_common_term(&[900.0, 1_000.0], 2_000.0));
        // 900 + 1,100 reach the budget: the third term is common, whatever the order.
        assert!(has_common_term(&[3_000.0, 900.0, 1_100.0], 2_000.0));
        assert!(!has_common_term(&[1_500.0, 5_000.0], 2_000.0));
        assert!(has_common_term(&[1_500.0, 600.0, 5_000.0], 2_000.0));
        // A term no chunk holds is left out.
        assert!(!has_common_term(&[0.0, 1_500.0], 2_000.0));
    }

    #[test]
    fn the_candidates_grow_with_the_hits_wanted() {
        assert_eq!(candidates_for(1), 50);
        assert_eq!(candidates_for(20), 60);
        assert_eq!(candidates_for(300), 900);
    }
}
