//! The tables of one index (one PostgreSQL schema named after `--collection`) and
//! their versioned migrations. Every server runs the migrations at start inside one
//! transaction holding an advisory lock, so servers starting together apply each
//! migration once and the others wait, then find it applied.
//!
//! The vector type and dimension are fixed when the index is created; a server
//! started with another model, dimension or `--postgres-vector` refuses to start
//! with a message naming both.

use tokio_postgres::Client;

use super::connection::sql_error;
use crate::error::{Error, Result};

/// One key for every embedwire migration of a database: CREATE EXTENSION is global
/// to the database, so two indexes created at once must not race on it either.
const MIGRATION_LOCK: i64 = 0x656d_6265_6477_6972; // "embedwir"

/// How chunk vectors are stored and indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorType {
    /// 4 bytes a dimension.
    Vector,
    /// 2 bytes a dimension: half the index and faster at the same recall (the default).
    Halfvec,
}

impl VectorType {
    pub fn sql(self) -> &'static str {
        match self {
            VectorType::Vector => "vector",
            VectorType::Halfvec => "halfvec",
        }
    }
}

/// What an index is made of, recorded in its `settings` table.
#[derive(Debug, Clone)]
pub struct IndexShape {
    /// "<model id> dim=<dim>".
    pub model: String,
    pub dim: usize,
    pub vector: VectorType,
    pub hnsw_m: usize,
    pub hnsw_ef_construction: usize,
}

/// A schema name, quoted for SQL (validated by the config: letters, digits, _).
pub fn quoted(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

/// The migrations, in order: version, description, statements.
fn migrations(s: &str, shape: &IndexShape) -> Vec<(i32, &'static str, String)> {
    let (vector, dim) = (shape.vector.sql(), shape.dim);
    let (m, ef) = (shape.hnsw_m, shape.hnsw_ef_construction);
    vec![
        (
            1,
            "documents, chunks with an HNSW index, jobs, pending documents",
            format!(
                "CREATE TABLE {s}.settings (key text PRIMARY KEY, value text NOT NULL);
             CREATE TABLE {s}.documents (
                 doc_id text PRIMARY KEY, text text NOT NULL, metadata jsonb NOT NULL,
                 chunks jsonb NOT NULL, indexed_at double precision NOT NULL);
             CREATE INDEX documents_metadata ON {s}.documents USING gin (metadata jsonb_path_ops);
             CREATE TABLE {s}.chunks (
                 doc_id text NOT NULL, chunk_index integer NOT NULL,
                 start_char integer NOT NULL, end_char integer NOT NULL, hash bytea NOT NULL,
                 text text NOT NULL, metadata jsonb NOT NULL, embedding {vector}({dim}) NOT NULL,
                 PRIMARY KEY (doc_id, chunk_index));
             CREATE INDEX chunks_hash ON {s}.chunks (hash);
             CREATE INDEX chunks_embedding ON {s}.chunks
                 USING hnsw (embedding {vector}_cosine_ops) WITH (m = {m}, ef_construction = {ef});
             CREATE TABLE {s}.jobs (
                 job_id text PRIMARY KEY, state text NOT NULL, total bigint NOT NULL,
                 processed bigint NOT NULL, failed bigint NOT NULL, error text,
                 started_at double precision NOT NULL, finished_at double precision,
                 next_sequence bigint NOT NULL, receiving boolean NOT NULL, revision bigint NOT NULL,
                 lease_owner text, lease_until timestamptz);
             CREATE INDEX jobs_unfinished ON {s}.jobs (job_id) WHERE state IN ('pending', 'running');
             CREATE TABLE {s}.pending (
                 job_id text NOT NULL REFERENCES {s}.jobs ON DELETE CASCADE, sequence bigint NOT NULL,
                 document jsonb NOT NULL, PRIMARY KEY (job_id, sequence));"
            ),
        ),
        (
            2,
            "keyword search: each chunk's English tsvector, generated, with a GIN index",
            // Generated, so every write path (ingest, replace, delete, recovery) keeps it in
            // step with the text without a line of code; an existing index is filled here.
            format!(
                "ALTER TABLE {s}.chunks ADD COLUMN text_search tsvector
                 GENERATED ALWAYS AS (to_tsvector('english', text)) STORED;
             CREATE INDEX chunks_text_search ON {s}.chunks USING gin (text_search);"
            ),
        ),
        (
            3,
            "keyword search by BM25: each chunk's length in lexemes and a postings table kept by a trigger",
            // See `bm25`. The postings are written by a statement trigger on every insert of
            // chunks (COPY included) and go with their chunk by the cascading key, so every
            // write path keeps them in step; chunks are never updated in place. The GIN
            // index of migration 2 served ts_rank, which nothing runs any more.
            format!(
                "CREATE FUNCTION {s}.keyword_length(v tsvector) RETURNS integer
                     LANGUAGE sql IMMUTABLE PARALLEL SAFE
                     AS $$ SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)::integer FROM unnest(v) $$;
             ALTER TABLE {s}.chunks ADD COLUMN keyword_length integer
                 GENERATED ALWAYS AS ({s}.keyword_length(to_tsvector('english', text))) STORED;
             CREATE INDEX chunks_keyword_length ON {s}.chunks (keyword_length);
             DROP INDEX {s}.chunks_text_search;
             CREATE TABLE {s}.chunk_terms (
                 term text NOT NULL, doc_id text NOT NULL, chunk_index integer NOT NULL,
                 frequency real NOT NULL, chunk_length real NOT NULL,
                 FOREIGN KEY (doc_id, chunk_index) REFERENCES {s}.chunks ON DELETE CASCADE);
             CREATE FUNCTION {s}.index_chunk_terms() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     INSERT INTO {s}.chunk_terms (term, doc_id, chunk_index, frequency, chunk_length)
                     SELECT t.lexeme, c.doc_id, c.chunk_index, coalesce(array_length(t.positions, 1), 1), c.keyword_length
                     FROM inserted c, unnest(c.text_search) t;
                     RETURN NULL;
                 END $$;
             CREATE TRIGGER chunks_index_terms AFTER INSERT ON {s}.chunks
                 REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION {s}.index_chunk_terms();
             INSERT INTO {s}.chunk_terms (term, doc_id, chunk_index, frequency, chunk_length)
                 SELECT t.lexeme, c.doc_id, c.chunk_index, coalesce(array_length(t.positions, 1), 1), c.keyword_length
                 FROM {s}.chunks c, unnest(c.text_search) t;
             CREATE INDEX chunk_terms_term ON {s}.chunk_terms (term) INCLUDE (doc_id, chunk_index, frequency, chunk_length);
             CREATE INDEX chunk_terms_chunk ON {s}.chunk_terms (doc_id, chunk_index);"
            ),
        ),
        (
            4,
            "keyword search: postings indexed by (term, chunk), for looking a common term up in a chunk",
            // See `bm25::search_sql`. It serves the scans by term as the index it replaces did.
            format!(
                "CREATE INDEX chunk_terms_term_chunk ON {s}.chunk_terms (term, doc_id, chunk_index)
                     INCLUDE (frequency, chunk_length);
                 DROP INDEX {s}.chunk_terms_term;"
            ),
        ),
    ]
}

