//! The PostgreSQL store: one index in a PostgreSQL database with pgvector, shared
//! by any number of embedwire servers. Everything a server must not lose lives in
//! the database, committed before the answer: jobs, documents waiting to be
//! indexed, documents, and chunks with their vectors.
//!
//! # Layout
//! - [`connection`]: pools to the primary and the replicas, which replica may serve
//!   a read, errors.
//! - [`schema`]: the tables of an index and their versioned migrations.
//! - [`sql_filter`]: metadata filters as SQL with bound parameters.
//! - [`jobs`]: job rows, leases, pending documents.
//! - [`bm25`]: keyword search, BM25 over a postings table.
//!
//! Writes go to the primary in transactions, chunk and document rows by binary COPY.
//! Searches and document reads go to a replica when one is usable (see
//! [`connection`]), else to the primary. Searches use the HNSW index with iterative
//! scans, so a filtered search still returns top_k hits.

mod bm25;
mod collections;
pub mod connection;
pub mod jobs;
pub mod schema;
pub mod sql_filter;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;
use pgvector::{HalfVector, Vector};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{Json, ToSql, Type};
use tokio_postgres::{Row, Transaction};

use self::connection::{Endpoint, PoolSettings, Pools, parse_lsn, sql_error};
use self::schema::{IndexShape, VectorType};
use super::HitContent;
use super::{
    Claim, CorpusStore, CountAccuracy, DocumentRecord, IndexStats, IndexedDocument, JobChange, JobRecord, KeywordQuery,
    NewDocument, StoreDescription, StoreHealth, StoreNode, StoreQuery, StoredHit, ViewCounts,
};
use crate::config::{PostgresVector, ServerConfig};
use crate::corpus::filter::Filter;
use crate::corpus::text::ContentHash;
use crate::error::{Error, Result};

/// How often the store's health and replica lag are read in the background.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
/// Document and chunk counts are refreshed every this many health checks.
const COUNTS_EVERY: u32 = 5;

type SqlResult<T> = std::result::Result<T, tokio_postgres::Error>;

/// The `--postgres-*` settings.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    pub url: String,
    pub read_urls: Vec<String>,
    /// The PostgreSQL schema of the index (`--collection`, lower-cased).
    pub schema: String,
    pub vector: VectorType,
    pub pool: PoolSettings,
    pub max_replica_lag: Duration,
    pub job_lease: Duration,
    pub hnsw_m: usize,
    pub hnsw_ef_construction: usize,
    /// Postings of a keyword query's rare terms, together at most (see `bm25::search_sql`).
    pub keyword_rare_postings: f64,
}

impl PostgresSettings {
    /// The settings of the server's flags.
    pub fn from_config(config: &ServerConfig) -> Self {
        PostgresSettings {
            url: config.postgres_url.clone().unwrap_or_default(),
            read_urls: config.postgres_read_url.clone(),
            schema: config.collection.to_lowercase(),
            vector: match config.postgres_vector {
                PostgresVector::Vector => VectorType::Vector,
                PostgresVector::Halfvec => VectorType::Halfvec,
            },
            pool: PoolSettings {
                size: config.postgres_pool_size,
                timeout: Duration::from_secs_f64(config.postgres_timeout_secs),
                ef_search: config.postgres_ef_search,
            },
            max_replica_lag: Duration::from_secs_f64(config.postgres_max_replica_lag_secs),
            job_lease: Duration::from_secs_f64(config.job_lease_secs),
            hnsw_m: config.hnsw_m,
            hnsw_ef_construction: config.hnsw_ef_construction,
            keyword_rare_postings: config.postgres_keyword_rare_postings as f64,
        }
    }
}

/// A PostgreSQL database as a [`CorpusStore`].
pub struct PostgresStore {
    pools: Arc<Pools>,
    settings: PostgresSettings,
    /// The schema, quoted for SQL.
    schema: String,
    /// What its schema holds (named collections' schemas are made the same).
    shape: IndexShape,
    description: StoreDescription,
    /// This server's name in job leases.
    server_id: String,
    /// The database's type of the `embedding` column (pgvector's OIDs differ per database).
    embedding_type: Type,
    health: Arc<Mutex<StoreHealth>>,
    counts: Arc<Mutex<ViewCounts>>,
    /// The chunk count and mean length keyword searches rank with.
    keyword_corpus: bm25::CorpusCache,
    /// Chunks per keyword term, read a moment ago.
    term_counts: bm25::TermCounts,
}

