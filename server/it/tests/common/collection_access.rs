//! The collection auth matrix, for every store: every collection rpc and HTTP route x
//! {no key, wrong key, read-only in scope, read-only out of scope, full in scope, full
//! out of scope, admin}, each refusal with its code; collection management for admin
//! keys only; listings showing a key only what it reaches; and no job, document or
//! hit of one collection reachable through another.
//!
//! The server under test runs with `--api-keys-file` of [`write_keys_file`] and
//! collection support in its store; the matrix creates collections `a` and `b` (with
//! a per-run prefix, so a shared store can run it again).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use embedwire_proto::v1::collection_service_client::CollectionServiceClient;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::*;
use futures::StreamExt;
use serde_json::{Value, json};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request};

use super::store_contract::text_query;

pub const ADMIN: &str = "matrix-admin-key-0123456789";
pub const READ_A: &str = "matrix-read-a-key-0123456789";
pub const WRITE_A: &str = "matrix-write-a-key-0123456789";
pub const WRONG: &str = "matrix-wrong-key-0123456789";

/// The rpcs and routes that change a collection: read-only keys may not call them.
const WRITES: [&str; 4] = ["Ingest", "IngestStream", "DeleteDocuments", "POST ingest"];

/// Writes the matrix's keys (scoped to collection `scope`) to `dir/keys`.
pub fn write_keys_file(dir: &Path, scope: &str) -> PathBuf {
    let path = dir.join("keys");
    let text = format!(
        "# the collection matrix's keys\n{ADMIN} admin\n{READ_A} read-only collections={scope}\n\
         {WRITE_A} read-write collections={scope}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `message` with `authorization: Bearer KEY` when `key` is given.
pub fn with_key<T>(message: T, key: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(key) = key {
        request.metadata_mut().insert("authorization", MetadataValue::try_from(format!("Bearer {key}")).unwrap());
    }
    request
}

/// The call's status code (OK for an answer).
pub fn code<T>(result: Result<T, tonic::Status>) -> Code {
    result.map_or_else(|status| status.code(), |_| Code::Ok)
}

/// One collection of the matrix: its name and what the setup put in it.
struct Seeded {
    name: String,
    job_id: String,
}

/// What a cell of the matrix may do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Unauthenticated,
    /// Out of scope: every call refused.
    Denied,
    /// Reads only.
    ReadOnly,
    Everything,
}

impl Expect {
    fn code(self, call: &str) -> Code {
        match self {
            Expect::Unauthenticated => Code::Unauthenticated,
            Expect::Denied => Code::PermissionDenied,
            Expect::ReadOnly if WRITES.contains(&call) => Code::PermissionDenied,
            Expect::ReadOnly | Expect::Everything => Code::Ok,
        }
    }

    fn http(self, call: &str) -> u16 {
        match self.code(call) {
            Code::Ok => 200,
            Code::Unauthenticated => 401,
            _ => 403,
        }
    }
}

struct Clients {
    search: SearchServiceClient<Channel>,
    collections: CollectionServiceClient<Channel>,
    embed: EmbedServiceClient<Channel>,
}

async fn wait_for_job(search: &mut SearchServiceClient<Channel>, collection: &str, job_id: &str) {
    let watch = WatchJobRequest { job_id: job_id.into(), collection: collection.into() };
    let mut updates = search.watch_job(with_key(watch, Some(ADMIN))).await.unwrap().into_inner();
    let mut last = None;
    while let Some(update) = updates.next().await {
        last = update.unwrap().job;
    }
    assert_eq!(last.unwrap().status(), JobStatus::Completed, "{collection}: {job_id}");
}

/// Creates `name` and puts `shared` and `only-NAME` in it (each naming its collection
/// in metadata), waiting until searchable.
async fn seed(clients: &mut Clients, name: String) -> Seeded {
    let create = CreateCollectionRequest { name: name.clone(), settings: None };
    clients.collections.create_collection(with_key(create, Some(ADMIN))).await.unwrap();
    let documents = ["shared".to_string(), format!("only-{name}")]
        .into_iter()
        .map(|id| Document {
            text: format!("Document {id} of collection {name}: tenants kept apart by their keys."),
            id,
            metadata: [("collection".to_string(), name.clone())].into(),
        })
        .collect();
    let request = IngestRequest { documents, collection: name.clone() };
    let job = clients.search.ingest(with_key(request, Some(ADMIN))).await.unwrap().into_inner().job.unwrap();
    wait_for_job(&mut clients.search, &name, &job.job_id).await;
    Seeded { name, job_id: job.job_id }
}

fn query(collection: &str) -> SearchRequest {
    SearchRequest {
        queries: vec![text_query("tenants kept apart")],
        top_k: Some(50),
        include_metadata: Some(true),
        collection: collection.into(),
        ..Default::default()
    }
}

/// Calls every rpc that acts on a collection once, on `target`, with `key`.
async fn call_every_rpc(clients: &mut Clients, key: Option<&str>, target: &Seeded) -> Vec<(&'static str, Code)> {
    let collection = target.name.clone();
    let search = &mut clients.search;
    let metadata = [("collection".to_string(), collection.clone())].into();
    let document = Document { id: "matrix".into(), text: "written by the matrix".into(), metadata };
    let mut codes = Vec::new();
    let ingest = IngestRequest { documents: vec![document.clone()], collection: collection.clone() };
    codes.push(("Ingest", code(search.ingest(with_key(ingest, key)).await)));
    let stream =
        futures::stream::iter(vec![IngestStreamRequest { documents: vec![document], collection: collection.clone() }]);
    codes.push(("IngestStream", code(search.ingest_stream(with_key(stream, key)).await)));
    let get_job = GetJobRequest { job_id: target.job_id.clone(), collection: collection.clone() };
    codes.push(("GetJob", code(search.get_job(with_key(get_job, key)).await)));
    let watch = WatchJobRequest { job_id: target.job_id.clone(), collection: collection.clone() };
    let watched = match search.watch_job(with_key(watch, key)).await {
        Ok(response) => code(response.into_inner().message().await),
        Err(status) => status.code(),
    };
    codes.push(("WatchJob", watched));
    let get = GetDocumentsRequest { ids: vec!["shared".into()], collection: collection.clone() };
    codes.push(("GetDocuments", code(search.get_documents(with_key(get, key)).await)));
    let delete =
        DeleteDocumentsRequest { ids: vec!["never-there".into()], filter: None, collection: collection.clone() };
    codes.push(("DeleteDocuments", code(search.delete_documents(with_key(delete, key)).await)));
    codes.push(("Search", code(search.search(with_key(query(&collection), key)).await)));
    let paged = SearchStreamRequest { search: Some(query(&collection)), page_size: 10 };
    let streamed = match search.search_stream(with_key(paged, key)).await {
        Ok(response) => code(response.into_inner().message().await),
        Err(status) => status.code(),
    };
    codes.push(("SearchStream", streamed));
    let stats = GetIndexStatsRequest { collection };
    codes.push(("GetIndexStats", code(search.get_index_stats(with_key(stats, key)).await)));
    codes
}

async fn http(base: &str, method: &str, path: &str, body: Option<Value>, key: Option<&str>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut request = client.request(method.parse().unwrap(), format!("{base}{path}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Calls every HTTP route of a collection once, on `target`, with `key`.
async fn call_every_route(base: &str, key: Option<&str>, target: &Seeded) -> Vec<(&'static str, u16)> {
    let at = format!("/v1/collections/{}", target.name);
    let metadata = json!({"collection": target.name});
    let ingest = json!({"documents": [{"id": "matrix-http", "text": "written over HTTP", "metadata": metadata}]});
    vec![
        ("POST ingest", http(base, "POST", &format!("{at}/ingest"), Some(ingest), key).await.0),
        ("GET job", http(base, "GET", &format!("{at}/jobs/{}", target.job_id), None, key).await.0),
        ("POST search", http(base, "POST", &format!("{at}/search"), Some(json!({"query": "tenants"})), key).await.0),
        ("GET document", http(base, "GET", &format!("{at}/documents/shared"), None, key).await.0),
        ("GET collection", http(base, "GET", &at, None, key).await.0),
    ]
}

async fn listed(clients: &mut Clients, key: &str) -> BTreeSet<String> {
    let listed = clients.collections.list_collections(with_key(ListCollectionsRequest {}, Some(key))).await.unwrap();
    listed.into_inner().collections.into_iter().map(|c| c.name).collect()
}

async fn listed_over_http(base: &str, key: &str) -> BTreeSet<String> {
    let (status, body) = http(base, "GET", "/v1/collections", None, Some(key)).await;
    assert_eq!(status, 200, "{body}");
    body["collections"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

/// Runs the whole matrix against the server at `address` (gRPC and HTTP on one port),
/// started with the keys of [`write_keys_file`]`(dir, &format!("{prefix}a"))`.
pub async fn run(address: &str, prefix: &str) {
    let channel = Channel::from_shared(address.to_string()).unwrap().connect().await.unwrap();
    let mut clients = Clients {
        search: SearchServiceClient::new(channel.clone()),
        collections: CollectionServiceClient::new(channel.clone()),
        embed: EmbedServiceClient::new(channel),
    };
    let a = seed(&mut clients, format!("{prefix}a")).await;
    let b = seed(&mut clients, format!("{prefix}b")).await;

    // Every collection rpc and route, every kind of key, in and out of its scope.
    let cells = [
        ("no key", None, &a, Expect::Unauthenticated),
        ("wrong key", Some(WRONG), &a, Expect::Unauthenticated),
        ("read-only in scope", Some(READ_A), &a, Expect::ReadOnly),
        ("read-only out of scope", Some(READ_A), &b, Expect::Denied),
        ("full in scope", Some(WRITE_A), &a, Expect::Everything),
        ("full out of scope", Some(WRITE_A), &b, Expect::Denied),
        ("admin", Some(ADMIN), &a, Expect::Everything),
        ("admin", Some(ADMIN), &b, Expect::Everything),
    ];
    for (label, key, target, expect) in cells {
        for (rpc, got) in call_every_rpc(&mut clients, key, target).await {
            assert_eq!(got, expect.code(rpc), "{rpc} on {} with {label}", target.name);
        }
        for (route, got) in call_every_route(address, key, target).await {
            assert_eq!(got, expect.http(route), "{route} on {} with {label}", target.name);
        }
    }

    // An out-of-scope refusal says nothing about whether the collection exists.
    let missing = query(&format!("{prefix}never_made"));
    let refusal = clients.search.search(with_key(missing, Some(READ_A))).await.unwrap_err();
    assert_eq!(refusal.code(), Code::PermissionDenied, "{refusal:?}");
    let refusal_b = clients.search.search(with_key(query(&b.name), Some(READ_A))).await.unwrap_err();
    assert_eq!(
        refusal.message().replace(&format!("{prefix}never_made"), "X"),
        refusal_b.message().replace(&b.name, "X"),
        "the same refusal for a collection that exists and one that does not"
    );

    // Scoped keys do not reach the default collection (not in their scope).
    for key in [READ_A, WRITE_A] {
        assert_eq!(code(clients.search.search(with_key(query(""), Some(key))).await), Code::PermissionDenied);
        assert_eq!(http(address, "POST", "/v1/search", Some(json!({"query": "x"})), Some(key)).await.0, 403);
        // Embedding belongs to no collection: any valid key may.
        let embed = EmbedRequest { inputs: vec!["x".into()], ..Default::default() };
        assert_eq!(code(clients.embed.embed(with_key(embed, Some(key))).await), Code::Ok);
    }
    assert_eq!(code(clients.search.search(with_key(query(""), Some(ADMIN))).await), Code::Ok);

    // Collection management: admin keys only; listings show a key what it reaches.
    for (label, key) in [("read-only", READ_A), ("full", WRITE_A)] {
        let create = CreateCollectionRequest { name: format!("{prefix}by_{}", label.len()), settings: None };
        let created = clients.collections.create_collection(with_key(create, Some(key))).await;
        assert_eq!(code(created), Code::PermissionDenied, "CreateCollection with {label}");
        let delete = DeleteCollectionRequest { name: a.name.clone() };
        let deleted = clients.collections.delete_collection(with_key(delete, Some(key))).await;
        assert_eq!(code(deleted), Code::PermissionDenied, "DeleteCollection with {label}");
        let body = json!({"name": format!("{prefix}http_{}", label.len())});
        assert_eq!(http(address, "POST", "/v1/collections", Some(body), Some(key)).await.0, 403, "{label}");
        let path = format!("/v1/collections/{}", a.name);
        assert_eq!(http(address, "DELETE", &path, None, Some(key)).await.0, 403, "{label}");
        assert_eq!(listed(&mut clients, key).await, BTreeSet::from([a.name.clone()]), "ListCollections with {label}");
        assert_eq!(listed_over_http(address, key).await, BTreeSet::from([a.name.clone()]), "GET with {label}");
    }
    for key in [None, Some(WRONG)] {
        let listing = clients.collections.list_collections(with_key(ListCollectionsRequest {}, key)).await;
        assert_eq!(code(listing), Code::Unauthenticated);
        let create = CreateCollectionRequest { name: format!("{prefix}nobody"), settings: None };
        assert_eq!(code(clients.collections.create_collection(with_key(create, key)).await), Code::Unauthenticated);
    }
    let all = listed(&mut clients, ADMIN).await;
    assert!(all.contains(&a.name) && all.contains(&b.name), "{all:?}");
    assert_eq!(listed_over_http(address, ADMIN).await, all);
    let made = format!("{prefix}made");
    let create = CreateCollectionRequest { name: made.clone(), settings: None };
    assert_eq!(code(clients.collections.create_collection(with_key(create, Some(ADMIN))).await), Code::Ok);
    let delete = DeleteCollectionRequest { name: made.clone() };
    assert_eq!(code(clients.collections.delete_collection(with_key(delete, Some(ADMIN))).await), Code::Ok);
    let (status, body) = http(address, "POST", "/v1/collections", Some(json!({"name": made})), Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(http(address, "DELETE", &format!("/v1/collections/{made}"), None, Some(ADMIN)).await.0, 200);

    assert_no_leaks(&mut clients, address, &a, &b).await;
}

/// Even the admin key reaches one collection's jobs, documents and hits only through
/// that collection.
async fn assert_no_leaks(clients: &mut Clients, base: &str, a: &Seeded, b: &Seeded) {
    let search = &mut clients.search;
    for (own, other) in [(a, b), (b, a)] {
        let foreign_job = GetJobRequest { job_id: other.job_id.clone(), collection: own.name.clone() };
        assert_eq!(code(search.get_job(with_key(foreign_job, Some(ADMIN))).await), Code::NotFound);
        let watch = WatchJobRequest { job_id: other.job_id.clone(), collection: own.name.clone() };
        assert_eq!(code(search.watch_job(with_key(watch, Some(ADMIN))).await), Code::NotFound);
        let only_other = format!("only-{}", other.name);
        let get = GetDocumentsRequest { ids: vec![only_other.clone()], collection: own.name.clone() };
        let found = search.get_documents(with_key(get, Some(ADMIN))).await.unwrap().into_inner();
        assert!(found.documents.is_empty(), "{only_other} read through {}", own.name);
        let delete =
            DeleteDocumentsRequest { ids: vec![only_other.clone()], filter: None, collection: own.name.clone() };
        let deleted = search.delete_documents(with_key(delete, Some(ADMIN))).await.unwrap().into_inner();
        assert_eq!(deleted.deleted_count, 0, "{only_other} deleted through {}", own.name);
        // A filter naming the other collection's metadata finds nothing here.
        let mut filtered = query(&own.name);
        filtered.filter = Some(Filter {
            must: vec![super::store_contract::condition_equals("collection", &other.name)],
            ..Default::default()
        });
        let hits = search.search(with_key(filtered, Some(ADMIN))).await.unwrap().into_inner().results;
        assert!(hits[0].hits.is_empty(), "{} hits of {} through a filter", hits[0].hits.len(), other.name);
        let results = search.search(with_key(query(&own.name), Some(ADMIN))).await.unwrap().into_inner().results;
        assert!(!results[0].hits.is_empty());
        for hit in &results[0].hits {
            assert_eq!(hit.metadata["collection"], own.name, "{} found in {}", hit.document_id, own.name);
        }
        let at = format!("/v1/collections/{}", own.name);
        let job_path = format!("{at}/jobs/{}", other.job_id);
        assert_eq!(http(base, "GET", &job_path, None, Some(ADMIN)).await.0, 404);
        assert_eq!(http(base, "GET", &format!("{at}/documents/{only_other}"), None, Some(ADMIN)).await.0, 404);
    }
    // The other's own document is still there.
    for seeded in [a, b] {
        let get = GetDocumentsRequest { ids: vec![format!("only-{}", seeded.name)], collection: seeded.name.clone() };
        let found = search.get_documents(with_key(get, Some(ADMIN))).await.unwrap().into_inner();
        assert_eq!(found.documents.len(), 1, "{} lost its own document", seeded.name);
    }
}

/// Starts a server on `store_flags` (the real model) with the matrix's keys and runs
/// the matrix against it.
pub async fn on_store(store_flags: Vec<String>) {
    let dir = super::TempDir::new("collection-matrix-keys");
    let keys = write_keys_file(&dir.0, "a").display().to_string();
    let mut flags: Vec<&str> = super::ONNX.to_vec();
    flags.extend(store_flags.iter().map(String::as_str));
    flags.extend(["--api-keys-file", &keys]);
    let server = super::InProcessServer::start(&flags).await;
    run(&server.address, "").await;
}
