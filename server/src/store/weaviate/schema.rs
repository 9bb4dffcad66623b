//! The four Weaviate collections behind one embedwire collection name, created once
//! (idempotently: servers may start at the same moment) over Weaviate's REST API.
//!
//! - `<Name>`: one object per chunk, with its vector (cosine HNSW), document id,
//!   chunk index, spans, content hash, text and metadata.
//! - `<Name>Documents`: one object per document: text, metadata, chunk spans.
//! - `<Name>Jobs`: two objects per job: the header (written by the server that took
//!   the ingest) and the progress (written by whichever server runs it, with the lease).
//! - `<Name>Pending`: documents acknowledged but not yet indexed.
//!
//! The chunk collection's description records the model and dimension; a server
//! with another model is refused at start.

use serde_json::{Value, json};

use super::client::Connection;
use crate::error::{Error, Result};

/// The Weaviate class names of one embedwire collection.
#[derive(Debug, Clone)]
pub struct Collections {
    pub chunks: String,
    pub documents: String,
    pub jobs: String,
    pub pending: String,
}

impl Collections {
    /// The classes of named collection `collection` beside the default collection's
    /// `base` classes: `<Base>_<collection>_`, `<Base>_<collection>_Documents`, ... A
    /// collection name is lower case and a suffix ends in a letter, so no two
    /// collections' classes meet, even compared without case.
    pub fn of_collection(base: &str, collection: &str) -> Self {
        Collections::named(&format!("{base}_{collection}_"))
    }

    /// Every class, chunks first.
    pub fn all(&self) -> [&str; 4] {
        [&self.chunks, &self.documents, &self.jobs, &self.pending]
    }

    /// The classes of `name` (first letter upper-cased, as Weaviate requires).
    pub fn named(name: &str) -> Self {
        let mut chars = name.chars();
        let base = match chars.next() {
            Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
            None => String::new(),
        };
        Collections {
            chunks: base.clone(),
            documents: format!("{base}Documents"),
            jobs: format!("{base}Jobs"),
            pending: format!("{base}Pending"),
        }
    }
}

/// How a new collection is laid out over the cluster.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub shards: usize,
    pub replication_factor: usize,
}

fn text(name: &str, filterable: bool) -> Value {
    json!({"name": name, "dataType": ["text"], "tokenization": "field",
           "indexFilterable": filterable, "indexSearchable": false})
}

/// A text Weaviate ranks by BM25: split into lower-cased words, English stop words
/// left out of the ranking (the class's preset). Weaviate has no stemmer: the chunk
/// class's `keyword_text` holds the embedded store's analyzed words (stemmed) instead
/// of the text itself.
fn searchable_text(name: &str) -> Value {
    json!({"name": name, "dataType": ["text"], "tokenization": "word",
           "indexFilterable": false, "indexSearchable": true})
}

fn texts(name: &str) -> Value {
    json!({"name": name, "dataType": ["text[]"], "tokenization": "field",
           "indexFilterable": true, "indexSearchable": false})
}

fn number(name: &str, filterable: bool) -> Value {
    json!({"name": name, "dataType": ["number"], "indexFilterable": filterable, "indexRangeFilters": false})
}

fn boolean(name: &str) -> Value {
    json!({"name": name, "dataType": ["boolean"], "indexFilterable": true})
}

/// The model marker in the chunk collection's description.
fn model_marker(model: &str) -> String {
    format!("embedwire chunks; model: {model}")
}

fn class(name: &str, description: &str, layout: Layout, vectors: bool, properties: Vec<Value>) -> Value {
    let mut definition = json!({
        "class": name,
        "description": description,
        "vectorizer": "none",
        "vectorIndexType": "hnsw",
        "vectorIndexConfig": {"distance": "cosine", "skip": !vectors},
        "shardingConfig": {"desiredCount": layout.shards},
        // A node that was down misses the writes and deletes made meanwhile, and a
        // search (any consistency level) reads one replica per shard, preferring the
        // coordinator's own: without repair, every read through a restarted node hides
        // acknowledged documents and counts deleted pending ones (seen in
        // tests/weaviate_faults.rs). Async replication repairs in the background;
        // time-based resolution lets the newer delete win, so deletes reach it too.
        "replicationConfig": {
            "factor": layout.replication_factor,
            "asyncEnabled": true,
            "deletionStrategy": "TimeBasedResolution",
        },
        "invertedIndexConfig": {"indexTimestamps": false},
        "properties": properties,
    });
    if vectors {
        definition["vectorIndexConfig"] = vector_index_config();
        // BM25's usual constants (Weaviate's defaults, written down so that they stay).
        definition["invertedIndexConfig"] =
            json!({"indexTimestamps": false, "bm25": {"k1": 1.2, "b": 0.75}, "stopwords": {"preset": "en"}});
    }
    definition
}

