//! The upstream of the split deployment: one or more embedwire-server processes
//! reached over gRPC.
//!
//! Embedding is stateless, so embed calls are balanced round-robin over every
//! upstream. Ingest, search and index statistics are stateful (each server has its
//! own index), so they go to the first healthy upstream in the configured order and
//! fail over to the next one: one index answers while it is up. A job is looked up on
//! every upstream, since failover may have put it on any of them. An upstream that
//! cannot be reached is skipped for a cool-down, and a call it failed is retried on
//! the next one, unless the call may already have taken effect there.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    EmbedRequest, EmbedResponse, GetIndexStatsRequest, GetIndexStatsResponse, GetJobRequest, GetJobResponse,
    InfoRequest, InfoResponse, IngestRequest, IngestResponse, SearchRequest, SearchResponse,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::upstream::{Readiness, Upstream};

/// How the gateway talks to its upstreams.
#[derive(Debug, Clone)]
pub struct GrpcUpstreamSettings {
    /// Upstream addresses (`http://host:port`), in failover order.
    pub addresses: Vec<String>,
    /// Time allowed to open a connection before the upstream counts as down.
    pub connect_timeout: Duration,
    /// How long an unreachable upstream is skipped before it is tried again.
    pub cool_down: Duration,
    /// Deadline of each upstream call.
    pub request_timeout: Duration,
    /// Largest message accepted from or sent to an upstream.
    pub max_message_bytes: usize,
    /// Key presented to the upstreams, when they require one.
    pub api_key: Option<String>,
}

/// One upstream server.
struct Member {
    address: String,
    channel: Channel,
    /// Set when a call could not reach it: skipped until then.
    down_until: Mutex<Option<Instant>>,
}

impl Member {
    fn is_down(&self, now: Instant) -> bool {
        self.down_until.lock().expect("lock poisoned").is_some_and(|until| until > now)
    }
}

/// Several embedwire-server processes behind one interface.
pub struct GrpcUpstream {
    members: Vec<Member>,
    /// Round-robin position for embed calls.
    next: AtomicUsize,
    settings: GrpcUpstreamSettings,
    /// `Bearer KEY` for the upstreams, parsed once.
    authorization: Option<MetadataValue<Ascii>>,
}

/// Whether a failed call may be sent to another upstream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Reads and embeddings: repeating them is harmless.
    Idempotent,
    /// Ingest: only when the request never left (the connection could not be made),
    /// or a second copy could create a second job.
    OnlyIfNotSent,
}

impl GrpcUpstream {
    /// Channels to every address; connections open lazily, so a server that is down
    /// at start does not stop the gateway.
    pub fn new(settings: GrpcUpstreamSettings) -> Result<Self, String> {
        if settings.addresses.is_empty() {
            return Err("at least one upstream address is needed".into());
        }
        let members = settings
            .addresses
            .iter()
            .map(|address| {
                let endpoint = Endpoint::from_shared(address.clone())
                    .map_err(|e| format!("upstream address {address:?}: {e}"))?
                    .connect_timeout(settings.connect_timeout)
                    .timeout(settings.request_timeout)
                    .tcp_nodelay(true);
                Ok(Member { address: address.clone(), channel: endpoint.connect_lazy(), down_until: Mutex::new(None) })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let authorization = settings
            .api_key
            .as_ref()
            .map(|key| {
                MetadataValue::try_from(format!("Bearer {key}"))
                    .map_err(|_| "the upstream API key is not valid ASCII".to_string())
            })
            .transpose()?;
        Ok(GrpcUpstream { members, next: AtomicUsize::new(0), settings, authorization })
    }

    /// `message` as a request carrying the upstream key.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.authorization {
            request.metadata_mut().insert("authorization", value.clone());
        }
        request
    }

    fn embed_client(&self, channel: Channel) -> EmbedServiceClient<Channel> {
        EmbedServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes)
            .max_encoding_message_size(self.settings.max_message_bytes)
    }

    fn search_client(&self, channel: Channel) -> SearchServiceClient<Channel> {
        SearchServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes)
            .max_encoding_message_size(self.settings.max_message_bytes)
    }

    /// Member indexes starting at `first`, those in cool-down moved to the end (they
    /// are still tried when nothing else answers).
    fn order_from(&self, first: usize) -> Vec<usize> {
        let now = Instant::now();
        let count = self.members.len();
        let rotated = (0..count).map(|i| (first + i) % count);
        let (up, down): (Vec<usize>, Vec<usize>) = rotated.partition(|&i| !self.members[i].is_down(now));
        up.into_iter().chain(down).collect()
    }

    fn round_robin(&self) -> Vec<usize> {
        self.order_from(self.next.fetch_add(1, Ordering::Relaxed) % self.members.len())
    }

    fn primary_first(&self) -> Vec<usize> {
        self.order_from(0)
    }

    /// Runs `call` on the members in `order` until one answers or fails in a way that
    /// another member would not fix.
    async fn call<T, F, Fut>(&self, order: Vec<usize>, retry: Retry, call: F) -> Result<T, Status>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut last_error = Status::unavailable("no upstream configured");
        for index in order {
            let member = &self.members[index];
            match call(member.channel.clone()).await {
                Ok(value) => {
                    *member.down_until.lock().expect("lock poisoned") = None;
                    return Ok(value);
                }
                Err(status) if is_unreachable(&status) => {
                    tracing::warn!(upstream = %member.address, error = %status.message(), "upstream unreachable");
                    *member.down_until.lock().expect("lock poisoned") = Some(Instant::now() + self.settings.cool_down);
                    let sent = !is_connect_failure(&status);
                    last_error = Status::unavailable(format!("upstream {}: {}", member.address, status.message()));
                    if sent && retry == Retry::OnlyIfNotSent {
                        return Err(last_error);
                    }
                }
                Err(status) => return Err(status),
            }
        }
        Err(last_error)
    }
}

