//! Named collections in PostgreSQL: each is a schema of its own beside the default
//! collection's (`<schema>__<name>`), with the same tables, migrations and indexes,
//! served over the default store's connection pools. A registry table in the default
//! schema lists them with their settings; a collection exists once its row is
//! committed.
//!
//! Create: the row is inserted (dropping a schema of the name left by an older
//! version's crash mid-create), then the schema migrated (created); a crash between
//! leaves a row without a schema, which opening the collection creates.
//! Delete: the row and the schema go in one transaction.

use std::sync::Arc;

use tokio_postgres::types::Json;

use super::schema::{self, quoted};
use super::{PostgresSettings, PostgresStore};
use crate::collections::CollectionRecord;
use crate::error::{Error, Result};
use crate::store::{StoreDescription, ViewCounts};

/// PostgreSQL's longest identifier, in bytes.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// Serializes creating the registry with other servers doing the same.
const REGISTRY_LOCK: i64 = 0x656d_6265_6477_6963; // "embedwic"

impl PostgresStore {
    /// The registry, quoted: a table of the default schema.
    fn registry(&self) -> String {
        format!("{}.collections", self.schema)
    }

    /// The schema of collection `name`; INVALID_ARGUMENT when the prefix leaves no room.
    fn collection_schema(&self, name: &str) -> Result<String> {
        let schema = format!("{}__{name}", self.settings.schema);
        if schema.len() > MAX_IDENTIFIER_BYTES {
            return Err(Error::invalid(
                "name",
                format!(
                    "{name:?} is too long for the postgres store under --collection {}: its schema {schema} \
                     would pass PostgreSQL's {MAX_IDENTIFIER_BYTES} bytes",
                    self.settings.schema
                ),
            ));
        }
        Ok(schema)
    }

    /// Creates the registry if it is missing (every server may, at once).
    pub async fn ensure_collection_registry(&self) -> Result<()> {
        let registry = self.registry();
        self.write("collections registry", move |tx| {
            Box::pin(async move {
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&REGISTRY_LOCK]).await?;
                tx.batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {registry} (name text PRIMARY KEY, record jsonb NOT NULL)"
                ))
                .await
            })
        })
        .await
    }

    /// Every named collection, by name (read on the primary: a collection created a
    /// moment ago through another server is there).
    pub async fn collection_records(&self) -> Result<Vec<CollectionRecord>> {
        let sql = format!("SELECT record FROM {} ORDER BY name", self.registry());
        let rows = self.query_primary("list collections", &sql, &[]).await?;
        Ok(rows.iter().map(|row| row.get::<_, Json<CollectionRecord>>(0).0).collect())
    }

    /// Creates collection `record.name`: its registry row, then its schema.
    pub async fn create_collection(&self, record: &CollectionRecord) -> Result<Arc<PostgresStore>> {
        let schema = self.collection_schema(&record.name)?;
        let (registry, row, name, leftover) =
            (self.registry(), Json(record.clone()), record.name.clone(), quoted(&schema));
        // The row first, and what a crash left of an earlier create dropped in the same
        // transaction: of servers creating one name at once exactly one inserts the row
        // (the others wait on it, then find it), and the schema it may drop is nobody's.
        // (Schema first let a second create drop the first's schema as a leftover.)
        let inserted = self
            .write("create collection", move |tx| {
                Box::pin(async move {
                    let sql = format!("INSERT INTO {registry} (name, record) VALUES ($1, $2) ON CONFLICT DO NOTHING");
                    let inserted = tx.execute(&sql, &[&name, &row]).await?;
                    if inserted == 1 {
                        tx.batch_execute(&format!("DROP SCHEMA IF EXISTS {leftover} CASCADE")).await?;
                    }
                    Ok(inserted)
                })
            })
            .await?;
        if inserted == 0 {
            return Err(Error::AlreadyExists(format!("collection {} exists already", record.name)));
        }
        // A listed collection whose schema is missing gets it when opened, so a failure
        // here leaves nothing broken; the row goes again so that the create can be retried.
        match self.sibling(&schema).await {
            Ok(store) => Ok(store),
            Err(error) => {
                if let Err(undo) = self.delete_collection(&record.name).await {
                    tracing::warn!(collection = %record.name, %undo, "could not undo a failed create");
                }
                Err(error)
            }
        }
    }

    /// The store of an existing collection (its schema migrated to this version).
    pub async fn open_collection(&self, record: &CollectionRecord) -> Result<Arc<PostgresStore>> {
        self.sibling(&self.collection_schema(&record.name)?).await
    }

    /// Deletes collection `name`: its row and its schema, in one transaction.
    pub async fn delete_collection(&self, name: &str) -> Result<()> {
        let schema = quoted(&self.collection_schema(name)?);
        let (registry, name) = (self.registry(), name.to_string());
        self.write("delete collection", move |tx| {
            Box::pin(async move {
                tx.execute(&format!("DELETE FROM {registry} WHERE name = $1"), &[&name]).await?;
                tx.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await
            })
        })
        .await
    }

    /// A store over schema `schema` (created or migrated here) sharing this one's
    /// pools, health and server id.
    async fn sibling(&self, schema: &str) -> Result<Arc<PostgresStore>> {
        let primary = self.pools.primary();
        let mut client = primary.connection("migrate").await?;
        schema::migrate(&mut client, &primary.label, schema, &self.shape).await?;
        drop(client);
        let description =
            StoreDescription { index_id: format!("postgres:{schema}@{}", primary.label), ..self.description.clone() };
        let store = Arc::new(PostgresStore {
            pools: self.pools.clone(),
            settings: PostgresSettings { schema: schema.to_string(), ..self.settings.clone() },
            schema: quoted(schema),
            shape: self.shape.clone(),
            description,
            server_id: self.server_id.clone(),
            embedding_type: self.embedding_type.clone(),
            health: self.health.clone(),
            counts: Arc::new(std::sync::Mutex::new(ViewCounts::default())),
            keyword_corpus: Default::default(),
            term_counts: Default::default(),
        });
        store.refresh_counts().await?;
        Ok(store)
    }
}