/// The HNSW search breadth (ef) of the chunk collection: `limit` x this factor,
/// between Weaviate's default bounds of 100 and 500. Weaviate's default factor, 8,
/// made a hybrid search's 50 vector candidates (its depth then) cost ef 400 on every
/// shard against 100 for a page of 10; 2 gives any page up to 50 ef 100, as
/// PostgreSQL's `--postgres-ef-search` (measured at 10,000 SciFact documents,
/// `embedwire-bench retrieval`: README).
const DYNAMIC_EF_FACTOR: u64 = 2;

fn vector_index_config() -> Value {
    json!({"distance": "cosine", "skip": false,
           "dynamicEfFactor": DYNAMIC_EF_FACTOR, "dynamicEfMin": 100, "dynamicEfMax": 500})
}

/// Gives an existing chunk collection this version's search breadth (Weaviate lets
/// it change in place); a refusal only warns: searches work as before.
async fn update_search_breadth(connection: &Connection, name: &str, existing: &mut Value) {
    if existing["vectorIndexConfig"]["dynamicEfFactor"] == json!(DYNAMIC_EF_FACTOR) {
        return;
    }
    let mut changed = existing.clone();
    changed["vectorIndexConfig"]["dynamicEfFactor"] = json!(DYNAMIC_EF_FACTOR);
    match connection.put_json(&format!("/v1/schema/{name}"), &changed).await {
        Ok((status, _)) if (200..300).contains(&status) => {
            tracing::info!(collection = name, factor = DYNAMIC_EF_FACTOR, "set the collection's dynamicEfFactor");
            *existing = changed;
        }
        Ok((status, body)) => {
            tracing::warn!(collection = name, status, %body, "could not set the collection's dynamicEfFactor")
        }
        Err(error) => tracing::warn!(collection = name, %error, "could not set the collection's dynamicEfFactor"),
    }
}

/// The chunk property holding the chunk's analyzed words, indexed for BM25.
pub const KEYWORD_TEXT: &str = "keyword_text";

/// Which chunk property keyword search ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeywordField {
    /// [`KEYWORD_TEXT`]: the analyzed words (stemmed, as the embedded store ranks
    /// them); queries are analyzed the same way.
    Analyzed,
    /// `text` itself, as the first keyword-search version indexed it (lower-cased
    /// words, no stemming); queries are sent as typed. Measured on SciFact train, it
    /// ranks 0.03 nDCG@10 below the analyzed form; a new collection gets that form.
    Text,
}

/// What [`ensure`] found.
pub struct Ensured {
    /// What the chunks are ranked by for BM25; None for a collection created before
    /// keyword search, whose text is not indexed. Weaviate cannot index an existing
    /// property afterwards: such a collection keeps serving vector search, and keyword
    /// and hybrid searches are refused with a message saying to use a new collection.
    pub keyword: Option<KeywordField>,
}

/// Creates the collections that are missing and checks the chunk collection's model
/// (`model` names the model id and dimension).
/// The four classes' definitions, the chunk class first.
fn definitions(names: &Collections, model: &str, layout: Layout) -> [Value; 4] {
    [
        class(
            &names.chunks,
            &model_marker(model),
            layout,
            true,
            vec![
                text("doc_id", true),
                number("chunk_index", true),
                number("start_byte", false),
                number("end_byte", false),
                number("start_char", false),
                number("end_char", false),
                text("hash", true),
                text("text", false),
                searchable_text(KEYWORD_TEXT),
                text("metadata_json", false),
                texts("meta"),
            ],
        ),
        class(
            &names.documents,
            "embedwire documents",
            layout,
            false,
            vec![
                text("doc_id", true),
                text("text", false),
                text("metadata_json", false),
                text("chunks_json", false),
                number("indexed_at", false),
                texts("meta"),
            ],
        ),
        class(
            &names.jobs,
            "embedwire ingestion jobs",
            layout,
            false,
            vec![
                text("job_id", true),
                text("part", true),
                text("state", true),
                text("record_json", false),
                text("lease_owner", false),
                number("lease_until", false),
            ],
        ),
        class(
            &names.pending,
            "embedwire documents acknowledged and not yet indexed",
            layout,
            false,
            vec![
                text("job_id", true),
                number("sequence", true),
                boolean("failed"),
                text("reason", false),
                text("document_json", false),
            ],
        ),
    ]
}

/// Makes the chunk class of `names` if no class of that name exists, in one Raft-ordered
/// schema change; whether this call made it. Of servers creating one collection at the
/// same moment exactly one makes it: that is how they agree who creates it.
pub async fn make_chunk_class(
    connection: &Connection,
    names: &Collections,
    model: &str,
    layout: Layout,
) -> Result<bool> {
    let [chunks, ..] = definitions(names, model, layout);
    Ok(post_class(connection, &names.chunks, &chunks).await? == Posted::Created)
}

