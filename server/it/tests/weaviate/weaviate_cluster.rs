//! The Weaviate test cluster itself (`common::weaviate`): a 3-node cluster forms, sees a
//! killed node go down, takes it back after a restart on the same data (node 2, then
//! node 0, which started the cluster), and survives a full stop and start; a replicated
//! object stays readable throughout. A 1-node shared cluster starts too. Start and
//! restart times are printed (never asserted on).

use crate::common;

use std::time::Instant;

use common::weaviate::WeaviateCluster;
use serde_json::{Value, json};

const CLASS: &str = "ClusterProbe";
const OBJECT_ID: &str = "6c1b4b5e-2f4f-4a5e-9b1e-6f2d6a0e8c11";

/// Creates a class replicated on every node and stores one object in it through node 0.
async fn store_probe(cluster: &WeaviateCluster) {
    let http = reqwest::Client::new();
    let base = &cluster.http_urls()[0];
    let class = json!({
        "class": CLASS,
        "vectorizer": "none",
        "replicationConfig": { "factor": 3 },
        "properties": [{ "name": "text", "dataType": ["text"] }],
    });
    let response = http.post(format!("{base}/v1/schema")).json(&class).send().await.unwrap();
    assert!(response.status().is_success(), "create class: {}", response.text().await.unwrap());
    let object =
        json!({ "class": CLASS, "id": OBJECT_ID, "properties": { "text": "hello" }, "vector": [0.1, 0.2, 0.3] });
    let response = http.post(format!("{base}/v1/objects?consistency_level=ALL")).json(&object).send().await.unwrap();
    assert!(response.status().is_success(), "store object: {}", response.text().await.unwrap());
}

/// Reads the probe object through node `via` at consistency ONE. A new client each time:
/// a pooled keep-alive connection to a node that was killed or restarted fails once
/// (`IncompleteMessage`) even when the node is back on the same port.
async fn read_probe(cluster: &WeaviateCluster, via: usize) -> Value {
    let http = reqwest::Client::new();
    let url = format!("{}/v1/objects/{CLASS}/{OBJECT_ID}?consistency_level=ONE", cluster.http_urls()[via]);
    let response = http.get(url).send().await.unwrap();
    assert!(response.status().is_success(), "read via node {via}: {}", response.status());
    response.json().await.unwrap()
}

#[tokio::test]
async fn three_nodes_survive_a_killed_node_and_a_full_restart() {
    let started = Instant::now();
    let cluster = WeaviateCluster::start(3);
    eprintln!("3-node cluster healthy after {:.1?} (data and logs in {})", started.elapsed(), cluster.dir().display());
    assert_eq!(cluster.node_names(), ["weaviate-0", "weaviate-1", "weaviate-2"]);
    assert_eq!(cluster.grpc_addrs().len(), 3);
    for via in 0..3 {
        let statuses = cluster.node_statuses(via);
        assert_eq!(statuses.len(), 3, "node {via} sees {statuses:?}");
        assert!(statuses.iter().all(|(_, status)| status == "HEALTHY"), "node {via} sees {statuses:?}");
    }
    store_probe(&cluster).await;

    cluster.kill_node(2);
    let killed = Instant::now();
    cluster.wait_node_unhealthy(2, 0);
    eprintln!("node 0 saw weaviate-2 down {:.1?} after SIGKILL: {:?}", killed.elapsed(), cluster.node_statuses(0));
    assert_eq!(read_probe(&cluster, 0).await["properties"]["text"], "hello");

    let restarted = Instant::now();
    cluster.restart_node(2);
    eprintln!("weaviate-2 restarted and the cluster healthy again after {:.1?}", restarted.elapsed());
    assert_eq!(read_probe(&cluster, 2).await["properties"]["text"], "hello");

    // Node 0 started the cluster without CLUSTER_JOIN; restarted, it must join the others.
    cluster.kill_node(0);
    cluster.wait_node_unhealthy(0, 1);
    let restarted = Instant::now();
    cluster.restart_node(0);
    eprintln!("weaviate-0 restarted and the cluster healthy again after {:.1?}", restarted.elapsed());
    assert_eq!(read_probe(&cluster, 0).await["properties"]["text"], "hello");

    cluster.stop_all();
    assert!((0..3).all(|i| !cluster.is_running(i)));
    let started_again = Instant::now();
    cluster.start_all();
    eprintln!("whole cluster started again on its data, healthy after {:.1?}", started_again.elapsed());
    for via in 0..3 {
        assert_eq!(read_probe(&cluster, via).await["properties"]["text"], "hello");
    }
}

#[test]
fn a_shared_single_node_starts_once() {
    let started = Instant::now();
    let cluster = WeaviateCluster::shared(1);
    eprintln!("shared 1-node cluster healthy after {:.1?}", started.elapsed());
    assert!(std::ptr::eq(cluster, WeaviateCluster::shared(1)));
    assert_eq!(cluster.node_statuses(0), [("weaviate-0".to_string(), "HEALTHY".to_string())]);
    assert!(cluster.http_urls()[0].starts_with("http://127.0.0.1:"));
}
