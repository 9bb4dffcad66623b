//! The Weaviate store: one index in a Weaviate cluster (sharded, replicated),
//! shared by any number of embedwire servers. Everything a server must not lose
//! lives in the cluster, so a server holds no state of its own: jobs, documents
//! waiting to be indexed, documents, chunks and their vectors.
//!
//! # Layout
//! - [`client`]: gRPC and HTTP connections to the nodes, failover, metrics.
//! - [`schema`]: the collections, created once, and the model check.
//! - [`convert`]: object ids, properties, metadata filters.
//! - [`jobs`]: job records, leases, pending documents.
//! - [`ghosts`]: pending documents that Weaviate brings back after their job ended.
//! - [`replicas`]: Weaviate's replica and consistency errors, explained.
//!
//! Writes go out at `--write-consistency` (QUORUM by default) with object ids
//! derived from (document id, chunk index), so a batch written twice (a retry, or
//! two servers after a lease ran out) is stored once. Searches read at
//! `--read-consistency`. Reads that decide a job (its record, whether its documents
//! are done) go by object id at a level R with R + W > RF, so they overlap every
//! acknowledged write: a search is answered from one replica per shard and can miss
//! objects that replica did not receive (see [`jobs`]).

pub mod client;
mod collections;
pub mod convert;
pub mod ghosts;
pub mod indexing;
pub mod jobs;
pub mod replicas;
pub mod schema;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use embedwire_proto::weaviate::v1 as pb;
use pb::filters::Operator;

use self::client::Connection;
use self::convert::{PropertiesBuilder, PropertiesReader};
use self::replicas::ReplicaErrors;
use self::schema::{Collections, Layout};
use super::HitContent;
use super::embedded::keyword::{self, KeywordIndex};
use super::{
    Claim, CorpusStore, CountAccuracy, DocumentRecord, IndexStats, IndexedDocument, JobChange, JobRecord, KeywordQuery,
    NewDocument, StoreDescription, StoreHealth, StoreNode, StoreQuery, StoredHit, ViewCounts,
};
use crate::config::{Consistency, ServerConfig};
use crate::corpus::filter::Filter;
use crate::corpus::text::ContentHash;
use crate::error::{Error, Result};

/// Objects per BatchObjects call.
const WRITE_BATCH_OBJECTS: usize = 512;
/// Weaviate's default cap on results of one query (QUERY_MAXIMUM_RESULTS), which
/// also bounds one batch delete.
pub const MAX_RESULTS: usize = 10_000;
/// How often the store's health and sizes are read in the background.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
/// Document and chunk counts are refreshed every this many health checks.
const COUNTS_EVERY: u32 = 5;
/// Ghost pending documents are looked for every this many health checks (when some
/// are counted pending): a list of the unfinished jobs and one query.
const GHOSTS_EVERY: u32 = 10;

/// The `--weaviate-*` settings.
#[derive(Debug, Clone)]
pub struct WeaviateSettings {
    pub http_urls: Vec<String>,
    pub grpc_addresses: Vec<String>,
    pub collection: String,
    pub shards: Option<usize>,
    pub replication_factor: Option<usize>,
    pub read_consistency: Consistency,
    pub write_consistency: Consistency,
    pub timeout: Duration,
    pub job_lease: Duration,
}

impl WeaviateSettings {
    /// The settings of the server's flags.
    pub fn from_config(config: &ServerConfig) -> Self {
        WeaviateSettings {
            http_urls: config.weaviate_http.iter().map(|u| u.trim_end_matches('/').to_string()).collect(),
            grpc_addresses: config.weaviate_grpc.clone(),
            collection: config.collection.clone(),
            shards: config.shards,
            replication_factor: config.replication_factor,
            read_consistency: config.read_consistency,
            write_consistency: config.write_consistency,
            timeout: Duration::from_secs_f64(config.weaviate_timeout_secs),
            job_lease: Duration::from_secs_f64(config.job_lease_secs),
        }
    }
}

fn level(consistency: Consistency) -> i32 {
    (match consistency {
        Consistency::One => pb::ConsistencyLevel::One,
        Consistency::Quorum => pb::ConsistencyLevel::Quorum,
        Consistency::All => pb::ConsistencyLevel::All,
    }) as i32
}

/// A Weaviate cluster as a [`CorpusStore`].
pub struct WeaviateStore {
    connection: Arc<Connection>,
    names: Collections,
    settings: WeaviateSettings,
    description: StoreDescription,
    /// This server's name in job leases.
    server_id: String,
    /// The nodes as last read, every node known since the start included.
    health: Arc<Mutex<StoreHealth>>,
    counts: Arc<Mutex<CountState>>,
    /// Turns replica errors into reasons (job errors show them to users).
    replica_errors: Arc<ReplicaErrors>,
    /// What keyword search ranks, if anything (see [`schema::Ensured`]).
    keyword: Option<schema::KeywordField>,
    /// The model marker and layout its classes were made with (named collections'
    /// classes are made the same).
    model: String,
    layout: Layout,
    /// Reads of the chunk collection's vector queues, shared by settles waiting at once.
    queue_looks: Arc<indexing::QueueLooks>,
    /// Job leases seen held by other servers (claims skip those jobs until they lapse).
    foreign_leases: Arc<jobs::ForeignLeases>,
    /// Headers of this collection's jobs that no longer receive (see [`jobs::FinalHeaders`]).
    final_headers: Arc<jobs::FinalHeaders>,
}

/// Objects in the three collections that [`IndexStats`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    documents: u64,
    chunks: u64,
    pending: u64,
}