impl PostgresStore {
    /// Connects, migrates the schema and checks that it holds vectors of `model_id`
    /// with `dim` dimensions. Any failure is a clear configuration error: the server
    /// does not start against a database it cannot use.
    pub async fn connect(settings: PostgresSettings, model_id: &str, dim: usize) -> Result<Arc<Self>> {
        let pools =
            Arc::new(Pools::open(&settings.url, &settings.read_urls, &settings.pool, settings.max_replica_lag)?);
        let (primary_label, replica_labels) = pools.labels();
        let unreachable =
            |e: Error| Error::Config(format!("--postgres-url: cannot use the database at {primary_label}: {e}"));
        let mut client = pools.primary().connection("connect").await.map_err(unreachable)?;
        let shape = IndexShape {
            model: format!("{model_id} dim={dim}"),
            dim,
            vector: settings.vector,
            hnsw_m: settings.hnsw_m,
            hnsw_ef_construction: settings.hnsw_ef_construction,
        };
        schema::migrate(&mut client, &primary_label, &settings.schema, &shape).await?;
        let embedding_type = client
            .prepare(&format!("SELECT NULL::{}", settings.vector.sql()))
            .await
            .map_err(|e| unreachable(sql_error(&primary_label, "connect", e)))?
            .columns()[0]
            .type_()
            .clone();
        drop(client);
        let description = StoreDescription {
            kind: "postgres",
            shared: true,
            index_id: format!("postgres:{}@{primary_label}", settings.schema),
            index_kind: "pgvector-hnsw",
        };
        let nodes = std::iter::once(&primary_label)
            .chain(&replica_labels)
            .enumerate()
            .map(|(i, label)| StoreNode {
                name: if i == 0 { "primary".into() } else { format!("replica-{i}") },
                address: label.clone(),
                healthy: i == 0,
            })
            .collect();
        let store = Arc::new(PostgresStore {
            schema: schema::quoted(&settings.schema),
            shape,
            pools,
            settings,
            description,
            server_id: uuid::Uuid::new_v4().to_string(),
            embedding_type,
            health: Arc::new(Mutex::new(StoreHealth { healthy: true, detail: String::new(), nodes })),
            counts: Arc::new(Mutex::new(ViewCounts::default())),
            keyword_corpus: bm25::CorpusCache::default(),
            term_counts: bm25::TermCounts::default(),
        });
        // Before the server serves: a replica is reported missing only once a check failed.
        store.refresh_health().await;
        store.refresh_counts().await?;
        tracing::info!(index = %store.description.index_id, replicas = replica_labels.len(), "postgres store ready");
        tokio::spawn(follow_health(Arc::downgrade(&store)));
        Ok(store)
    }

    /// Reads every node's health and the replicas' lag, and records them for
    /// `/healthz` and Info; returns whether the primary answered.
    async fn refresh_health(&self) -> bool {
        let (primary, replicas) = self.pools.check().await;
        let mut health = self.health.lock().expect("lock");
        let results = std::iter::once(&primary).chain(&replicas);
        for (node, result) in health.nodes.iter_mut().zip(results) {
            node.healthy = result.is_ok();
        }
        health.healthy = primary.is_ok();
        health.detail = match &primary {
            Ok(()) => String::new(),
            Err(error) => error.to_string(),
        };
        health.healthy
    }