/// The upstream could not be reached, or went away mid-call.
fn is_unreachable(status: &Status) -> bool {
    status.code() == Code::Unavailable
}

/// The connection could not even be opened: the request was certainly not sent.
/// tonic reports these as UNAVAILABLE with a transport error as the source.
fn is_connect_failure(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        let text = error.to_string();
        if text.contains("connect") || text.contains("Connection refused") || text.contains("timed out") {
            return true;
        }
        source = error.source();
    }
    status.message().contains("connect")
}

impl Upstream for GrpcUpstream {
    async fn embed(&self, request: EmbedRequest) -> Result<tonic::Response<EmbedResponse>, Status> {
        self.call(self.round_robin(), Retry::Idempotent, |channel| {
            let request = self.request(request.clone());
            let mut client = self.embed_client(channel);
            async move { client.embed(request).await }
        })
        .await
    }

    async fn info(&self) -> Result<InfoResponse, Status> {
        self.call(self.primary_first(), Retry::Idempotent, |channel| {
            let request = self.request(InfoRequest {});
            let mut client = self.embed_client(channel);
            async move { client.info(request).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    async fn ingest(&self, request: IngestRequest) -> Result<IngestResponse, Status> {
        self.call(self.primary_first(), Retry::OnlyIfNotSent, |channel| {
            let request = self.request(request.clone());
            let mut client = self.search_client(channel);
            async move { client.ingest(request).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    async fn get_job(&self, job_id: String) -> Result<GetJobResponse, Status> {
        let mut not_found = None;
        for index in self.primary_first() {
            let found = self
                .call(vec![index], Retry::Idempotent, |channel| {
                    let request = self.request(GetJobRequest { job_id: job_id.clone() });
                    let mut client = self.search_client(channel);
                    async move { client.get_job(request).await.map(tonic::Response::into_inner) }
                })
                .await;
            match found {
                Err(status) if status.code() == Code::NotFound => not_found = Some(status),
                Err(status) if status.code() == Code::Unavailable => not_found = not_found.or(Some(status)),
                other => return other,
            }
        }
        Err(not_found.unwrap_or_else(|| Status::not_found(format!("job_id: no job {job_id:?}"))))
    }

    async fn search(&self, request: SearchRequest) -> Result<SearchResponse, Status> {
        self.call(self.primary_first(), Retry::Idempotent, |channel| {
            let request = self.request(request.clone());
            let mut client = self.search_client(channel);
            async move { client.search(request).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    async fn index_stats(&self) -> Result<GetIndexStatsResponse, Status> {
        self.call(self.primary_first(), Retry::Idempotent, |channel| {
            let request = self.request(GetIndexStatsRequest {});
            let mut client = self.search_client(channel);
            async move { client.get_index_stats(request).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// Ready when at least one upstream reports SERVING.
    async fn readiness(&self) -> Readiness {
        let checks = self.members.iter().map(|member| async move {
            let mut client = HealthClient::new(member.channel.clone());
            let check = client.check(HealthCheckRequest { service: String::new() });
            match tokio::time::timeout(self.settings.connect_timeout, check).await {
                Ok(Ok(response)) if response.get_ref().status() == ServingStatus::Serving => Ok(()),
                Ok(Ok(response)) => Err(format!("{}: {:?}", member.address, response.get_ref().status())),
                Ok(Err(status)) => Err(format!("{}: {}", member.address, status.message())),
                Err(_) => Err(format!("{}: no answer", member.address)),
            }
        });
        let results = futures::future::join_all(checks).await;
        let ready = results.iter().any(Result::is_ok);
        let problems: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        Readiness { ready, detail: problems.join("; ") }
    }

    fn metrics_text(&self) -> String {
        let now = Instant::now();
        let mut text = String::from(
            "# HELP embedwire_gateway_upstream_up Whether the gateway currently routes to this upstream.\n\
             # TYPE embedwire_gateway_upstream_up gauge\n",
        );
        for member in &self.members {
            let up = u8::from(!member.is_down(now));
            text.push_str(&format!("embedwire_gateway_upstream_up{{upstream=\"{}\"}} {up}\n", member.address));
        }
        text
    }
}