/// More chunk vectors than the longest queue of any other node, beyond which a node's
/// vector index is taken to be rebuilding rather than keeping up with writes. Steady
/// ingest on loopback keeps each node's queue within a few batches of the others'
/// (tens to hundreds of vectors); a rebuild queues every vector the node stores.
const REBUILDING_QUEUE_MARGIN: u64 = 1_000;

/// Whether each counted node (index, tally) is complete: it counts as many documents
/// and chunks as any other node, and its vector index is not far behind its objects.
///
/// A restarted node rebuilds its vector indexes from its objects
/// (`scripts/cluster.sh restart`, which says why): it counts every object while its
/// searches still miss the vectors queued for the rebuild. `queued` holds each node's
/// queued chunk vectors (None: not known, which judges by the counts alone).
fn complete_nodes(counted: &[(usize, Tally)], queued: &[Option<u64>]) -> Vec<(usize, bool)> {
    let most_documents = counted.iter().map(|(_, t)| t.documents).max().unwrap_or(0);
    let most_chunks = counted.iter().map(|(_, t)| t.chunks).max().unwrap_or(0);
    let queued_at = |node: usize| queued.get(node).copied().flatten();
    counted
        .iter()
        .map(|&(node, tally)| {
            let counts_all = tally.documents >= most_documents && tally.chunks >= most_chunks;
            let longest_other = (0..queued.len()).filter(|&other| other != node).filter_map(queued_at).max();
            let rebuilding = match (queued_at(node), longest_other) {
                (Some(own), Some(other)) => own > other + REBUILDING_QUEUE_MARGIN,
                // Nothing to compare with (one node, or the others' queues unknown).
                _ => false,
            };
            (node, counts_all && !rebuilding)
        })
        .collect()
}

/// The store's counts as far as it can vouch for them.
///
/// Weaviate answers an Aggregate from whatever replicas the coordinating node picks,
/// without a consistency level: with a node missing (or just back and not repaired
/// by async replication yet) it counts part of the index and says nothing, e.g. 192
/// of 300 documents, or 0. So a count is taken as exact only when every known node
/// is healthy before and after it and every node the server reaches gives the same
/// counts; otherwise the last exact counts are kept and reported with their age.
/// The last exact count rather than `null`: old clients (GetIndexStats has plain
/// integers, `/healthz` a number) keep a number that was true at a stated time
/// instead of a 0, and with replication one lost node changes nothing stored; a
/// server that never counted exactly reports unknown.
#[derive(Debug, Default)]
struct CountState {
    /// The last exact counts and when they were taken.
    exact: Option<(Tally, Instant)>,
    /// Why the latest count was not exact (None when it was).
    failing: Option<String>,
    /// Per node: count rounds running in which it counted less than another node.
    short_rounds: Vec<u32>,
    /// Documents were accepted or a job claimed through this store since the last
    /// count began: the background count of a named collection runs only then or while
    /// documents are pending (see [`WeaviateStore::spawn_health_follower`]).
    written: bool,
}

impl CountState {
    /// Whether an idle named collection's follower should count it: something was
    /// written through this server, or the last count saw documents pending (a job
    /// running, or a pending document come back after its job: ghosts to sweep).
    fn busy(&self) -> bool {
        self.written || self.exact.is_none_or(|(tally, _)| tally.pending > 0)
    }

    fn accuracy(&self) -> CountAccuracy {
        match (&self.exact, &self.failing) {
            (Some(_), None) => CountAccuracy::Exact,
            (Some((_, counted_at)), Some(reason)) => {
                CountAccuracy::LastExact { counted_at: *counted_at, reason: reason.clone() }
            }
            (None, reason) => {
                CountAccuracy::Unknown { reason: reason.clone().unwrap_or_else(|| "not counted yet".to_string()) }
            }
        }
    }

    fn stats(&self) -> IndexStats {
        let tally = self.exact.map(|(tally, _)| tally).unwrap_or(Tally { documents: 0, chunks: 0, pending: 0 });
        IndexStats {
            documents: tally.documents,
            chunks: tally.chunks,
            unique_vectors: tally.chunks,
            pending_documents: tally.pending,
            accuracy: self.accuracy(),
        }
    }
}

impl WeaviateStore {
    /// Reaches the cluster, creates the collections if missing and checks that they
    /// hold vectors of `model_id` with `dim` dimensions. Any failure is a clear
    /// configuration error: the server does not start against a cluster it cannot use.
    pub async fn connect(settings: WeaviateSettings, model_id: &str, dim: usize) -> Result<Self> {
        let connection =
            Arc::new(Connection::new(settings.http_urls.clone(), &settings.grpc_addresses, settings.timeout)?);
        let nodes = read_nodes(&connection).await.map_err(|e| {
            Error::Config(format!("--weaviate-http {}: cannot reach the cluster: {e}", settings.http_urls.join(",")))
        })?;
        // The cluster is at least as big as it says and as the addresses configured: a
        // node that is down (killed, restarting) drops out of /v1/nodes, and a server
        // restarted meanwhile must start on the collections' layout, not refuse it.
        let node_count = nodes.len().max(connection.node_count()).max(1);
        let layout = Layout {
            shards: settings.shards.unwrap_or(node_count),
            replication_factor: settings.replication_factor.unwrap_or(node_count.min(3)),
        };
        if layout.replication_factor > node_count {
            return Err(Error::Config(format!(
                "--replication-factor {} exceeds the cluster's {node_count} nodes",
                layout.replication_factor
            )));
        }
        let names = Collections::named(&settings.collection);
        let model = format!("{model_id} dim={dim}");
        let ensured = schema::ensure(&connection, &names, &model, layout).await?;
        let mut node_names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        node_names.sort();
        let description = StoreDescription {
            kind: "weaviate",
            shared: true,
            index_id: format!("weaviate:{}@{}", names.chunks, node_names.join(",")),
            index_kind: "weaviate-hnsw",
        };
        let store = WeaviateStore {
            connection: connection.clone(),
            names,
            settings,
            description,
            server_id: uuid::Uuid::new_v4().to_string(),
            health: Arc::new(Mutex::new(StoreHealth { healthy: true, detail: String::new(), nodes })),
            counts: Arc::new(Mutex::new(CountState::default())),
            replica_errors: Arc::new(ReplicaErrors::new(layout.replication_factor)),
            keyword: ensured.keyword,
            model,
            layout,
            queue_looks: Arc::default(),
            foreign_leases: Arc::default(),
            final_headers: Arc::default(),
        };
        // The data API must answer too, not only the REST one.
        store
            .count(&store.names.jobs.clone(), None)
            .await
            .map_err(|e| Error::Config(format!("--weaviate-grpc {}: {e}", store.settings.grpc_addresses.join(","))))?;
        // A cluster missing a node still serves: the server starts with the counts
        // unknown until they can be counted exactly.
        let stats = store.refresh_counts().await;
        if let Some(reason) = stats.accuracy.reason() {
            tracing::warn!(reason, "weaviate store: counts unknown until every node is back");
        }
        tracing::info!(
            index = %store.description.index_id,
            shards = layout.shards,
            replication_factor = layout.replication_factor,
            "weaviate store ready"
        );
        store.spawn_health_follower(true);
        Ok(store)
    }