    /// Runs `work` in a transaction on the primary and commits it.
    async fn write<R: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl for<'t> FnOnce(&'t Transaction<'t>) -> BoxFuture<'t, SqlResult<R>> + Send,
    ) -> Result<R> {
        let started = Instant::now();
        let primary = self.pools.primary();
        let result = async {
            let mut client = primary.connection(operation).await?;
            let failed = |e| sql_error(&primary.label, operation, e);
            let tx = client.transaction().await.map_err(failed)?;
            let value = work(&tx).await.map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            if self.pools.has_replicas() {
                let row = client.query_one("SELECT pg_current_wal_lsn()::text", &[]).await.map_err(failed)?;
                self.pools.committed_at(parse_lsn(row.get(0)));
            }
            Ok(value)
        }
        .await;
        self.pools.observe(operation, started, result.is_ok());
        result
    }

    /// One statement on the primary.
    async fn query_primary(
        &self,
        operation: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let started = Instant::now();
        let result = run(self.pools.primary(), operation, sql, params).await;
        self.pools.observe(operation, started, result.is_ok());
        result
    }

    /// One read statement on a usable replica, else on the primary; a replica that
    /// cannot be reached is left out and the primary answers instead.
    async fn query_reader(
        &self,
        operation: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let started = Instant::now();
        let reader = self.pools.reader();
        let mut result = run(reader, operation, sql, params).await;
        if let Err(Error::Unavailable(error)) = &result {
            if !std::ptr::eq(reader, self.pools.primary()) {
                tracing::warn!(replica = %reader.label, %error, "postgres store: replica failed, reading from the primary");
                self.pools.replica_failed(&reader.label);
                result = run(self.pools.primary(), operation, sql, params).await;
            } else if let Some(replica) = self.pools.reachable_replica() {
                // The primary is down: an answer that may miss the last writes beats none.
                tracing::warn!(replica = %replica.label, %error, "postgres store: primary failed, reading from a replica");
                result = run(replica, operation, sql, params).await;
            }
        }
        self.pools.observe(operation, started, result.is_ok());
        result
    }

    /// The figures of the whole index BM25 ranks with, read again when they are old.
    async fn keyword_corpus(&self) -> Result<bm25::CorpusFigures> {
        if let Some(figures) = self.keyword_corpus.fresh() {
            return Ok(figures);
        }
        let rows = self.query_reader("keyword corpus", &bm25::corpus_sql(&self.schema), &[]).await?;
        let figures = bm25::CorpusFigures { chunks: rows[0].get(0), mean_length: rows[0].get(1) };
        self.keyword_corpus.store(figures);
        Ok(figures)
    }

    async fn refresh_counts(&self) -> Result<IndexStats> {
        let s = &self.schema;
        let sql = format!(
            "SELECT (SELECT count(*) FROM {s}.documents), (SELECT count(*) FROM {s}.chunks),
                    (SELECT count(DISTINCT hash) FROM {s}.chunks), (SELECT count(*) FROM {s}.pending)"
        );
        let rows = self.query_primary("count", &sql, &[]).await?;
        let count = |i: usize| rows[0].get::<_, i64>(i).max(0) as u64;
        // One statement on the primary: a consistent, exact count.
        let stats = IndexStats {
            documents: count(0),
            chunks: count(1),
            unique_vectors: count(2),
            pending_documents: count(3),
            accuracy: CountAccuracy::Exact,
        };
        *self.counts.lock().expect("lock") =
            ViewCounts { documents: stats.documents, chunks: stats.chunks, accuracy: CountAccuracy::Exact };
        Ok(stats)
    }

    /// A query vector as the `embedding` column's type.
    fn query_vector(&self, vector: &[f32]) -> Box<dyn ToSql + Sync + Send> {
        match self.settings.vector {
            VectorType::Vector => Box::new(Vector::from(vector.to_vec())),
            VectorType::Halfvec => Box::new(HalfVector::from_f32_slice(vector)),
        }
    }
}

/// One statement on `endpoint` (prepared once per connection).
async fn run(
    endpoint: &Endpoint,
    operation: &'static str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let client = endpoint.connection(operation).await?;
    let failed = |e| sql_error(&endpoint.label, operation, e);
    let statement = client.prepare_cached(sql).await.map_err(failed)?;
    client.query(&statement, params).await.map_err(failed)
}

