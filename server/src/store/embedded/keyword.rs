//! The embedded store's keyword index: BM25 over every chunk's text, a tantivy index in
//! `keyword/` beside the redb file.
//!
//! # Kept in step with the redb file
//! redb is the truth. Every redb commit that changes searchable documents bumps the
//! file's index generation in the same transaction; this index records, in the payload
//! of its own commit, the generation it has applied. A kill between the two commits (or
//! a data directory from before the keyword index) leaves the two generations
//! different, and [`KeywordIndex::open`] then rebuilds this index from redb before the
//! server serves. The two never disagree after a restart; the price is a rebuild after
//! a crash at the wrong moment (seconds for 10k documents).
//!
//! # Analyzer
//! Words (letters and digits), lower-cased, English stop words removed, stemmed
//! (Snowball English). Chosen on SciFact's train split (5,183 abstracts, 809 queries),
//! keyword-mode nDCG@10: lower-case only 0.646, + stop words 0.646, + stemming 0.679,
//! both 0.681. Stop words change little in quality but keep the commonest words out of
//! the postings. A rebuild of that corpus' 11,995 chunks takes under a second.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use tantivy::collector::{FilterCollector, TopDocs};
use tantivy::query::BooleanQuery;
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

use crate::error::{Error, Result};
use crate::index::ChunkId;

/// The analyzer's name in the index's schema.
const ANALYZER: &str = "embedwire_english";
/// Memory the writer buffers before it writes a segment (tantivy's minimum is 15 MB).
const WRITER_MEMORY_BYTES: usize = 32 << 20;
/// Distinct query terms searched at most: a query's cost stays bounded whatever its
/// length (a 100,000-character query searches its first 256 distinct terms).
pub const MAX_QUERY_TERMS: usize = 256;

/// One chunk to index.
pub struct KeywordChunk<'a> {
    pub chunk_id: ChunkId,
    pub text: &'a str,
}

/// Changes that follow one redb commit.
#[derive(Default)]
pub struct KeywordChanges<'a> {
    /// Documents whose chunks are all removed (deleted, or replaced by `added`).
    pub removed_documents: Vec<&'a str>,
    /// Chunks of the documents stored now, by document id.
    pub added: Vec<(&'a str, Vec<KeywordChunk<'a>>)>,
    /// The redb generation these changes bring the index to.
    pub generation: u64,
}

#[derive(Clone, Copy)]
struct Fields {
    chunk_id: Field,
    document_id: Field,
    text: Field,
}

/// BM25 over chunks; searches and writes may come from any thread.
pub struct KeywordIndex {
    index: Index,
    reader: IndexReader,
    /// Made at the first write: a writer holds threads and a memory budget, which a
    /// server of many collections, most of them only read, should not pay for each.
    writer: Mutex<Option<IndexWriter>>,
    fields: Fields,
}

fn keyword_error(error: impl std::fmt::Display) -> Error {
    Error::Storage(format!("keyword index: {error}"))
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let chunk_id = builder.add_u64_field("chunk_id", INDEXED | FAST);
    let document_id = builder.add_text_field("document_id", STRING);
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
    );
    let text = builder.add_text_field("text", text_options);
    (builder.build(), Fields { chunk_id, document_id, text })
}

/// The analyzer, for the index and for queries alike (and for highlights, whatever
/// the store).
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::new(Language::English).expect("tantivy ships English stop words"))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// `text` as the analyzer sees it: its analyzed words in order, joined by spaces. A
/// store whose own BM25 has no stemmer (Weaviate) indexes and queries this form, so
/// that it ranks the same words as the embedded store. `analyzer` is [`analyzer`]'s,
/// built once for many texts (its stop-word set and stemmer are not free).
pub fn analyzed_words(analyzer: &mut TextAnalyzer, text: &str) -> String {
    let mut words = String::with_capacity(text.len());
    let mut stream = analyzer.token_stream(text);
    while let Some(token) = stream.next() {
        if !words.is_empty() {
            words.push(' ');
        }
        words.push_str(&token.text);
    }
    words
}