    /// Reads the node list and, now and then, the sizes, until the store is dropped.
    /// A named collection's store (`reads_nodes` false) shares its root's node list
    /// and only counts its own classes and sweeps their ghosts.
    /// Marks the counts as changing (documents accepted, a job claimed).
    fn note_write(&self) {
        self.counts.lock().expect("lock").written = true;
    }

    fn spawn_health_follower(&self, reads_nodes: bool) {
        let follower = WeaviateStore {
            connection: self.connection.clone(),
            names: self.names.clone(),
            settings: self.settings.clone(),
            description: self.description.clone(),
            server_id: self.server_id.clone(),
            health: self.health.clone(),
            counts: self.counts.clone(),
            replica_errors: self.replica_errors.clone(),
            keyword: self.keyword,
            model: self.model.clone(),
            layout: self.layout,
            queue_looks: self.queue_looks.clone(),
            foreign_leases: self.foreign_leases.clone(),
            final_headers: self.final_headers.clone(),
        };
        tokio::spawn(async move {
            let mut ticks = 0u32;
            loop {
                tokio::time::sleep(HEALTH_INTERVAL).await;
                // Nobody else holds its counts any more: the store is gone.
                if Arc::strong_count(&follower.counts) == 1 {
                    return;
                }
                let healthy = if reads_nodes {
                    follower.read_health().await.is_ok_and(|missing| missing.is_empty())
                } else {
                    let health = follower.health.lock().expect("lock");
                    health.healthy && health.nodes.iter().all(|node| node.healthy)
                };
                ticks += 1;
                // The default collection's follower (the one reading the nodes) always
                // counts: /metrics and /healthz show its counts. A named collection's
                // counts are read fresh by GetIndexStats, so its follower counts only
                // while it is busy: with 400 idle collections open, counting each every
                // 5 s kept the Weaviate nodes at a load of 8 on this machine.
                let busy = reads_nodes || follower.counts.lock().expect("lock").busy();
                if healthy && busy && ticks % COUNTS_EVERY == 0 {
                    let stats = follower.refresh_counts().await;
                    if stats.pending_documents > 0 && ticks % GHOSTS_EVERY == 0 {
                        follower.delete_ghosts().await;
                    }
                }
            }
        });
    }

    /// Deletes pending documents that came back after their job completed (see
    /// [`ghosts`]); says so when it found any.
    async fn delete_ghosts(&self) {
        match ghosts::sweep(self).await {
            Ok(swept) => {
                if swept.deleted > 0 {
                    tracing::info!(
                        deleted = swept.deleted,
                        without_document = swept.without_document,
                        "deleted pending documents that came back after their jobs completed \
                         (Weaviate restored objects deleted while a node was down)"
                    );
                }
                if swept.orphans > 0 {
                    tracing::info!(
                        deleted = swept.orphans,
                        "deleted pending documents of jobs that do not exist (left by refused ingests)"
                    );
                }
            }
            // The next sweep tries again; the counts say what is pending meanwhile.
            Err(error) => tracing::debug!(%error, "looking for ghost pending documents failed"),
        }
    }

