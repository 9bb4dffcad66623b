//! Waiting for Weaviate's vector index to take in the vectors written to it.
//!
//! With `ASYNC_INDEXING=true` a node acknowledges a write once the vector is in its
//! on-disk queue; a search finds the vector only after the node's scheduler moved it
//! into the HNSW graph (a fraction of a second later, or longer under a steady stream
//! of writes). A job must not be called completed while its documents cannot be
//! found yet, so settling a job waits until no node that answers has vectors of the
//! chunk collection queued. Without async indexing the queues are always empty and
//! the wait is one request.
//!
//! Why `make cluster` turns async indexing on: a node SIGKILLed during a write can keep
//! the object but lose its vector from the synchronously written HNSW log, and
//! nothing repairs that (async replication compares objects, not the graph): the
//! Weaviate chaos run found 38 of 14,512 documents stored on every node yet missing
//! from the vector index of the node killed around their write. The queue is on disk and replayed at restart.

use std::time::{Duration, Instant};

use super::client::Connection;
use crate::error::Result;

/// How often the queues are read while waiting.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// Waits (at most `timeout`) until no healthy node has vectors of `collection` queued
/// for indexing.
///
/// Weaviate answers `/v1/nodes` with an error while a member is down and not yet
/// declared dead by its peers (about 5 s after a SIGKILL on loopback), so an error is
/// retried like a non-empty queue. Best effort past `timeout`: the queued vectors are
/// on the nodes' disks and become searchable later, and a cluster that never answers
/// (a key without the nodes permission, say) must not stall every job; the job ends
/// with a warning in the log.
pub async fn wait_until_indexed(connection: &Connection, collection: &str, timeout: Duration) {
    let started = Instant::now();
    loop {
        let last = match queued_vectors(connection, collection).await {
            Ok(0) => return,
            Ok(queued) => format!("{queued} vectors queued"),
            Err(error) => format!("the queues cannot be read: {error}"),
        };
        if started.elapsed() >= timeout {
            tracing::warn!(collection, waited = ?started.elapsed(), last, "vector indexing not seen done; the job ends anyway");
            return;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The vectors of `collection` queued but not yet indexed, summed over the nodes
/// that report themselves healthy (a node that is down replays its queue when back).
pub async fn queued_vectors(connection: &Connection, collection: &str) -> Result<u64> {
    let path = format!("/v1/nodes/{collection}?output=verbose");
    Ok(connection.get_json(&path).await?.as_ref().map_or(0, queued_on_healthy_nodes))
}

/// Sums `vectorQueueLength` over the shards of the nodes whose status is HEALTHY in
/// a `/v1/nodes?output=verbose` answer.
fn queued_on_healthy_nodes(nodes: &serde_json::Value) -> u64 {
    let empty = Vec::new();
    nodes["nodes"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|node| node["status"].as_str() == Some("HEALTHY"))
        .flat_map(|node| node["shards"].as_array().unwrap_or(&empty).iter())
        .map(|shard| shard["vectorQueueLength"].as_u64().unwrap_or(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_queues_of_healthy_nodes_only() {
        let answer = serde_json::json!({"nodes": [
            {"name": "weaviate-0", "status": "HEALTHY", "shards": [
                {"name": "a", "vectorQueueLength": 3}, {"name": "b", "vectorQueueLength": 4}]},
            {"name": "weaviate-1", "status": "UNHEALTHY", "shards": [{"name": "a", "vectorQueueLength": 100}]},
            {"name": "weaviate-2", "status": "HEALTHY", "shards": null},
        ]});
        assert_eq!(queued_on_healthy_nodes(&answer), 7);
        assert_eq!(queued_on_healthy_nodes(&serde_json::json!({})), 0);
    }
}