impl KeywordIndex {
    /// Opens the index in `dir`, or rebuilds it there when it is missing, unreadable or
    /// at another generation than `generation` (redb's): `documents` then visits every
    /// stored document's chunks. Blocking.
    pub fn open(
        dir: &Path,
        generation: u64,
        documents: impl FnOnce(&mut dyn FnMut(&str, Vec<KeywordChunk<'_>>)) -> Result<()>,
    ) -> Result<Self> {
        match Self::open_existing(dir) {
            Ok((index, applied)) if applied == Some(generation) => return Self::ready(index),
            Ok((_, applied)) => {
                tracing::warn!(?applied, generation, "the keyword index is behind the store; rebuilding it")
            }
            Err(error) => tracing::info!(%error, "no usable keyword index; building it from the store"),
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(keyword_error)?;
        }
        std::fs::create_dir_all(dir).map_err(keyword_error)?;
        let index = Index::create_in_dir(dir, schema().0).map_err(keyword_error)?;
        let rebuilt = Self::ready(index)?;
        let mut added = 0usize;
        rebuilt.with_writer(|writer| {
            let mut failure = None;
            documents(&mut |document_id, chunks| {
                for chunk in chunks {
                    if let Err(error) = writer.add_document(rebuilt.document(document_id, &chunk)) {
                        failure.get_or_insert(error);
                    }
                    added += 1;
                }
            })?;
            match failure {
                Some(error) => Err(keyword_error(error)),
                None => Ok(()),
            }
        })?;
        rebuilt.commit(generation)?;
        // Made again at the next write: a new collection's index may never see one.
        *rebuilt.writer.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::info!(chunks = added, generation, "keyword index built");
        Ok(rebuilt)
    }

    fn open_existing(dir: &Path) -> Result<(Index, Option<u64>)> {
        let index = Index::open_in_dir(dir).map_err(keyword_error)?;
        if index.schema() != schema().0 {
            return Err(keyword_error("its schema is another version's"));
        }
        let applied = index.load_metas().map_err(keyword_error)?.payload.and_then(|p| p.parse::<u64>().ok());
        Ok((index, applied))
    }

    fn ready(index: Index) -> Result<Self> {
        index.tokenizers().register(ANALYZER, analyzer());
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(keyword_error)?;
        Ok(KeywordIndex { index, reader, writer: Mutex::new(None), fields: schema().1 })
    }

    /// Runs `work` with the writer, made now if this is the first write.
    fn with_writer<T>(&self, work: impl FnOnce(&mut IndexWriter) -> Result<T>) -> Result<T> {
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if writer.is_none() {
            *writer = Some(self.index.writer(WRITER_MEMORY_BYTES).map_err(keyword_error)?);
        }
        work(writer.as_mut().expect("made above"))
    }

    fn document(&self, document_id: &str, chunk: &KeywordChunk<'_>) -> TantivyDocument {
        doc!(
            self.fields.chunk_id => chunk.chunk_id,
            self.fields.document_id => document_id,
            self.fields.text => chunk.text,
        )
    }

    /// Applies one redb commit's changes and commits them, durably, with the
    /// generation; searches see them when this returns. Blocking.
    pub fn apply(&self, changes: KeywordChanges<'_>) -> Result<()> {
        self.with_writer(|writer| {
            for id in &changes.removed_documents {
                writer.delete_term(Term::from_field_text(self.fields.document_id, id));
            }
            for (id, chunks) in &changes.added {
                writer.delete_term(Term::from_field_text(self.fields.document_id, id));
                for chunk in chunks {
                    writer.add_document(self.document(id, chunk)).map_err(keyword_error)?;
                }
            }
            Ok(())
        })?;
        self.commit(changes.generation)
    }

    fn commit(&self, generation: u64) -> Result<()> {
        self.with_writer(|writer| {
            let mut prepared = writer.prepare_commit().map_err(keyword_error)?;
            prepared.set_payload(&generation.to_string());
            prepared.commit().map_err(keyword_error)?;
            Ok(())
        })?;
        self.reader.reload().map_err(keyword_error)
    }

    /// The query's distinct analyzed terms, at most [`MAX_QUERY_TERMS`], each with how
    /// often it occurs (a repeated word weighs more, as in BM25's sum over the query).
    pub fn query_terms(text: &str) -> Vec<(String, usize)> {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(text);
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        while let Some(token) = stream.next() {
            let order = counts.len();
            if counts.len() >= MAX_QUERY_TERMS && !counts.contains_key(&token.text) {
                continue;
            }
            counts.entry(token.text.clone()).or_insert((order, 0)).1 += 1;
        }
        let mut terms: Vec<(String, (usize, usize))> = counts.into_iter().collect();
        terms.sort_by_key(|(_, (order, _))| *order);
        terms.into_iter().map(|(term, (_, count))| (term, count)).collect()
    }

    /// The `count` chunks with the best BM25 score for `text`, best first, among those
    /// `allowed` (all when None). A query without an indexable term finds nothing.
    pub fn search(&self, text: &str, count: usize, allowed: Option<HashSet<ChunkId>>) -> Result<Vec<(ChunkId, f32)>> {
        let terms = Self::query_terms(text);
        if terms.is_empty() || count == 0 {
            return Ok(Vec::new());
        }
        let query = BooleanQuery::new_multiterms_query(
            terms
                .iter()
                .flat_map(|(term, times)| std::iter::repeat_n(Term::from_field_text(self.fields.text, term), *times))
                .collect(),
        );
        let searcher = self.reader.searcher();
        let top = TopDocs::with_limit(count).order_by_score();
        let found = match allowed {
            None => searcher.search(&query, &top),
            Some(allowed) => searcher.search(
                &query,
                &FilterCollector::new("chunk_id".to_string(), move |id: u64| allowed.contains(&id), top),
            ),
        }
        .map_err(keyword_error)?;
        let mut hits = Vec::with_capacity(found.len());
        for (score, address) in found {
            let ids =
                searcher.segment_reader(address.segment_ord).fast_fields().u64("chunk_id").map_err(keyword_error)?;
            hits.extend(ids.first(address.doc_id).map(|id| (id, score)));
        }
        Ok(hits)
    }

    /// Chunks indexed now (for tests and start-up logs).
    pub fn chunk_count(&self) -> u64 {
        self.reader.searcher().num_docs()
    }
}