    /// Reads the node list into the health; returns the names of known nodes that are
    /// missing from it or not HEALTHY, or Err when no node answers. Either way the
    /// counts stop being exact until a count with every node in succeeds.
    async fn read_health(&self) -> std::result::Result<Vec<String>, String> {
        // Each node's own liveness check too: the node list of a surviving node calls
        // a SIGKILLed one HEALTHY for seconds, and, failing now and then meanwhile,
        // would make the health flap between ok and degraded.
        let (read, live) = tokio::join!(read_nodes(&self.connection), self.connection.live_nodes());
        let grpc = self.connection.grpc_addresses();
        let answers =
            |address: &str| grpc.iter().position(|a| a == address).is_none_or(|i| live.get(i).copied().unwrap_or(true));
        let mut health = self.health.lock().expect("lock");
        let missing = match read {
            Ok(listed) => {
                // Every node known stays in the list: a node the cluster forgot (it
                // drops dead members after a while) is missing, not gone.
                for node in health.nodes.iter_mut() {
                    node.healthy = listed.iter().any(|l| l.name == node.name && l.healthy) && answers(&node.address);
                }
                for mut node in listed {
                    if !health.nodes.iter().any(|n| n.name == node.name) {
                        node.healthy = node.healthy && answers(&node.address);
                        health.nodes.push(node);
                    }
                }
                health.healthy = true;
                health.detail.clear();
                Ok(health.missing_nodes().iter().map(|n| n.to_string()).collect::<Vec<_>>())
            }
            Err(error) => {
                // Right after losing a member, Weaviate fails the node list on every
                // node for seconds; the store still serves. So only a store none of
                // whose nodes answers at all is unhealthy (NOT_SERVING, which takes
                // the server out of a gateway's rotation); otherwise the nodes that do
                // not answer are the missing ones (matched by configured order).
                for node in health.nodes.iter_mut() {
                    let index = grpc.iter().position(|a| *a == node.address);
                    node.healthy = index.is_some_and(|i| live.get(i).copied().unwrap_or(false));
                }
                health.healthy = live.iter().any(|l| *l);
                health.detail = if health.healthy { String::new() } else { error.to_string() };
                match health.healthy {
                    true => Ok(health.missing_nodes().iter().map(|n| n.to_string()).collect::<Vec<_>>()),
                    false => Err(error.to_string()),
                }
            }
        };
        let unhealthy: Vec<String> =
            health.nodes.iter().filter(|node| !node.healthy).map(|node| node.address.clone()).collect();
        drop(health);
        for address in unhealthy {
            if let Some(index) = grpc.iter().position(|a| *a == address)
                && self.connection.set_behind(index, true)
            {
                tracing::info!(node = address, "store node missing: calls avoid it until it has caught up");
            }
        }
        let reason = match &missing {
            Ok(names) if names.is_empty() => None,
            Ok(names) => Some(format!("store node {} missing", names.join(", "))),
            Err(error) => Some(format!("store unreachable: {error}")),
        };
        if let Some(reason) = reason {
            self.counts.lock().expect("lock").failing = Some(reason);
        }
        missing
    }

    /// Counts the index if it can be counted exactly (see [`CountState`]); returns
    /// the counts as far as the store can vouch for them.
    async fn refresh_counts(&self) -> IndexStats {
        let began = Instant::now();
        self.counts.lock().expect("lock").written = false;
        match self.count_exactly().await {
            Ok(tally) => {
                let mut counts = self.counts.lock().expect("lock");
                // Counts overlap (the follower, GetIndexStats calls): an older one
                // finishing last does not replace a newer one.
                if counts.exact.is_none_or(|(_, at)| at <= began) {
                    counts.exact = Some((tally, began));
                    counts.failing = None;
                }
                counts.stats()
            }
            Err(reason) => {
                let mut counts = self.counts.lock().expect("lock");
                counts.failing = Some(reason);
                counts.stats()
            }
        }
    }

    /// The counts when every known node is healthy before and after and every node
    /// the server reaches counts the same; Err says why not.
    async fn count_exactly(&self) -> std::result::Result<Tally, String> {
        let missing = self.read_health().await?;
        if !missing.is_empty() {
            return Err(format!("store node {} missing", missing.join(", ")));
        }
        let nodes = self.connection.node_count();
        let (tallies, queued) = tokio::join!(
            futures::future::join_all((0..nodes).map(|node| self.tally_at(node))),
            self.queued_vectors_per_node(nodes),
        );
        let addresses = self.connection.grpc_addresses();
        self.judge_nodes(&tallies, &queued, &addresses);
        let mut first: Option<Tally> = None;
        for tally in &tallies {
            match (tally, first) {
                (Err(error), _) => return Err(format!("counting failed: {error}")),
                (Ok(tally), None) => first = Some(*tally),
                (Ok(tally), Some(seen)) if *tally != seen => {
                    let each: Vec<String> = tallies
                        .iter()
                        .zip(&addresses)
                        .filter_map(|(t, a)| t.as_ref().ok().map(|t| format!("{a} {}", t.documents)))
                        .collect();
                    return Err(format!(
                        "store nodes count differently (writes in flight, or replication catching up; \
                         documents per node: {})",
                        each.join(", ")
                    ));
                }
                _ => {}
            }
        }
        let missing = self.read_health().await?;
        if !missing.is_empty() {
            return Err(format!("store node {} missing", missing.join(", ")));
        }
        first.ok_or_else(|| "no store node to count at".to_string())
    }

    /// Marks nodes behind or caught up from one round of counts (see [`complete_nodes`]
    /// for what complete means). A node complete in a round has caught up; one short two
    /// rounds running is behind (one short round is usually writes in flight), which also
    /// catches a node that was down and back between two health checks.
    fn judge_nodes(&self, tallies: &[Result<Tally>], queued: &[Option<u64>], addresses: &[String]) {
        let counted: Vec<(usize, Tally)> =
            tallies.iter().enumerate().filter_map(|(i, t)| t.as_ref().ok().map(|t| (i, *t))).collect();
        let mut counts = self.counts.lock().expect("lock");
        counts.short_rounds.resize(tallies.len(), 0);
        for (node, complete) in complete_nodes(&counted, queued) {
            counts.short_rounds[node] = if complete { 0 } else { counts.short_rounds[node] + 1 };
            let behind = match (complete, counts.short_rounds[node]) {
                (true, _) => false,
                (false, rounds) if rounds >= 2 => true,
                _ => continue,
            };
            if self.connection.set_behind(node, behind) {
                match behind {
                    true => tracing::info!(
                        node = addresses[node],
                        queued_vectors = queued.get(node).copied().flatten(),
                        "store node behind: calls avoid it until it has caught up"
                    ),
                    false => tracing::info!(node = addresses[node], "store node caught up: calls go to it again"),
                }
            }
        }
    }