/// Reads the nodes' health and replica lag every second and, now and then, the
/// sizes, until the store is dropped.
async fn follow_health(store: std::sync::Weak<PostgresStore>) {
    let mut ticks = 0u32;
    loop {
        tokio::time::sleep(HEALTH_INTERVAL).await;
        let Some(store) = store.upgrade() else { return };
        let healthy = store.refresh_health().await;
        ticks += 1;
        if healthy && ticks % COUNTS_EVERY == 0 {
            let _ = store.refresh_counts().await;
        }
    }
}

/// 8 bytes of a document id's hash: the key of its advisory lock.
fn lock_key(id: &str) -> i64 {
    let hash = blake3::hash(id.as_bytes());
    i64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Writes indexed documents: their old chunk and document rows go, the new ones
/// come by binary COPY.
async fn write_documents(
    tx: &Transaction<'_>,
    s: &str,
    embedding: &Type,
    vector: VectorType,
    documents: &[IndexedDocument],
) -> SqlResult<()> {
    // Two jobs may store the same document id at once: lock the ids, in one order.
    let mut keys: Vec<i64> = documents.iter().map(|d| lock_key(&d.id)).collect();
    keys.sort_unstable();
    keys.dedup();
    tx.execute("SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::int8[]) AS k", &[&keys]).await?;
    let ids: Vec<&str> = documents.iter().map(|d| d.id.as_str()).collect();
    tx.execute(&format!("DELETE FROM {s}.chunks WHERE doc_id = ANY($1)"), &[&ids]).await?;
    tx.execute(&format!("DELETE FROM {s}.documents WHERE doc_id = ANY($1)"), &[&ids]).await?;

    let sink = tx
        .copy_in(&format!(
            "COPY {s}.chunks (doc_id, chunk_index, start_char, end_char, hash, text, metadata, embedding)
             FROM STDIN (FORMAT binary)"
        ))
        .await?;
    let types =
        [Type::TEXT, Type::INT4, Type::INT4, Type::INT4, Type::BYTEA, Type::TEXT, Type::JSONB, embedding.clone()];
    let mut writer = pin!(BinaryCopyInWriter::new(sink, &types));
    for document in documents {
        let record = &document.record;
        let metadata = Json(&record.metadata);
        for (index, (chunk, values)) in record.chunks.iter().zip(&document.vectors).enumerate() {
            let text = record.text.get(chunk.start_byte as usize..chunk.end_byte as usize).unwrap_or_default();
            let embedding: Box<dyn ToSql + Sync + Send> = match vector {
                VectorType::Vector => Box::new(Vector::from(values.clone())),
                VectorType::Halfvec => Box::new(HalfVector::from_f32_slice(values)),
            };
            let row: [&(dyn ToSql + Sync); 8] = [
                &document.id,
                &(index as i32),
                &(chunk.start_char as i32),
                &(chunk.end_char as i32),
                &chunk.hash.as_slice(),
                &text,
                &metadata,
                embedding.as_ref(),
            ];
            writer.as_mut().write(&row).await?;
        }
    }
    writer.finish().await?;

    let sink = tx
        .copy_in(&format!("COPY {s}.documents (doc_id, text, metadata, chunks, indexed_at) FROM STDIN (FORMAT binary)"))
        .await?;
    let mut writer =
        pin!(BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::TEXT, Type::JSONB, Type::JSONB, Type::FLOAT8]));
    for document in documents {
        let record = &document.record;
        let row: [&(dyn ToSql + Sync); 5] =
            [&document.id, &record.text, &Json(&record.metadata), &Json(&record.chunks), &record.indexed_at];
        writer.as_mut().write(&row).await?;
    }
    writer.finish().await?;
    Ok(())
}

#[async_trait]
impl CorpusStore for PostgresStore {
    fn description(&self) -> &StoreDescription {
        &self.description
    }

    async fn health(&self) -> StoreHealth {
        self.health.lock().expect("lock").clone()
    }

