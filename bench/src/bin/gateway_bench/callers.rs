//! The calls the workers repeat: POST /v1/search over a worker's own HTTP/1.1
//! keep-alive connection, or the gRPC Search rpc over a worker's own HTTP/2
//! connection, each checking that the answer has hits (a search of an empty or
//! broken index must not pass for a fast one).

use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use embedwire_bench::closed_loop::Caller;
use embedwire_bench::http_client::HttpConnection;
use embedwire_proto::v1::search_query::Query;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{SearchQuery, SearchRequest};
use http::Method;
use serde::Deserialize;
use tonic::transport::Channel;

/// The query of the existing gateways' benchmark client.
pub const KNOWN_QUERY: &str = "example query about RAG gateways";
/// Its warm-up query.
pub const WARMUP_QUERY: &str = "warmup";
/// Warm-up calls before measuring, as that client makes them.
pub const WARMUP_CALLS: usize = 5;

/// A /v1/search answer, as far as the bench checks it.
#[derive(Debug, Deserialize)]
struct SearchAnswer {
    results: Vec<serde_json::Value>,
}

/// The JSON body of one /v1/search call.
pub fn search_body(query: &str, top_k: u32) -> Bytes {
    Bytes::from(serde_json::to_vec(&serde_json::json!({"query": query, "top_k": top_k})).expect("plain JSON"))
}

/// POST /v1/search with the bodies in rotation, starting at `first`.
pub struct HttpSearch {
    pub connection: HttpConnection,
    pub bodies: Arc<[Bytes]>,
    pub first: usize,
}

impl HttpSearch {
    /// One search with `body`; fails unless 200 with at least one result.
    pub async fn search(connection: &mut HttpConnection, body: Bytes) -> anyhow::Result<()> {
        let answer = connection.send(Method::POST, "/v1/search", Some((body, "application/json")), None).await?;
        let parsed: SearchAnswer = answer.json().context("/v1/search")?;
        anyhow::ensure!(!parsed.results.is_empty(), "/v1/search answered no results");
        Ok(())
    }
}

impl Caller for HttpSearch {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let body = self.bodies[(self.first + n) % self.bodies.len()].clone();
        HttpSearch::search(&mut self.connection, body).await
    }
}

/// The gRPC Search rpc with one text query, the query texts in rotation.
pub struct GrpcSearch {
    pub client: SearchServiceClient<Channel>,
    pub queries: Arc<[String]>,
    pub first: usize,
    pub top_k: u32,
}

impl Caller for GrpcSearch {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let text = self.queries[(self.first + n) % self.queries.len()].clone();
        let request = SearchRequest {
            queries: vec![SearchQuery { query: Some(Query::Text(text)) }],
            top_k: Some(self.top_k),
            ..Default::default()
        };
        let response = self.client.search(request).await.context("Search")?.into_inner();
        anyhow::ensure!(
            response.results.first().is_some_and(|result| !result.hits.is_empty()),
            "Search answered no hits"
        );
        Ok(())
    }
}