    /// The chunk vectors each node (by index into the gRPC addresses) holds queued for
    /// its vector index, None where not known (the queues could not be read, or the
    /// node is not healthy).
    async fn queued_vectors_per_node(&self, nodes: usize) -> Vec<Option<u64>> {
        let mut per_node = vec![None; nodes];
        let Ok(replicas) = indexing::queued_vectors(&self.connection, &self.names.chunks).await else {
            return per_node;
        };
        let health = self.health.lock().expect("lock");
        let addresses = self.connection.grpc_addresses();
        for ((node_name, _shard), queued) in replicas {
            let index = health
                .nodes
                .iter()
                .find(|node| node.name == node_name)
                .and_then(|node| addresses.iter().position(|address| *address == node.address));
            if let Some(slot) = index.and_then(|i| per_node.get_mut(i)) {
                *slot = Some(slot.unwrap_or(0) + queued);
            }
        }
        per_node
    }

    /// Documents, chunks and pending documents as node `node` counts them.
    ///
    /// Pending documents are all pending objects less the failed ones, not a count
    /// filtered on `failed = false`: a node that received pending objects by repair
    /// and then deleted them went on counting them under that filter (300 where its
    /// plain count and every other node said 0, in `job_waits_for_documents_a_
    /// restarted_node_does_not_hold`), and failed ones are rare.
    async fn tally_at(&self, node: usize) -> Result<Tally> {
        let failed = Some(convert::boolean_equals("failed", true));
        let (documents, chunks, pending_objects, failed) = tokio::try_join!(
            self.count_at(node, &self.names.documents, None),
            self.count_at(node, &self.names.chunks, None),
            self.count_at(node, &self.names.pending, None),
            self.count_at(node, &self.names.pending, failed),
        )?;
        Ok(Tally { documents, chunks, pending: pending_objects.saturating_sub(failed) })
    }

    /// Objects in `collection` (matching `filter`) as node `node` counts them.
    async fn count_at(&self, node: usize, collection: &str, filter: Option<pb::Filters>) -> Result<u64> {
        let request = pb::AggregateRequest {
            collection: collection.to_string(),
            objects_count: true,
            filters: filter,
            ..Default::default()
        };
        let reply =
            self.connection.call_on(node, "aggregate", |mut c| async move { c.aggregate(request).await }).await?;
        aggregate_count(reply)
    }

    /// Objects in `collection` (matching `filter`).
    async fn count(&self, collection: &str, filter: Option<pb::Filters>) -> Result<u64> {
        let request = pb::AggregateRequest {
            collection: collection.to_string(),
            objects_count: true,
            filters: filter,
            ..Default::default()
        };
        let reply = self
            .connection
            .call("aggregate", |mut c| {
                let request = request.clone();
                async move { c.aggregate(request).await }
            })
            .await?;
        aggregate_count(reply)
    }

    /// Runs a search request.
    async fn query(&self, operation: &'static str, mut request: pb::SearchRequest) -> Result<Vec<pb::SearchResult>> {
        let level = match request.consistency_level.and_then(|l| pb::ConsistencyLevel::try_from(l).ok()) {
            Some(pb::ConsistencyLevel::All) => Consistency::All,
            Some(pb::ConsistencyLevel::One) => Consistency::One,
            _ => Consistency::Quorum,
        };
        if level != Consistency::One {
            self.ask_whole_objects(&mut request);
        }
        let reply = self
            .connection
            .call(operation, |mut c| {
                let request = request.clone();
                async move { c.search(request).await }
            })
            .await
            .map_err(|e| self.explained(operation, level, e))?;
        Ok(reply.results)
    }

    /// Makes a search read above ONE return whole objects: every property, and the
    /// vector where the collection has one.
    ///
    /// Such a read makes Weaviate (1.35, `repairBatchPart`) overwrite a stale replica
    /// with the object the search found when that one is the newest, and a search's
    /// object holds only the properties it asked for: a list of job ids rewrote stale
    /// replicas of job records as objects with `job_id` alone, with the newest time, so
    /// nothing repaired them back (3 of 1,020 job objects on one node in a chaos run,
    /// 175 "unreadable job progress" lines in 25 cycles, each one a lease seen free).
    /// Without the vector, a repaired chunk would leave the replica's vector index.
    fn ask_whole_objects(&self, request: &mut pb::SearchRequest) {
        let properties = request.properties.get_or_insert_with(Default::default);
        properties.non_ref_properties.clear();
        properties.return_all_nonref_properties = true;
        if request.collection == self.names.chunks {
            request.metadata.get_or_insert_with(Default::default).vector = true;
        }
    }

    /// A replica error in words (see [`replicas`]); other errors as they are.
    fn explained(&self, operation: &str, level: Consistency, error: Error) -> Error {
        match &error {
            Error::Unavailable(message) => match self.replica_errors.explain(message, level) {
                Some(reason) => {
                    tracing::debug!(%message, %reason, "weaviate replica error");
                    Error::Unavailable(format!("weaviate store: {operation}: {reason}"))
                }
                None => error,
            },
            _ => error,
        }
    }

    /// A plain (non-vector) query of `collection`.
    /// A lookup of chunks: the citation's properties and those `content` asks for.
    fn chunk_lookup(&self, filter: &Filter, count: usize, content: HitContent) -> Result<pb::SearchRequest> {
        if count > MAX_RESULTS {
            return Err(Error::invalid(
                "top_k",
                format!(
                    "offset plus top_k (and rerank candidates) may be at most {MAX_RESULTS} with the weaviate store"
                ),
            ));
        }
        let mut properties = vec!["doc_id", "chunk_index", "start_char", "end_char"];
        if content.with_text {
            properties.push("text");
        }
        if content.with_metadata {
            properties.push("metadata_json");
        }
        Ok(self.lookup(
            &self.names.chunks,
            convert::metadata_filter(filter, "filter")?,
            &properties,
            count,
            self.settings.read_consistency,
        ))
    }

