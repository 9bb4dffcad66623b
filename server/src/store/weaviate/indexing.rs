//! Waiting for Weaviate's vector index to take in the vectors written to it.
//!
//! With `ASYNC_INDEXING=true` a node acknowledges a write once the vector is in its
//! on-disk queue; a search finds the vector only after the node's scheduler moved it
//! into the HNSW graph (a fraction of a second later, or longer under a steady stream
//! of writes). A job must not be called completed while its documents cannot be
//! found yet, so settling a job waits until each shard replica that had chunk vectors
//! queued has been seen with an empty queue. Without async indexing the queues are
//! always empty and the wait is one request.
//!
//! Why `make cluster` turns async indexing on: a node SIGKILLed during a write can keep
//! the object but lose its vector from the synchronously written HNSW log, and
//! nothing repairs that (async replication compares objects, not the graph): a
//! 100-cycle chaos run found 38 of 14,512 documents stored on every node yet missing
//! from the vector index of the node killed around their write. The queue makes that
//! rarer (2 of 14,400); with the repair `scripts/cluster.sh restart` asks of a
//! restarted node, 100-cycle runs missed 0 of 15,856, 1 of 15,272 and 4 of 14,952:
//! vectors the graph held without their links, which the repair skips, and vectors
//! the repair itself tombstoned (its last pass drops every vector written while it
//! runs). So a restarted node now rebuilds its graphs from its objects, its queues
//! refilled at start without that repair (cluster.sh says why), and the servers keep
//! calls off it meanwhile (`complete_nodes`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::client::Connection;
use crate::error::Result;

/// The first pause between reads of the queues while waiting; it doubles with each
/// read that still finds vectors queued, up to [`POLL_AT_MOST`].
const POLL_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between reads while waiting. Reads every 50 ms while a backlog
/// settled one job after another kept `/v1/nodes` (which asks every node) busy: 8
/// reads per 8-document job, 13% of the store time of a 1,500-job drain.
const POLL_AT_MOST: Duration = Duration::from_millis(400);

/// Waits (at most `timeout`) until every shard replica that had vectors of
/// `collection` queued when the wait began has been seen with an empty queue.
///
/// A queue is first in, first out, and its length drops only once a batch is in
/// the graph, so one look at an empty queue after the writes vouches for them: under
/// other servers' steady writes the queues are rarely all empty at once, but each
/// empties often.
///
/// Weaviate answers `/v1/nodes` with an error while a member is down and not yet
/// declared dead by its peers (about 5 s after a SIGKILL on loopback), so an error is
/// retried like a non-empty queue. Best effort past `timeout`: the queued vectors are
/// on the nodes' disks and become searchable later, and a cluster that never answers
/// (a key without the nodes permission, say) must not stall every job; the job ends
/// with a warning in the log.
pub async fn wait_until_indexed(looks: &QueueLooks, connection: &Connection, collection: &str, timeout: Duration) {
    let started = Instant::now();
    let mut owing: Option<HashSet<Replica>> = None;
    // Any read that began after the wait began vouches for the writes before it; each
    // round needs one newer than the round before.
    let mut after = started;
    let mut pause = POLL_FIRST;
    loop {
        let (began, queues) = looks.look(connection, collection, after).await;
        after = began + Duration::from_nanos(1);
        let last = match queues {
            Ok(queues) => {
                let busy = queues.into_iter().filter(|(_, queued)| *queued > 0).map(|(replica, _)| replica);
                let still = match owing.take() {
                    None => busy.collect(),
                    Some(owing) => busy.filter(|replica| owing.contains(replica)).collect::<HashSet<_>>(),
                };
                if still.is_empty() {
                    return;
                }
                let last = format!("{} shard replicas with vectors queued", still.len());
                owing = Some(still);
                last
            }
            Err(error) => format!("the queues cannot be read: {error}"),
        };
        if started.elapsed() >= timeout {
            tracing::warn!(collection, waited = ?started.elapsed(), last, "vector indexing not seen done; the job ends anyway");
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(POLL_AT_MOST);
    }
}

/// One collection's queue reads, shared by the settles waiting at once: each round of
/// a wait needs a read that began after its previous one (the first: after the wait
/// began), and one read serves every waiter it is new to. Each settle reading on its
/// own every 50 ms made a backlog's eight settles in flight read `/v1/nodes` (which
/// asks every node) 28 times per job.
#[derive(Debug, Default)]
pub struct QueueLooks {
    /// The last read: when it began, and what it found (an error as text).
    last: tokio::sync::Mutex<Option<(Instant, std::result::Result<Vec<(Replica, u64)>, String>)>>,
}

impl QueueLooks {
    /// The queues as read by a request that began at or after `after`, and when it
    /// began: the last read if it did, else a new one (one at a time; a waiter that
    /// asked meanwhile takes the new one's answer).
    async fn look(
        &self,
        connection: &Connection,
        collection: &str,
        after: Instant,
    ) -> (Instant, std::result::Result<Vec<(Replica, u64)>, String>) {
        let mut last = self.last.lock().await;
        if let Some((began, queues)) = last.as_ref()
            && *began >= after
        {
            return (*began, queues.clone());
        }
        let began = Instant::now();
        let queues = queued_vectors(connection, collection).await.map_err(|e| e.to_string());
        *last = Some((began, queues.clone()));
        (began, queues)
    }
}

/// One shard's copy on one node: (node name, shard name).
pub type Replica = (String, String);

/// The vectors of `collection` queued but not yet indexed, per shard replica, on the
/// nodes that report themselves healthy (a node that is down replays its queue when
/// back).
pub async fn queued_vectors(connection: &Connection, collection: &str) -> Result<Vec<(Replica, u64)>> {
    let path = format!("/v1/nodes/{collection}?output=verbose");
    Ok(connection.get_json(&path).await?.as_ref().map_or_else(Vec::new, queues_on_healthy_nodes))
}

/// Each shard replica's `vectorQueueLength` on the nodes whose status is HEALTHY in a
/// `/v1/nodes?output=verbose` answer.
fn queues_on_healthy_nodes(nodes: &serde_json::Value) -> Vec<(Replica, u64)> {
    let empty = Vec::new();
    let name = |value: &serde_json::Value| value["name"].as_str().unwrap_or_default().to_string();
    nodes["nodes"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|node| node["status"].as_str() == Some("HEALTHY"))
        .flat_map(|node| {
            node["shards"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(move |shard| ((name(node), name(shard)), shard["vectorQueueLength"].as_u64().unwrap_or(0)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_queues_of_healthy_nodes_only() {
        let answer = serde_json::json!({"nodes": [
            {"name": "weaviate-0", "status": "HEALTHY", "shards": [
                {"name": "a", "vectorQueueLength": 3}, {"name": "b", "vectorQueueLength": 0}]},
            {"name": "weaviate-1", "status": "UNHEALTHY", "shards": [{"name": "a", "vectorQueueLength": 100}]},
            {"name": "weaviate-2", "status": "HEALTHY", "shards": null},
        ]});
        let replica = |node: &str, shard: &str| (node.to_string(), shard.to_string());
        assert_eq!(
            queues_on_healthy_nodes(&answer),
            vec![(replica("weaviate-0", "a"), 3), (replica("weaviate-0", "b"), 0)]
        );
        assert!(queues_on_healthy_nodes(&serde_json::json!({})).is_empty());
    }
}