    async fn create_job(&self, job: JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord> {
        jobs::create(self, job, documents).await
    }

    async fn append_to_job(&self, job_id: &str, documents: Vec<NewDocument>) -> Result<JobRecord> {
        jobs::append(self, job_id, documents).await
    }

    async fn update_job(&self, job_id: &str, change: JobChange) -> Result<JobRecord> {
        jobs::update(self, job_id, change).await
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        jobs::read(self, job_id).await
    }

    async fn jobs(&self, unfinished_only: bool) -> Result<Vec<JobRecord>> {
        jobs::list(self, unfinished_only).await
    }

    async fn claim_job(&self, job_id: &str) -> Result<Claim> {
        jobs::claim(self, job_id).await
    }

    async fn settle_job(&self, job_id: &str) -> Result<JobRecord> {
        jobs::settle(self, job_id).await
    }

    async fn pending_documents(&self, job_id: &str, from: u64, limit: usize) -> Result<Vec<(u64, NewDocument)>> {
        jobs::pending(self, job_id, from, limit).await
    }

    async fn existing_vectors(&self, hashes: Vec<ContentHash>) -> Result<Vec<Option<Vec<f32>>>> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<&[u8]> = hashes.iter().map(|h| h.as_slice()).collect();
        let sql = format!(
            "SELECT DISTINCT ON (hash) hash, embedding::vector FROM {}.chunks WHERE hash = ANY($1)",
            self.schema
        );
        let rows = self.query_reader("dedup_lookup", &sql, &[&wanted]).await?;
        let known: HashMap<Vec<u8>, Vec<f32>> =
            rows.iter().map(|row| (row.get::<_, Vec<u8>>(0), row.get::<_, Vector>(1).to_vec())).collect();
        Ok(hashes.iter().map(|hash| known.get(hash.as_slice()).cloned()).collect())
    }

    async fn commit_indexed(
        &self,
        job_id: &str,
        documents: Vec<IndexedDocument>,
        failed: Vec<(u64, String)>,
    ) -> Result<JobRecord> {
        let (s, key, me) = (self.schema.clone(), job_id.to_string(), self.server_id.clone());
        let (embedding, vector, lease) = (self.embedding_type.clone(), self.settings.vector, self.settings.job_lease);
        let job = self
            .write("commit_indexed", move |tx| {
                Box::pin(async move {
                    // Whichever transaction deletes a pending row counts its document: a
                    // batch committed twice (after a lease takeover) waits here for the
                    // first, then finds its rows gone and writes nothing.
                    let sequences: Vec<i64> = documents
                        .iter()
                        .map(|d| d.sequence as i64)
                        .chain(failed.iter().map(|(s, _)| *s as i64))
                        .collect();
                    let taken: HashSet<u64> = tx
                        .query(
                            &format!(
                                "DELETE FROM {s}.pending WHERE job_id = $1 AND sequence = ANY($2) RETURNING sequence"
                            ),
                            &[&key, &sequences],
                        )
                        .await?
                        .iter()
                        .map(|row| row.get::<_, i64>(0) as u64)
                        .collect();
                    // The last version of each document id in the batch wins, as when
                    // stored one after the other.
                    let mut newest: BTreeMap<&str, &IndexedDocument> = BTreeMap::new();
                    for document in documents.iter().filter(|d| taken.contains(&d.sequence)) {
                        newest.insert(&document.id, document);
                    }
                    let processed = documents.iter().filter(|d| taken.contains(&d.sequence)).count() as i64;
                    let newly_failed: Vec<&(u64, String)> = failed.iter().filter(|(s, _)| taken.contains(s)).collect();
                    if !newest.is_empty() {
                        let batch: Vec<IndexedDocument> = newest.into_values().cloned().collect();
                        write_documents(tx, &s, &embedding, vector, &batch).await?;
                    }
                    let first_error = newly_failed.first().map(|(_, reason)| reason.clone());
                    let sql = format!(
                        "UPDATE {s}.jobs SET processed = processed + $2, failed = failed + $3,
                                error = coalesce(error, $4), revision = revision + 1,
                                lease_owner = $5, lease_until = now() + make_interval(secs => $6)
                         WHERE job_id = $1 RETURNING {}",
                        jobs::JOB_COLUMNS
                    );
                    let row = tx
                        .query_opt(
                            &sql,
                            &[&key, &processed, &(newly_failed.len() as i64), &first_error, &me, &lease.as_secs_f64()],
                        )
                        .await?;
                    Ok(row.as_ref().map(jobs::job_from_row))
                })
            })
            .await?;
        job.ok_or_else(|| Error::NotFound(format!("job {job_id} does not exist")))
    }

