//! The auth matrix: every rpc and HTTP route without a key, with a wrong key, with a
//! read-only key, and with the right key; the open routes; per-key rate limits.

use crate::common;

use common::collection_access::{code, with_key};
use common::{InProcessServer, PSEUDO};
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::*;
use serde_json::json;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const ADMIN: &str = "admin-key-0123456789abcdef";
const READER: &str = "reader-key-0123456789abcdef";
const WRONG: &str = "wrong-key-0123456789abcdef";

/// The rpcs that change the index: a read-only key may not call them.
const WRITES: [&str; 3] = ["Ingest", "IngestStream", "DeleteDocuments"];

/// Calls every rpc of both services once with `key`; returns each rpc's status code.
async fn call_every_rpc(channel: Channel, key: Option<&str>, job_id: &str) -> Vec<(&'static str, Code)> {
    let mut embed = EmbedServiceClient::new(channel.clone());
    let mut search = SearchServiceClient::new(channel);
    let inputs = vec!["hello".to_string()];
    let document = Document { id: "doc".into(), text: "some text".into(), ..Default::default() };
    let query = SearchRequest {
        queries: vec![SearchQuery { query: Some(search_query::Query::Text("text".into())) }],
        ..Default::default()
    };
    let mut codes = vec![
        (
            "Embed",
            code(embed.embed(with_key(EmbedRequest { inputs: inputs.clone(), ..Default::default() }, key)).await),
        ),
        (
            "Tokenize",
            code(embed.tokenize(with_key(TokenizeRequest { inputs: inputs.clone(), truncate: None }, key)).await),
        ),
        ("Info", code(embed.info(with_key(InfoRequest {}, key)).await)),
    ];
    let stream_message =
        EmbedStreamRequest { request_id: "1".into(), request: Some(EmbedRequest { inputs, ..Default::default() }) };
    let stream = embed.embed_stream(with_key(futures::stream::iter(vec![stream_message]), key)).await;
    let stream_code = match stream {
        Ok(response) => code(response.into_inner().message().await),
        Err(status) => status.code(),
    };
    codes.push(("EmbedStream", stream_code));
    codes.push((
        "Ingest",
        code(
            search
                .ingest(with_key(IngestRequest { documents: vec![document.clone()], ..Default::default() }, key))
                .await,
        ),
    ));
    let stream = futures::stream::iter(vec![IngestStreamRequest { documents: vec![document], ..Default::default() }]);
    codes.push(("IngestStream", code(search.ingest_stream(with_key(stream, key)).await)));
    codes.push((
        "GetJob",
        code(search.get_job(with_key(GetJobRequest { job_id: job_id.into(), ..Default::default() }, key)).await),
    ));
    let watch = search.watch_job(with_key(WatchJobRequest { job_id: job_id.into(), ..Default::default() }, key)).await;
    codes.push((
        "WatchJob",
        match watch {
            Ok(response) => code(response.into_inner().message().await),
            Err(status) => status.code(),
        },
    ));
    codes.push((
        "GetDocuments",
        code(
            search
                .get_documents(with_key(GetDocumentsRequest { ids: vec!["doc".into()], ..Default::default() }, key))
                .await,
        ),
    ));
    codes.push((
        "DeleteDocuments",
        code(
            search
                .delete_documents(with_key(
                    DeleteDocumentsRequest { ids: vec!["gone".into()], filter: None, ..Default::default() },
                    key,
                ))
                .await,
        ),
    ));
    codes.push(("Search", code(search.search(with_key(query.clone(), key)).await)));
    let paged = search.search_stream(with_key(SearchStreamRequest { search: Some(query), page_size: 10 }, key)).await;
    codes.push((
        "SearchStream",
        match paged {
            Ok(response) => code(response.into_inner().message().await),
            Err(status) => status.code(),
        },
    ));
    codes.push(("GetIndexStats", code(search.get_index_stats(with_key(GetIndexStatsRequest::default(), key)).await)));
    codes
}

/// (method, path, body) of every keyed HTTP route.
fn http_routes(job_id: &str) -> Vec<(&'static str, String, Option<serde_json::Value>)> {
    vec![
        ("POST", "/v1/ingest".into(), Some(json!({"documents": [{"text": "hello"}]}))),
        ("GET", format!("/v1/jobs/{job_id}"), None),
        ("POST", "/v1/search".into(), Some(json!({"query": "hello"}))),
        ("POST", "/embed".into(), Some(json!({"texts": ["hello"]}))),
        ("POST", "/v1/embeddings".into(), Some(json!({"input": "hello"}))),
    ]
}