    fn lookup(
        &self,
        collection: &str,
        filter: Option<pb::Filters>,
        properties: &[&str],
        limit: usize,
        consistency: Consistency,
    ) -> pb::SearchRequest {
        pb::SearchRequest {
            collection: collection.to_string(),
            consistency_level: Some(level(consistency)),
            properties: Some(pb::PropertiesRequest {
                non_ref_properties: properties.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            }),
            metadata: Some(pb::MetadataRequest { uuid: true, ..Default::default() }),
            limit: limit.min(MAX_RESULTS) as u32,
            filters: filter,
            uses_127_api: true,
            ..Default::default()
        }
    }

    /// Writes objects (created or replaced as a whole) at the write consistency.
    async fn put(&self, operation: &'static str, objects: Vec<pb::BatchObject>) -> Result<()> {
        self.put_at(operation, objects, self.settings.write_consistency).await
    }

    /// [`WeaviateStore::put`] at `consistency`.
    async fn put_at(
        &self,
        operation: &'static str,
        objects: Vec<pb::BatchObject>,
        consistency: Consistency,
    ) -> Result<()> {
        for batch in objects.chunks(WRITE_BATCH_OBJECTS) {
            let request =
                pb::BatchObjectsRequest { objects: batch.to_vec(), consistency_level: Some(level(consistency)) };
            let reply = self
                .connection
                .call(operation, |mut c| {
                    let request = request.clone();
                    async move { c.batch_objects(request).await }
                })
                .await
                .map_err(|e| self.explained(operation, consistency, e))?;
            if let Some(error) = reply.errors.first() {
                let failure = Error::Unavailable(format!(
                    "weaviate store: {operation}: {} of {} objects not written, e.g. #{}: {}",
                    reply.errors.len(),
                    batch.len(),
                    error.index,
                    error.error
                ));
                return Err(self.explained(operation, consistency, failure));
            }
        }
        Ok(())
    }

    /// Deletes every object of `collection` matching `filter`; returns how many.
    async fn delete_where(&self, operation: &'static str, collection: &str, filter: pb::Filters) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let request = pb::BatchDeleteRequest {
                collection: collection.to_string(),
                filters: Some(filter.clone()),
                consistency_level: Some(level(self.settings.write_consistency)),
                ..Default::default()
            };
            let reply = self
                .connection
                .call(operation, |mut c| {
                    let request = request.clone();
                    async move { c.batch_delete(request).await }
                })
                .await
                .map_err(|e| self.explained(operation, self.settings.write_consistency, e))?;
            if reply.failed > 0 {
                return Err(Error::Unavailable(format!(
                    "weaviate store: {operation}: {} of {} objects not deleted",
                    reply.failed, reply.matches
                )));
            }
            deleted += reply.successful.max(0) as u64;
            // One call deletes at most MAX_RESULTS objects.
            if (reply.matches as usize) < MAX_RESULTS {
                return Ok(deleted);
            }
        }
    }

    /// The chunk and document objects of indexed documents, and the filter that
    /// selects chunks left over from longer earlier versions.
    fn document_objects(
        &self,
        documents: &[IndexedDocument],
    ) -> (Vec<pb::BatchObject>, Vec<pb::BatchObject>, Vec<pb::Filters>) {
        let mut chunks = Vec::new();
        let mut records = Vec::new();
        let mut stale = Vec::new();
        let mut analyzer = (self.keyword == Some(schema::KeywordField::Analyzed)).then(keyword::analyzer);
        for document in documents {
            let record = &document.record;
            let meta = convert::meta_pairs(&record.metadata);
            let metadata_json = serde_json::to_string(&record.metadata).expect("strings serialize");
            for (index, (chunk, vector)) in record.chunks.iter().zip(&document.vectors).enumerate() {
                let text = record.text.get(chunk.start_byte as usize..chunk.end_byte as usize).unwrap_or_default();
                let mut properties = PropertiesBuilder::default();
                if let Some(analyzer) = analyzer.as_mut() {
                    properties = properties.text(schema::KEYWORD_TEXT, &keyword::analyzed_words(analyzer, text));
                }
                chunks.push(pb::BatchObject {
                    uuid: convert::chunk_uuid(&document.id, index as u32),
                    collection: self.names.chunks.clone(),
                    vector_bytes: embedwire_proto::vectors::f32_to_le_bytes(vector).into(),
                    properties: Some(
                        properties
                            .text("doc_id", &document.id)
                            .number("chunk_index", index as f64)
                            .number("start_byte", chunk.start_byte as f64)
                            .number("end_byte", chunk.end_byte as f64)
                            .number("start_char", chunk.start_char as f64)
                            .number("end_char", chunk.end_char as f64)
                            .text("hash", hex(&chunk.hash))
                            .text("text", text)
                            .text("metadata_json", &metadata_json)
                            .texts("meta", meta.clone())
                            .build(),
                    ),
                    ..Default::default()
                });
            }
            stale.push(
                convert::all_of(vec![
                    convert::text_equals("doc_id", &document.id),
                    convert::number_compare(Operator::GreaterThanEqual, "chunk_index", record.chunks.len() as f64),
                ])
                .expect("two parts"),
            );
            records.push(pb::BatchObject {
                uuid: convert::document_uuid(&document.id),
                collection: self.names.documents.clone(),
                properties: Some(
                    PropertiesBuilder::default()
                        .text("doc_id", &document.id)
                        .text("text", &record.text)
                        .text("metadata_json", &metadata_json)
                        .text("chunks_json", serde_json::to_string(&record.chunks).expect("chunks serialize"))
                        .number("indexed_at", record.indexed_at)
                        .texts("meta", meta)
                        .build(),
                ),
                ..Default::default()
            });
        }
        (chunks, records, stale)
    }
}