    async fn delete_documents(&self, ids: Vec<String>, filter: Option<Filter>) -> Result<usize> {
        let filter = filter.filter(|f| !f.is_empty());
        if ids.is_empty() && filter.is_none() {
            return Ok(0);
        }
        let s = self.schema.clone();
        self.write("delete_documents", move |tx| {
            Box::pin(async move {
                let translated = filter.as_ref().map(|f| sql_filter::translate(f, 2));
                let condition = match &translated {
                    Some(f) => format!("doc_id = ANY($1) OR ({})", f.condition),
                    None => "doc_id = ANY($1)".into(),
                };
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids];
                if let Some(f) = &translated {
                    params.extend(f.params.iter().map(|p| p.as_sql()));
                }
                // Chunks first: a document whose record is gone never shows up in search.
                tx.execute(&format!("DELETE FROM {s}.chunks WHERE {condition}"), &params).await?;
                tx.execute(&format!("DELETE FROM {s}.documents WHERE {condition}"), &params).await
            })
        })
        .await
        .map(|deleted| deleted as usize)
    }

    async fn documents(&self, ids: Vec<String>) -> Result<Vec<Option<DocumentRecord>>> {
        let sql = format!(
            "SELECT doc_id, text, metadata, chunks, indexed_at FROM {}.documents WHERE doc_id = ANY($1)",
            self.schema
        );
        let rows = self.query_reader("get_documents", &sql, &[&ids]).await?;
        let mut found: HashMap<String, DocumentRecord> = HashMap::new();
        for row in rows {
            let record = DocumentRecord {
                text: row.get(1),
                metadata: row.get::<_, Json<BTreeMap<String, String>>>(2).0,
                chunks: serde_json::from_value(row.get(3))
                    .map_err(|e| Error::Storage(format!("postgres store: a document's chunks: {e}")))?,
                indexed_at: row.get(4),
            };
            found.insert(row.get(0), record);
        }
        Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
    }

    async fn stats(&self) -> Result<IndexStats> {
        self.refresh_counts().await
    }

    fn cached_counts(&self) -> ViewCounts {
        self.counts.lock().expect("lock").clone()
    }

    async fn search(&self, query: StoreQuery<'_>) -> Result<Vec<StoredHit>> {
        let filter = sql_filter::translate(query.filter, 3);
        let columns = ChunkColumns::new("(embedding <=> $1)::float8", query.content());
        let sql = format!(
            "SELECT {} FROM {}.chunks WHERE {} ORDER BY embedding <=> $1 LIMIT $2",
            columns.sql, self.schema, filter.condition
        );
        let vector = self.query_vector(query.vector);
        let limit = query.count as i64;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![vector.as_ref(), &limit];
        params.extend(filter.params.iter().map(|p| p.as_sql()));
        let rows = self.query_reader("search", &sql, &params).await?;
        // Cosine distance is 1 - similarity.
        let mut hits: Vec<StoredHit> = rows
            .iter()
            .map(|row| columns.hit(row, (1.0 - row.get::<_, f64>(4)) as f32))
            .filter(|hit| query.score_threshold.is_none_or(|threshold| hit.score >= threshold))
            .collect();
        // Iterative scans in relaxed order may return hits slightly out of order.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(hits)
    }

    /// Both searches read the chunk's row, which holds its text and metadata: hybrid
    /// p50 at 10,000 SciFact documents went from 1.41 to 1.30 x vector p50 (three
    /// alternating runs of 300 queries each, README "Keyword and hybrid search").
    fn ranks_with_content(&self) -> bool {
        true
    }

    async fn keyword_search(&self, query: KeywordQuery<'_>) -> Result<Vec<StoredHit>> {
        let columns = ChunkColumns::new("scored.score", query.content());
        let corpus = self.keyword_corpus().await?;
        let text = query.leading_words();
        let lexemes: Vec<String> = self
            .query_reader("keyword terms", bm25::LEXEMES_SQL, &[&text])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if lexemes.is_empty() {
            return Ok(Vec::new());
        }
        let (mut counted, uncounted) = self.term_counts.split(lexemes, corpus);
        if !uncounted.is_empty() {
            let rows =
                self.query_reader("keyword term counts", &bm25::term_counts_sql(&self.schema), &[&uncounted]).await?;
            let fresh: Vec<(String, f64)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            self.term_counts.store(&fresh);
            counted.extend(fresh);
        }
        let (terms, counts): (Vec<String>, Vec<f64>) = counted.into_iter().unzip();
        let limit = query.count as i64;
        let figures: [&(dyn ToSql + Sync); 5] = [&terms, &limit, &corpus.chunks, &corpus.mean_length, &counts];
        let budget = self.settings.keyword_rare_postings;
        // Without a common term both ways read every posting: the exhaustive one is simpler.
        if budget > 0.0 && bm25::has_common_term(&counts, budget) {
            let candidates = bm25::candidates_for(query.count);
            let filter = sql_filter::translate(query.filter, 8);
            let condition = (!query.filter.is_empty()).then_some(filter.condition.as_str());
            let mut params: Vec<&(dyn ToSql + Sync)> = figures.to_vec();
            params.extend([&budget as &(dyn ToSql + Sync), &candidates]);
            params.extend(filter.params.iter().map(|p| p.as_sql()));
            let sql = bm25::search_sql(&self.schema, &columns.sql, condition);
            let rows = self.query_reader("keyword search", &sql, &params).await?;
            if rows.len() >= query.count {
                return Ok(rows.iter().map(|row| columns.hit(row, row.get::<_, f64>(4) as f32)).collect());
            }
            // Chunks holding only common terms may fill the page: every posting is read.
        }
        let filter = sql_filter::translate(query.filter, 6);
        let condition = (!query.filter.is_empty()).then_some(filter.condition.as_str());
        let mut params = figures.to_vec();
        params.extend(filter.params.iter().map(|p| p.as_sql()));
        let sql = bm25::exhaustive_search_sql(&self.schema, &columns.sql, condition);
        let rows = self.query_reader("keyword search, every posting", &sql, &params).await?;
        Ok(rows.iter().map(|row| columns.hit(row, row.get::<_, f64>(4) as f32)).collect())
    }
}