/// Creates the extension, the schema and the tables as needed and checks that the
/// index holds `shape`'s vectors. `label` names the database in messages.
pub async fn migrate(client: &mut Client, label: &str, schema: &str, shape: &IndexShape) -> Result<()> {
    let failed = |e| sql_error(label, "migrate", e);
    let s = quoted(schema);
    let tx = client.transaction().await.map_err(failed)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(failed)?;
    if let Err(error) = tx.batch_execute("CREATE EXTENSION IF NOT EXISTS vector").await {
        let detail = error.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| error.to_string());
        return Err(Error::Config(format!(
            "postgres store at {label}: the pgvector extension is missing or cannot be created \
             (CREATE EXTENSION vector: {detail}); install pgvector on the server, or have an administrator \
             run CREATE EXTENSION vector in this database"
        )));
    }
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {s}.migrations (
             version integer PRIMARY KEY, description text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .await
    .map_err(failed)?;
    let applied: i32 = tx
        .query_one(&format!("SELECT coalesce(max(version), 0) FROM {s}.migrations"), &[])
        .await
        .map_err(failed)?
        .get(0);
    let all = migrations(&s, shape);
    let newest = all.last().map_or(0, |(version, _, _)| *version);
    if applied > newest {
        return Err(Error::Config(format!(
            "postgres store at {label}: schema {schema} is at migration {applied}, newer than this \
             server knows ({newest}): upgrade the server"
        )));
    }
    for (version, description, statements) in all.into_iter().filter(|(v, _, _)| *v > applied) {
        tx.batch_execute(&statements).await.map_err(failed)?;
        tx.execute(
            &format!("INSERT INTO {s}.migrations (version, description) VALUES ($1, $2)"),
            &[&version, &description],
        )
        .await
        .map_err(failed)?;
        if version == 1 {
            let settings = format!("INSERT INTO {s}.settings (key, value) VALUES ($1, $2)");
            tx.execute(&settings, &[&"model", &shape.model]).await.map_err(failed)?;
            tx.execute(&settings, &[&"vector", &shape.vector.sql()]).await.map_err(failed)?;
        }
        tracing::info!(schema, version, description, "postgres store: migration applied");
    }
    let settings = tx
        .query(&format!("SELECT key, value FROM {s}.settings WHERE key IN ('model', 'vector')"), &[])
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    for row in settings {
        let (key, value): (String, String) = (row.get(0), row.get(1));
        let (wanted, flag) = match key.as_str() {
            "model" => (shape.model.as_str(), "the model"),
            _ => (shape.vector.sql(), "--postgres-vector"),
        };
        if value != wanted {
            return Err(Error::Config(format!(
                "postgres store at {label}: schema {schema} holds {key} {value:?}, but this server has \
                 {wanted:?} ({flag}); use another --collection or the same settings"
            )));
        }
    }
    Ok(())
}