pub async fn ensure(connection: &Connection, names: &Collections, model: &str, layout: Layout) -> Result<Ensured> {
    let mut keyword = None;
    let definitions = definitions(names, model, layout);
    // The classes are made side by side: each is a Raft round and a wait for every node
    // (about 0.15 s), and a collection is four of them.
    let made = futures::future::try_join_all(definitions.iter().map(|definition| ensure_class(connection, definition)));
    for (definition, mut existing) in definitions.iter().zip(made.await?) {
        let name = definition["class"].as_str().expect("class name");
        if name == names.chunks {
            check_model(name, &existing, model)?;
            update_search_breadth(connection, name, &mut existing).await;
            keyword = keyword_field(&existing);
            if keyword.is_none() {
                tracing::warn!(
                    collection = name,
                    "this collection was created before keyword search: vector search only \
                     (keyword and hybrid modes need a new --collection)"
                );
            }
        }
    }
    Ok(Ensured { keyword })
}

/// Class `definition` as Weaviate has it (made first if missing), once every answering
/// node has applied it.
async fn ensure_class(connection: &Connection, definition: &Value) -> Result<Value> {
    let name = definition["class"].as_str().expect("class name");
    let existing = match connection.get_json(&format!("/v1/schema/{name}")).await? {
        Some(existing) => existing,
        None => create(connection, name, definition).await?,
    };
    wait_on_every_node(connection, name).await;
    Ok(existing)
}

/// Creates the registry of named collections (class `name`: one object per
/// collection, its record as JSON) if it is missing.
pub async fn ensure_registry(connection: &Connection, name: &str, layout: Layout) -> Result<()> {
    let definition =
        class(name, "embedwire named collections", layout, false, vec![text("name", true), text("record_json", false)]);
    if connection.get_json(&format!("/v1/schema/{name}")).await?.is_none() {
        create(connection, name, &definition).await?;
    }
    wait_on_every_node(connection, name).await;
    Ok(())
}

/// Which of a chunk class's properties is indexed for BM25, the analyzed words first.
fn keyword_field(class: &Value) -> Option<KeywordField> {
    let searchable = |name: &str| {
        class["properties"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == name && p["indexSearchable"] == true && p["tokenization"] != "field")
    };
    if searchable(KEYWORD_TEXT) {
        Some(KeywordField::Analyzed)
    } else if searchable("text") {
        Some(KeywordField::Text)
    } else {
        None
    }
}

/// Longest wait for every answering node to apply a new collection.
const APPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until every node that answers has collection `name` in its own schema, so
/// the first write after a start cannot reach a node that has not applied it yet.
/// A node that does not answer is not waited for (it catches up from the Raft log
/// when it returns); after [`APPLY_TIMEOUT`] the server starts anyway, with a warning,
/// and a write that reaches a lagging node fails as UNAVAILABLE until it catches up.
async fn wait_on_every_node(connection: &Connection, name: &str) {
    let started = std::time::Instant::now();
    loop {
        let lagging: Vec<usize> = connection
            .collection_on_each_node(name)
            .await
            .iter()
            .enumerate()
            .filter(|(_, has)| **has == Some(false))
            .map(|(node, _)| node)
            .collect();
        if lagging.is_empty() {
            return;
        }
        if started.elapsed() >= APPLY_TIMEOUT {
            tracing::warn!(collection = name, ?lagging, "weaviate nodes have not applied the collection yet");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Schema changes go through the cluster's Raft leader; while a leader is being
/// elected (a cluster just started or restarted) they fail for a few seconds.
const SCHEMA_ATTEMPTS: u32 = 20;
const SCHEMA_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Creates one class; when another server created it first, reads theirs.
async fn create(connection: &Connection, name: &str, definition: &Value) -> Result<Value> {
    match post_class(connection, name, definition).await? {
        Posted::Created => Ok(definition.clone()),
        Posted::Existed => connection
            .get_json(&format!("/v1/schema/{name}"))
            .await?
            .ok_or_else(|| Error::Config(format!("weaviate collection {name} vanished while it was being created"))),
    }
}

#[derive(Debug, PartialEq)]
enum Posted {
    Created,
    Existed,
}

/// Posts one class definition, retrying while the Raft leader is being elected.
async fn post_class(connection: &Connection, name: &str, definition: &Value) -> Result<Posted> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (status, body) = connection.post_json("/v1/schema", definition).await?;
        if (200..300).contains(&status) {
            tracing::info!(collection = name, "created the weaviate collection");
            return Ok(Posted::Created);
        }
        if status == 422 && body.contains("already exists") {
            return Ok(Posted::Existed);
        }
        let leader_busy = status >= 500 || body.contains("rpc error") || body.contains("leader");
        if !leader_busy || attempt >= SCHEMA_ATTEMPTS {
            return Err(Error::Config(format!("weaviate refused to create collection {name}: HTTP {status}: {body}")));
        }
        tracing::info!(collection = name, status, %body, "schema change not accepted yet; retrying");
        tokio::time::sleep(SCHEMA_RETRY_PAUSE).await;
    }
}

fn check_model(name: &str, existing: &Value, model: &str) -> Result<()> {
    let description = existing["description"].as_str().unwrap_or_default();
    let expected = model_marker(model);
    if description != expected {
        let held = description.strip_prefix("embedwire chunks; model: ").unwrap_or(description);
        return Err(Error::Config(format!(
            "weaviate collection {name} holds vectors of {held:?}, not {model:?} (model or dimension differ): \
             use another --collection"
        )));
    }
    Ok(())
}