/// The cluster's nodes, from any node's REST API.
async fn read_nodes(connection: &Connection) -> Result<Vec<StoreNode>> {
    let body = connection
        .get_json("/v1/nodes")
        .await?
        .ok_or_else(|| Error::Unavailable("weaviate store: /v1/nodes not found".into()))?;
    let nodes = body["nodes"].as_array().cloned().unwrap_or_default();
    let grpc = connection.grpc_addresses();
    Ok(nodes
        .iter()
        .enumerate()
        .map(|(i, node)| StoreNode {
            name: node["name"].as_str().unwrap_or_default().to_string(),
            // Weaviate does not report client addresses; the configured ones line up
            // when they are given in node order.
            address: grpc.get(i).cloned().unwrap_or_default(),
            healthy: node["status"].as_str() == Some("HEALTHY"),
        })
        .collect())
}

/// The object count of an Aggregate reply. A reply without one is an error, not 0:
/// a count the store did not give is never reported as empty.
fn aggregate_count(reply: pb::AggregateReply) -> Result<u64> {
    match reply.result {
        Some(pb::aggregate_reply::Result::SingleResult(pb::aggregate_reply::Single {
            objects_count: Some(count),
            ..
        })) => Ok(count.max(0) as u64),
        other => Err(Error::Unavailable(format!("weaviate store: an Aggregate reply without a count: {other:?}"))),
    }
}

/// A content hash as lowercase hex.
fn hex(hash: &ContentHash) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

#[async_trait]
impl CorpusStore for WeaviateStore {
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
        Ok(jobs::read(self, job_id).await?.map(|parts| parts.record(job_id)))
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
        let mut known: HashMap<String, Vec<f32>> = HashMap::new();
        let wanted: Vec<String> = hashes.iter().map(hex).collect();
        for group in wanted.chunks(256) {
            let mut request = self.lookup(
                &self.names.chunks,
                Some(convert::text_any("hash", group.to_vec())),
                &["hash"],
                group.len() * 4,
                self.settings.read_consistency,
            );
            request.metadata = Some(pb::MetadataRequest { vector: true, ..Default::default() });
            for result in self.query("dedup_lookup", request).await? {
                if let Some(vector) = convert::result_vector(&result) {
                    known.insert(PropertiesReader::of(&result).text("hash"), vector);
                }
            }
        }
        Ok(wanted.iter().map(|hash| known.get(hash).cloned()).collect())
    }

    async fn commit_indexed(
        &self,
        job_id: &str,
        documents: Vec<IndexedDocument>,
        failed: Vec<(u64, String)>,
    ) -> Result<JobRecord> {
        let (chunks, records, stale) = self.document_objects(&documents);
        self.put("write_chunks", chunks).await?;
        if let Some(stale) = convert::any_of(stale) {
            self.delete_where("delete_stale_chunks", &self.names.chunks, stale).await?;
        }
        self.put("write_documents", records).await?;
        let sequences: Vec<u64> = documents.iter().map(|d| d.sequence).collect();
        jobs::finish_documents(self, job_id, &sequences, &failed).await
    }

    async fn delete_documents(&self, ids: Vec<String>, filter: Option<Filter>) -> Result<usize> {
        let mut selections = Vec::new();
        for group in ids.chunks(256) {
            selections.push(convert::text_any("doc_id", group.to_vec()));
        }
        if let Some(filter) = filter
            && let Some(translated) = convert::metadata_filter(&filter, "filter")?
        {
            selections.push(translated);
        }
        let mut deleted = 0;
        for selection in selections {
            // Chunks first: a document whose record is gone never shows up in search.
            self.delete_where("delete_chunks", &self.names.chunks, selection.clone()).await?;
            deleted += self.delete_where("delete_documents", &self.names.documents, selection).await?;
        }
        Ok(deleted as usize)
    }

    async fn documents(&self, ids: Vec<String>) -> Result<Vec<Option<DocumentRecord>>> {
        let mut found: HashMap<String, DocumentRecord> = HashMap::new();
        for group in ids.chunks(256) {
            let request = self.lookup(
                &self.names.documents,
                Some(convert::text_any("doc_id", group.to_vec())),
                &["doc_id", "text", "metadata_json", "chunks_json", "indexed_at"],
                group.len(),
                self.settings.read_consistency,
            );
            for result in self.query("get_documents", request).await? {
                let properties = PropertiesReader::of(&result);
                let record = DocumentRecord {
                    text: properties.text("text"),
                    metadata: serde_json::from_str(&properties.text("metadata_json")).unwrap_or_default(),
                    chunks: serde_json::from_str(&properties.text("chunks_json"))
                        .map_err(|e| Error::Storage(format!("weaviate store: a document's chunks: {e}")))?,
                    indexed_at: properties.number("indexed_at"),
                };
                found.insert(properties.text("doc_id"), record);
            }
        }
        Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
    }

    async fn stats(&self) -> Result<IndexStats> {
        Ok(self.refresh_counts().await)
    }

    fn cached_counts(&self) -> ViewCounts {
        let counts = self.counts.lock().expect("lock");
        let stats = counts.stats();
        ViewCounts { documents: stats.documents, chunks: stats.chunks, accuracy: stats.accuracy }
    }

    async fn search(&self, query: StoreQuery<'_>) -> Result<Vec<StoredHit>> {
        let content = query.content();
        let mut request = self.chunk_lookup(query.filter, query.count, content)?;
        request.metadata =
            Some(pb::MetadataRequest { distance: true, vector: query.with_vector, ..Default::default() });
        // `vector_bytes` is deprecated for named vectors; the collection has one unnamed vector.
        #[allow(deprecated)]
        let near_vector = pb::NearVector {
            vector_bytes: embedwire_proto::vectors::f32_to_le_bytes(query.vector).into(),
            // Cosine distance is 1 - similarity.
            distance: query.score_threshold.map(|threshold| 1.0 - threshold as f64),
            ..Default::default()
        };
        request.near_vector = Some(near_vector);
        let results = self.query("search", request).await?;
        let mut hits: Vec<StoredHit> = results
            .iter()
            .map(|result| {
                // Cosine distance is 1 - similarity.
                let distance = result.metadata.as_ref().map(|m| m.distance).unwrap_or(1.0);
                chunk_hit(result, 1.0 - distance, content)
            })
            .filter(|hit| query.score_threshold.is_none_or(|threshold| hit.score >= threshold))
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(hits)
    }

    async fn keyword_search(&self, query: KeywordQuery<'_>) -> Result<Vec<StoredHit>> {
        let Some(field) = self.keyword else {
            return Err(Error::invalid(
                "mode",
                format!(
                    "collection {} was created before keyword search (its text is not searchable in Weaviate); \
                     keyword and hybrid modes need a new collection (--collection), ingested again",
                    self.names.chunks
                ),
            ));
        };
        let content = query.content();
        let mut request = self.chunk_lookup(query.filter, query.count, content)?;
        request.metadata = Some(pb::MetadataRequest { score: true, vector: query.with_vector, ..Default::default() });
        let (words, property) = match field {
            schema::KeywordField::Analyzed => (analyzed_query(query.text), schema::KEYWORD_TEXT),
            schema::KeywordField::Text => (query.leading_words(), "text"),
        };
        if words.is_empty() {
            // Only stop words or punctuation: nothing to rank by.
            return Ok(Vec::new());
        }
        request.bm25_search =
            Some(pb::Bm25 { query: words, properties: vec![property.to_string()], search_operator: None });
        let results = self.query("keyword search", request).await?;
        let mut hits: Vec<StoredHit> = results
            .iter()
            .map(|result| chunk_hit(result, result.metadata.as_ref().map(|m| m.score).unwrap_or(0.0), content))
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(hits)
    }
}