async fn http_status(base: &str, method: &str, path: &str, body: &Option<serde_json::Value>, key: Option<&str>) -> u16 {
    let client = reqwest::Client::new();
    let mut request = client.request(method.parse().unwrap(), format!("{base}{path}"));
    if let Some(body) = body {
        request = request.json(body);
    }
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix_for_every_rpc_and_route() {
    let server =
        InProcessServer::start(&[PSEUDO, &["--api-keys", ADMIN, "--read-only-api-keys", READER]].concat()).await;
    let channel = Channel::from_shared(server.address.clone()).unwrap().connect().await.unwrap();

    // A job to look up, made with the admin key.
    let job = SearchServiceClient::new(channel.clone())
        .ingest(with_key(
            IngestRequest {
                documents: vec![Document { id: "doc".into(), text: "text".into(), ..Default::default() }],
                ..Default::default()
            },
            Some(ADMIN),
        ))
        .await
        .unwrap()
        .into_inner();
    let job_id = job.job.unwrap().job_id;

    for (label, key) in [("no key", None), ("wrong key", Some(WRONG))] {
        for (rpc, code) in call_every_rpc(channel.clone(), key, &job_id).await {
            assert_eq!(code, Code::Unauthenticated, "{rpc} with {label}");
        }
    }
    for (rpc, code) in call_every_rpc(channel.clone(), Some(READER), &job_id).await {
        let expected = if WRITES.contains(&rpc) { Code::PermissionDenied } else { Code::Ok };
        assert_eq!(code, expected, "{rpc} with the read-only key");
    }
    for (rpc, code) in call_every_rpc(channel.clone(), Some(ADMIN), &job_id).await {
        assert_eq!(code, Code::Ok, "{rpc} with the admin key");
    }

    // A malformed header is refused as unauthenticated, not as an error of the server.
    let mut embed = EmbedServiceClient::new(channel.clone());
    let mut request = Request::new(InfoRequest {});
    request.metadata_mut().insert("authorization", MetadataValue::from_static("Basic abc"));
    assert_eq!(code(embed.info(request).await), Code::Unauthenticated);

    // Health stays open for probes.
    let health = HealthClient::new(channel.clone()).check(HealthCheckRequest { service: String::new() }).await;
    assert!(health.is_ok(), "health needs no key");

    let base = server.address.clone();
    for (method, path, body) in http_routes(&job_id) {
        assert_eq!(http_status(&base, method, &path, &body, None).await, 401, "{method} {path} without a key");
        assert_eq!(
            http_status(&base, method, &path, &body, Some(WRONG)).await,
            401,
            "{method} {path} with a wrong key"
        );
        let read_only = if path == "/v1/ingest" { 403 } else { 200 };
        assert_eq!(
            http_status(&base, method, &path, &body, Some(READER)).await,
            read_only,
            "{method} {path} read-only"
        );
        assert_eq!(
            http_status(&base, method, &path, &body, Some(ADMIN)).await,
            200,
            "{method} {path} with the admin key"
        );
    }
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json", "/"] {
        assert_eq!(http_status(&base, "GET", path, &None, None).await, 200, "{path} stays open");
    }

    // The 401 names the problem, in OpenAI's format on its route.
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .json(&json!({"input": "x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["error"]["type"], "authentication_error", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("Bearer"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_require_a_key_and_rate_limits_apply_per_key() {
    let keys = format!("{ADMIN},{WRONG}");
    let args =
        [PSEUDO, &["--api-keys", &keys, "--metrics-require-key", "--rate-limit-rps", "1", "--rate-limit-burst", "3"]]
            .concat();
    let server = InProcessServer::start(&args).await;
    let base = server.address.clone();
    assert_eq!(http_status(&base, "GET", "/metrics", &None, None).await, 401);
    let channel = Channel::from_shared(base.clone()).unwrap().connect().await.unwrap();
    let mut embed = EmbedServiceClient::new(channel);
    // /metrics with the key spent one token of ADMIN's burst of 3.
    assert_eq!(http_status(&base, "GET", "/metrics", &None, Some(ADMIN)).await, 200);
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(code(embed.info(with_key(InfoRequest {}, Some(ADMIN))).await));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::ResourceExhausted, Code::ResourceExhausted], "burst 3, then limited");
    let body = Some(json!({"texts": ["x"]}));
    assert_eq!(http_status(&base, "POST", "/embed", &body, Some(ADMIN)).await, 429, "HTTP gets 429");
    assert_eq!(code(embed.info(with_key(InfoRequest {}, Some(WRONG))).await), Code::Ok, "each key has its own bucket");
}

#[test]
fn bad_key_configuration_fails_at_start() {
    use clap::Parser;
    let config = embedwire_server::ServerConfig::parse_from(["embedwire-server", "--api-keys", "short"]);
    let error = embedwire_server::EmbedServer::new(config).err().expect("a short key is refused");
    assert!(error.to_string().contains("16 characters"), "{error}");
    let config = embedwire_server::ServerConfig::parse_from([
        "embedwire-server",
        "--backend",
        "pseudo",
        "--rate-limit-rps",
        "5",
    ]);
    assert!(embedwire_server::EmbedServer::new(config).is_err(), "a rate limit without keys is refused");
}
