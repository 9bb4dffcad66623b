//! Named collections in Weaviate: each is a set of classes of its own beside the
//! default collection's ([`Collections::of_collection`]), made like them and served
//! over the default store's connection. A registry class (`<Base>Collections`) lists
//! them with their settings; a collection exists once its registry object is written.
//!
//! Create: the chunk class is made first, as a claim on the name (a schema change
//! fails if the class exists, so of servers creating one name at once one goes on),
//! then leftover classes of the name deleted, the others made, then the object
//! written; a crash between leaves classes without an object, which a later create of
//! that name deletes once they have stood so for a while. Delete: the object first,
//! then the classes.
//!
//! A named collection's classes have one shard each (replicated as the default
//! collection's are): a shard replica costs a Weaviate node memory, files, goroutines
//! and background work whether it holds anything or not, and most collections are
//! small. Measured (`embedwire-bench collections --store weaviate`): 1.4 MiB of memory
//! per collection per node with the node settings of scripts/cluster.sh; class sets
//! stop scaling at a few hundred collections (the README has the figures), where
//! Weaviate's multi-tenancy would be needed (not built).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use embedwire_proto::weaviate::v1 as pb;

use super::convert::{self, PropertiesBuilder, PropertiesReader};
use super::schema::{self, Collections, Layout};
use super::{CountState, MAX_RESULTS, WeaviateSettings, WeaviateStore};
use crate::collections::CollectionRecord;
use crate::config::Consistency;
use crate::error::{Error, Result};
use crate::store::StoreDescription;

/// Registry reads and writes: a majority of each shard's replicas both ways. Only a read
/// by id is a quorum read: a listing (a search) reads one replica and checks just what
/// it found, so it can miss a collection another server has just made; a refresh
/// reads a collection missing from a listing again before taking it for deleted.
const REGISTRY_CONSISTENCY: Consistency = Consistency::Quorum;

/// How long a collection's classes may stand without its registry object before a
/// create takes them for a crash's leftovers: a create under way writes its object
/// within 1-3 s (four schema changes side by side, each retried for up to 10 s while a
/// Raft leader is elected), and a create that waits this long still answers within the
/// clients' default deadline of 30 s.
const LEFTOVER_AFTER: Duration = Duration::from_secs(20);
/// Between looks at a claimed name.
const CLAIM_PAUSE: Duration = Duration::from_millis(300);

impl WeaviateStore {
    /// The registry class.
    fn registry(&self) -> String {
        format!("{}Collections", self.names.chunks)
    }

    /// Creates the registry if it is missing (every server may, at once).
    pub async fn ensure_collection_registry(&self) -> Result<()> {
        schema::ensure_registry(&self.connection, &self.registry(), self.layout).await
    }

    /// Every named collection, by name.
    pub async fn collection_records(&self) -> Result<Vec<CollectionRecord>> {
        let request = self.lookup(&self.registry(), None, &["name", "record_json"], MAX_RESULTS, REGISTRY_CONSISTENCY);
        let mut records = Vec::new();
        for result in self.query("list collections", request).await? {
            let json = PropertiesReader::of(&result).text("record_json");
            let record: CollectionRecord = serde_json::from_str(&json)
                .map_err(|e| Error::Storage(format!("weaviate store: a collection record: {e}")))?;
            records.push(record);
        }
        records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(records)
    }

    /// Collection `name`'s record, or None. By id, not by a filtered search: Weaviate
    /// runs a search on one replica and checks only the objects it found against the
    /// others, so a search can miss a registry object another server's QUORUM write put
    /// on the other two (seen in CI: a second create of a name answered OK). A read by
    /// id asks a quorum of replicas.
    pub async fn collection_record(&self, name: &str) -> Result<Option<CollectionRecord>> {
        let path = format!(
            "/v1/objects/{}/{}?consistency_level={}",
            self.registry(),
            convert::collection_uuid(name),
            convert::level_name(REGISTRY_CONSISTENCY)
        );
        let Some(object) = self.connection.get_json(&path).await? else { return Ok(None) };
        let json = object.pointer("/properties/record_json").and_then(serde_json::Value::as_str).unwrap_or_default();
        let record = serde_json::from_str(json)
            .map_err(|e| Error::Storage(format!("weaviate store: collection {name}'s record: {e}")))?;
        Ok(Some(record))
    }