/// A query as the analyzed words Weaviate ranks ([`schema::KeywordField::Analyzed`]):
/// its distinct terms (at most [`keyword::MAX_QUERY_TERMS`], so a huge query costs a
/// bounded search), each repeated as often as it occurs, as BM25 sums over the query.
fn analyzed_query(text: &str) -> String {
    let terms = KeywordIndex::query_terms(text);
    terms.iter().flat_map(|(term, count)| std::iter::repeat_n(term.as_str(), *count)).collect::<Vec<_>>().join(" ")
}

/// A chunk object as a hit with `score`.
fn chunk_hit(result: &pb::SearchResult, score: f32, content: HitContent) -> StoredHit {
    let properties = PropertiesReader::of(result);
    StoredHit {
        document_id: properties.text("doc_id"),
        chunk_index: properties.number("chunk_index") as u32,
        start_char: properties.number("start_char") as u32,
        end_char: properties.number("end_char") as u32,
        score,
        text: content.with_text.then(|| properties.text("text")),
        metadata: if content.with_metadata {
            serde_json::from_str(&properties.text("metadata_json")).unwrap_or_default()
        } else {
            Default::default()
        },
        vector: if content.with_vector { convert::result_vector(result) } else { None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(documents: u64, chunks: u64) -> Tally {
        Tally { documents, chunks, pending: 0 }
    }

    #[test]
    fn a_node_counting_less_than_another_is_not_complete() {
        let counted = [(0, tally(10, 30)), (1, tally(10, 29)), (2, tally(9, 30))];
        assert_eq!(complete_nodes(&counted, &[None; 3]), vec![(0, true), (1, false), (2, false)]);
    }

    #[test]
    fn a_node_rebuilding_its_vector_index_is_not_complete_though_it_counts_everything() {
        let counted = [(0, tally(10, 3_000)), (1, tally(10, 3_000)), (2, tally(10, 3_000))];
        // Steady ingest: every queue holds a few batches, unevenly.
        let steady = [Some(40), Some(900), Some(0)];
        assert_eq!(complete_nodes(&counted, &steady), vec![(0, true), (1, true), (2, true)]);
        // Node 1 re-queued every vector it stores.
        let rebuilding = [Some(40), Some(2_950), Some(0)];
        assert_eq!(complete_nodes(&counted, &rebuilding), vec![(0, true), (1, false), (2, true)]);
        // Its queue drained to the others' level: complete again.
        let rebuilt = [Some(40), Some(60), Some(0)];
        assert_eq!(complete_nodes(&counted, &rebuilt), vec![(0, true), (1, true), (2, true)]);
    }

    #[test]
    fn queues_not_known_or_without_another_node_to_compare_judge_by_counts_alone() {
        let counted = [(0, tally(10, 3_000)), (1, tally(10, 3_000))];
        assert_eq!(complete_nodes(&counted, &[None, Some(5_000)]), vec![(0, true), (1, true)]);
        assert_eq!(complete_nodes(&counted[..1], &[Some(5_000)]), vec![(0, true)]);
    }
}