/// The columns of a chunk search: the citation, the score (5th), then what the hit
/// carries, wherever each landed.
struct ChunkColumns {
    sql: String,
    text_at: Option<usize>,
    metadata_at: Option<usize>,
    vector_at: Option<usize>,
}

impl ChunkColumns {
    fn new(score: &'static str, content: HitContent) -> Self {
        let mut columns = vec!["doc_id", "chunk_index", "start_char", "end_char", score];
        let mut optional = |wanted: bool, column: &'static str| {
            wanted.then(|| {
                columns.push(column);
                columns.len() - 1
            })
        };
        let text_at = optional(content.with_text, "text");
        let metadata_at = optional(content.with_metadata, "metadata");
        let vector_at = optional(content.with_vector, "embedding::vector");
        ChunkColumns { sql: columns.join(", "), text_at, metadata_at, vector_at }
    }

    fn hit(&self, row: &tokio_postgres::Row, score: f32) -> StoredHit {
        StoredHit {
            document_id: row.get(0),
            chunk_index: row.get::<_, i32>(1) as u32,
            start_char: row.get::<_, i32>(2) as u32,
            end_char: row.get::<_, i32>(3) as u32,
            score,
            text: self.text_at.map(|i| row.get(i)),
            metadata: self.metadata_at.map(|i| row.get::<_, Json<BTreeMap<String, String>>>(i).0).unwrap_or_default(),
            vector: self.vector_at.map(|i| row.get::<_, Vector>(i).to_vec()),
        }
    }
}