    /// Creates collection `record.name`: its chunk class (the claim), the other
    /// classes, then its registry object.
    pub async fn create_collection(&self, record: &CollectionRecord) -> Result<WeaviateStore> {
        let exists = || Error::AlreadyExists(format!("collection {} exists already", record.name));
        if self.collection_record(&record.name).await?.is_some() {
            return Err(exists());
        }
        let names = Collections::of_collection(&self.names.chunks, &record.name);
        if !self.claim(&record.name, &names).await? {
            return Err(exists());
        }
        // This server made the chunk class: any other class of the name is what a crash
        // mid-create or mid-delete left.
        self.delete_classes(&[&names.documents, &names.jobs, &names.pending]).await?;
        let store = self.sibling(names).await?;
        let object = pb::BatchObject {
            uuid: convert::collection_uuid(&record.name),
            collection: self.registry(),
            properties: Some(
                PropertiesBuilder::default()
                    .text("name", record.name.clone())
                    .text("record_json", serde_json::to_string(record).expect("a record serializes"))
                    .build(),
            ),
            ..Default::default()
        };
        self.put_at("create collection", vec![object], REGISTRY_CONSISTENCY).await?;
        Ok(store)
    }

    /// Whether this server may create collection `name`: it made the chunk class, which
    /// of servers creating one name at once only one does (a check of the registry
    /// alone let both go on, the second deleting the first's classes). When the class
    /// exists, another server's create is under way (its registry object follows within
    /// seconds: false) or was cut short by a crash: classes left without an object for
    /// [`LEFTOVER_AFTER`] are deleted, and the claim is tried again.
    async fn claim(&self, name: &str, names: &Collections) -> Result<bool> {
        let layout = self.collection_layout();
        let mut leftover_at = Instant::now() + LEFTOVER_AFTER;
        loop {
            if schema::make_chunk_class(&self.connection, names, &self.model, layout).await? {
                return Ok(true);
            }
            if self.collection_record(name).await?.is_some() {
                return Ok(false);
            }
            if Instant::now() >= leftover_at {
                tracing::warn!(collection = name, "deleting classes left without a registry object");
                self.delete_classes(&names.all()).await?;
                // Another server may claim the name now: wait for its object as long again.
                leftover_at = Instant::now() + LEFTOVER_AFTER;
            }
            tokio::time::sleep(CLAIM_PAUSE).await;
        }
    }

    /// A named collection's classes: one shard each (see the module's notes).
    fn collection_layout(&self) -> Layout {
        Layout { shards: 1, ..self.layout }
    }

    /// The store of an existing collection.
    pub async fn open_collection(&self, record: &CollectionRecord) -> Result<WeaviateStore> {
        self.sibling(Collections::of_collection(&self.names.chunks, &record.name)).await
    }

    /// Deletes collection `name`: its registry object, then its classes.
    pub async fn delete_collection(&self, name: &str) -> Result<()> {
        let path = format!("/v1/objects/{}/{}", self.registry(), convert::collection_uuid(name));
        self.connection.delete(&path).await?;
        self.delete_classes(&Collections::of_collection(&self.names.chunks, name).all()).await
    }

    /// Deletes those of `classes` that exist, side by side: a delete is a Raft round
    /// even for a class that is not there, so each is looked up first.
    async fn delete_classes(&self, classes: &[&str]) -> Result<()> {
        let delete = async |class: &str| {
            let path = format!("/v1/schema/{class}");
            if self.connection.get_json(&path).await?.is_some() {
                self.connection.delete(&path).await?;
            }
            Ok(())
        };
        futures::future::try_join_all(classes.iter().map(|class| delete(class))).await.map(drop)
    }

    /// A store over the classes `names` (made here if missing, one shard each) sharing
    /// this one's connection, health and server id.
    async fn sibling(&self, names: Collections) -> Result<WeaviateStore> {
        let layout = self.collection_layout();
        let ensured = schema::ensure(&self.connection, &names, &self.model, layout).await?;
        let description = StoreDescription {
            index_id: self.description.index_id.replacen(&self.names.chunks, &names.chunks, 1),
            ..self.description.clone()
        };
        let store = WeaviateStore {
            connection: self.connection.clone(),
            settings: WeaviateSettings { collection: names.chunks.clone(), ..self.settings.clone() },
            names,
            description,
            server_id: self.server_id.clone(),
            health: self.health.clone(),
            counts: Arc::new(Mutex::new(CountState::default())),
            replica_errors: self.replica_errors.clone(),
            keyword: ensured.keyword,
            model: self.model.clone(),
            layout,
            queue_looks: Arc::default(),
            foreign_leases: self.foreign_leases.clone(),
            final_headers: Arc::default(),
        };
        store.refresh_counts().await;
        store.spawn_health_follower(false);
        Ok(store)
    }
}
