//! The upstream of the split deployment: one or more embedwire-server processes
//! reached over gRPC.
//!
//! Embedding and reranking are stateless, so embed and rerank calls are balanced
//! round-robin over every upstream. Ingest, search, jobs and index statistics are stateful, and where they
//! go depends on the upstreams' stores, which a background probe learns from each
//! server's `Info` (and its health and index statistics) every
//! [`GrpcUpstreamSettings::probe_interval`], never once per request:
//!
//! - **Per-server indexes** (embedded stores, or servers that do not say): every
//!   server has an index of its own. Stateful calls go to the first healthy upstream
//!   in the configured order and fail over to the next one: one index answers while
//!   it is up. A failover therefore switches to *another index*, which may not hold
//!   the documents ingested so far. Every answer names its index
//!   (`x-embedwire-index`) and upstream (`x-embedwire-upstream`), and the gateway
//!   remembers which indexes held documents: when one of them becomes unreachable,
//!   `/healthz` says `degraded` and `/readyz` answers 503, naming the lost index and
//!   the one answering instead.
//! - **A shared index** (every healthy upstream reports `shared` with the same
//!   `index_id`, e.g. one Weaviate collection): any server answers for the same data,
//!   so stateful calls are balanced round-robin like embed calls, and one server
//!   going down loses nothing. A store that every server reports unhealthy is
//!   degraded.
//!
//! **Divergence after failback.** When the first upstream comes back, stateful calls
//! return to its index, which lacks what was ingested into the other one meanwhile.
//! Two kinds of evidence make `/healthz` say `degraded` then, with every upstream's
//! document count:
//! - the gateway's own record: the ids of documents it ingested into an index while
//!   an upstream earlier in the order (whose index answers when it is up) had another
//!   index. While that index answers, each probe asks it for those ids
//!   (`GetDocuments`) and forgets the ones it holds, so re-ingesting them heals it.
//!   The record is exact but lives in the gateway's memory (bounded by
//!   [`MAX_TRACKED_MISSING`]) and sees only ingests made through this gateway;
//! - the counts, which need no memory: another reachable index, not the answering
//!   one, holding more documents than the answering index certainly holds some it
//!   lacks. A smaller count proves nothing (200 documents may lack 3 of another
//!   index's 50), which is why the record exists.
//!
//! Neither kind raises a false alarm while an ingest job runs: counts are compared
//! only as of each index's last probe with no pending documents (a job that is still
//! indexing changes nothing until it ends), and recorded ids are checked only against
//! an index with nothing pending, so a document counts as present once searchable.
//! Indexes that are empty, and upstreams sharing the answering index (one Weaviate
//! collection, one PostgreSQL schema), are never compared.
//!
//! **Counts and store nodes.** `/healthz`'s document count is one that the servers
//! of the answering index vouch for ([`vouched_count`]): never the sum over servers
//! sharing an index, and a count a server marked as not exact (its store misses a
//! node) stays marked, with its age. A store node that a server reports missing makes
//! `/healthz` `degraded`, naming it, but routes nothing away from that server: only
//! a server that does not answer, or whose store cannot serve at all (NOT_SERVING),
//! is taken out. An UNAVAILABLE that a server answers itself (its store failed that
//! one call) sends the call to the next server and leaves the first in the rotation.
//!
//! A job is looked up on every upstream when the first asked does not know it, since
//! failover (or a store that keeps jobs per server) may have put it on any of them.
//! An upstream that cannot be reached is skipped for a cool-down, and a call it failed
//! is retried on the next one, unless the call may already have taken effect there.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use embedwire_proto::transport;
use embedwire_proto::v1::collection_service_client::CollectionServiceClient;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::rerank_service_client::RerankServiceClient;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{
    CreateCollectionRequest, CreateCollectionResponse, DeleteCollectionRequest, DeleteCollectionResponse, EmbedRequest,
    EmbedResponse, GetDocumentsRequest, GetDocumentsResponse, GetIndexStatsRequest, GetIndexStatsResponse,
    GetJobRequest, GetJobResponse, InfoRequest, InfoResponse, IngestRequest, IngestResponse, ListCollectionsRequest,
    ListCollectionsResponse, RerankRequest, RerankResponse, SearchRequest, SearchResponse, StoreInfo,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::upstream::{DocumentCount, HealthReport, Origin, Readiness, Served, StoreStatus, Upstream, UpstreamStatus};

/// Most document ids the gateway remembers per upstream as ingested elsewhere while
/// its index did not answer (about 100 bytes each). Past it, further ids are not
/// recorded (a warning says so) and only the counts can tell.
pub const MAX_TRACKED_MISSING: usize = 100_000;
/// Ids per `GetDocuments` call when checking for them.
const IDS_PER_CHECK: usize = 1_000;

/// How the gateway talks to its upstreams.
#[derive(Debug, Clone)]
pub struct GrpcUpstreamSettings {
    /// Upstream addresses (`http://host:port`), in failover order.
    pub addresses: Vec<String>,
    /// Time allowed to open a connection (and to answer a probe) before the upstream
    /// counts as down.
    pub connect_timeout: Duration,
    /// How long an unreachable upstream is skipped before it is tried again.
    pub cool_down: Duration,
    /// Deadline of each upstream call.
    pub request_timeout: Duration,
    /// Largest message accepted from or sent to an upstream.
    pub max_message_bytes: usize,
    /// Key presented to the upstreams, when they require one.
    pub api_key: Option<String>,
    /// How often [`GrpcUpstream::spawn_probes`] refreshes each upstream's health,
    /// store and document count.
    pub probe_interval: Duration,
}

/// One upstream server.
struct Member {
    address: String,
    channel: Channel,
    /// Set when a call could not reach it: skipped until then.
    down_until: Mutex<Option<Instant>>,
    /// What probes and answers taught the gateway about it.
    seen: Mutex<Seen>,
}

/// What the gateway knows of one upstream's index; kept while the upstream is down,
/// so that a lost index can still be named.
#[derive(Debug, Default)]
struct Seen {
    /// Its store, from its last Info (None before one answered, or from a server that
    /// does not report a store).
    store: Option<StoreInfo>,
    /// Whether the last health check (or call) found it serving; None before any.
    serving: Option<bool>,
    /// Documents in its index at the last probe, as its server vouched for them.
    count: Option<ProbedCount>,
    /// Documents stored but not indexed yet at the last probe (a job is running).
    pending_documents: Option<u64>,
    /// Documents in its index at the last probe with nothing pending: what divergence
    /// compares, so that a running job raises no alarm.
    settled_documents: Option<u64>,
    /// Ids ingested through the gateway into another index while this upstream's
    /// (earlier in the order) did not answer, and not found in it since.
    missing: BTreeSet<String>,
    /// Its index held documents at some point (seen in its statistics, or ingest and
    /// search answers with content): losing it loses data.
    held_data: bool,
}

/// One upstream's document count at a probe, as its server vouched for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProbedCount {
    /// The count: exact at the probe, or its server's last exact one; None when its
    /// server had no exact count.
    documents: Option<u64>,
    /// Whether it was exact at the probe.
    exact: bool,
    /// When it was exact (the probe's time for an exact count; None without one).
    exact_at: Option<Instant>,
    /// Why it was not exact.
    detail: Option<String>,
}

impl ProbedCount {
    /// The count of a GetIndexStats answer received at `now`.
    fn of(stats: &GetIndexStatsResponse, now: Instant) -> Self {
        let count = DocumentCount::from_stats(stats);
        let age = count.age.unwrap_or_default();
        ProbedCount {
            documents: count.value,
            exact: count.exact,
            exact_at: count.value.map(|_| now.checked_sub(age).unwrap_or(now)),
            detail: count.detail,
        }
    }
}

impl Seen {
    fn record_stats(&mut self, stats: &GetIndexStatsResponse) {
        let count = ProbedCount::of(stats, Instant::now());
        self.pending_documents = Some(stats.pending_documents);
        // Divergence compares exact counts only: a last exact one may predate writes.
        if count.exact && stats.pending_documents == 0 {
            self.settled_documents = Some(stats.document_count);
        }
        self.held_data |= count.documents.unwrap_or(0) > 0;
        self.count = Some(count);
    }

    fn document_count(&self) -> Option<u64> {
        self.count.as_ref().and_then(|c| c.documents)
    }
}

impl Member {
    fn is_down(&self, now: Instant) -> bool {
        self.down_until.lock().expect("lock poisoned").is_some_and(|until| until > now)
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().expect("lock poisoned")
    }

    fn mark_down(&self, cool_down: Duration) {
        *self.down_until.lock().expect("lock poisoned") = Some(Instant::now() + cool_down);
        self.seen().serving = Some(false);
    }

    fn mark_up(&self) {
        *self.down_until.lock().expect("lock poisoned") = None;
        self.seen().serving = Some(true);
    }

    /// Its store as `/healthz` shows it (an unreported store: embedded, named after
    /// the address).
    fn store(&self) -> StoreStatus {
        StoreStatus::from_wire(self.seen().store.as_ref(), &self.address)
    }

    fn view(&self, now: Instant) -> MemberView {
        let store = self.store();
        let missing_nodes = store.missing_nodes().iter().map(|n| n.to_string()).collect();
        let seen = self.seen();
        MemberView {
            up: !self.is_down(now) && seen.serving != Some(false),
            index_id: store.index_id,
            shared: store.shared,
            store_healthy: store.healthy,
            held_data: seen.held_data,
            documents: seen.settled_documents,
            missing: seen.missing.len(),
            count: seen.count.clone(),
            missing_nodes,
        }
    }
}

/// Several embedwire-server processes behind one interface.
pub struct GrpcUpstream {
    members: Vec<Member>,
    /// Round-robin position for embed calls.
    next: AtomicUsize,
    /// Round-robin position for stateful calls over a shared index.
    next_stateful: AtomicUsize,
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

/// One upstream as routing and degradation see it: plain data, so that both are
/// pure functions with unit tests.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberView {
    /// Not in cool-down, and not failing its last health check.
    up: bool,
    /// The index it serves.
    index_id: String,
    /// Whether other servers serve that index too.
    shared: bool,
    /// Whether it reports its store reachable.
    store_healthy: bool,
    /// Its index held documents at some point.
    held_data: bool,
    /// Documents in its index with nothing pending (see [`Seen::settled_documents`]).
    documents: Option<u64>,
    /// Documents ingested into other indexes that its index is known to lack.
    missing: usize,
    /// Its document count at the last probe.
    count: Option<ProbedCount>,
    /// Store nodes it reports missing.
    missing_nodes: Vec<String>,
}

/// The index every healthy upstream shares, if they all report the same shared one.
fn shared_index(views: &[MemberView]) -> Option<&str> {
    let mut up = views.iter().filter(|v| v.up);
    let first = up.next().filter(|v| v.shared)?;
    up.all(|v| v.shared && v.index_id == first.index_id).then_some(first.index_id.as_str())
}

/// The order in which stateful calls try the upstreams. Over a shared index: a
/// rotation starting at `turn` (round robin over the healthy ones); otherwise the
/// configured order (first healthy, then failover). Either way, upstreams that are
/// down or whose store is unhealthy come last: still tried when nothing else answers.
fn stateful_order(views: &[MemberView], turn: usize) -> Vec<usize> {
    let count = views.len();
    let first = if shared_index(views).is_some() { turn % count.max(1) } else { 0 };
    preferred_first(views, (0..count).map(|i| (first + i) % count))
}

/// `order` with the upstreams that are up and whose store is healthy first.
fn preferred_first(views: &[MemberView], order: impl Iterator<Item = usize>) -> Vec<usize> {
    let (good, rest): (Vec<usize>, Vec<usize>) = order.partition(|&i| views[i].up && views[i].store_healthy);
    good.into_iter().chain(rest).collect()
}

/// The document count `/healthz` reports: the freshest count that the upstreams
/// serving the answering index vouch for.
///
/// Never a sum, never a pick among inexact counts dressed as exact: servers sharing
/// one index (a Weaviate collection) each count the whole of it, so adding them up
/// multiplies it, and one whose store misses a node reports its last exact count,
/// which stays marked as such here with its age. With per-server indexes only the
/// answering one counts: the others hold other documents.
fn vouched_count(views: &[MemberView], answering: Option<usize>, now: Instant) -> DocumentCount {
    let Some(answer) = answering.map(|i| &views[i]).filter(|v| v.up) else {
        return DocumentCount::unknown("no upstream answers");
    };
    let same_index = |i: usize, v: &MemberView| {
        Some(i) == answering || (v.up && v.shared && answer.shared && v.index_id == answer.index_id)
    };
    let counts: Vec<&ProbedCount> =
        views.iter().enumerate().filter(|&(i, v)| same_index(i, v)).filter_map(|(_, v)| v.count.as_ref()).collect();
    if let Some(best) = counts.iter().filter(|c| c.exact).max_by_key(|c| c.exact_at) {
        return DocumentCount { value: best.documents, exact: true, age: None, detail: None };
    }
    if let Some(best) = counts.iter().filter(|c| c.documents.is_some()).max_by_key(|c| c.exact_at) {
        return DocumentCount {
            value: best.documents,
            exact: false,
            age: best.exact_at.map(|at| now.saturating_duration_since(at)),
            detail: best.detail.clone(),
        };
    }
    let mut reasons: Vec<&str> = counts.iter().filter_map(|c| c.detail.as_deref()).collect();
    reasons.dedup();
    match reasons.is_empty() {
        true => DocumentCount::unknown("not counted yet"),
        false => DocumentCount::unknown(reasons.join("; ")),
    }
}

/// The store nodes that upstreams that answer report missing, per index, naming who
/// sees it; None when every store is whole.
fn store_nodes_missing(views: &[MemberView], addresses: &[String]) -> Option<String> {
    let mut problems: Vec<String> = Vec::new();
    let mut done: Vec<(&str, &[String])> = Vec::new();
    for view in views.iter().filter(|v| v.up && !v.missing_nodes.is_empty()) {
        let key = (view.index_id.as_str(), view.missing_nodes.as_slice());
        if done.contains(&key) {
            continue;
        }
        done.push(key);
        let seen_by: Vec<&str> = views
            .iter()
            .zip(addresses)
            .filter(|(o, _)| o.up && o.index_id == view.index_id && o.missing_nodes == view.missing_nodes)
            .map(|(_, a)| a.as_str())
            .collect();
        problems.push(format!(
            "store node {} of index {} missing (reported by {})",
            view.missing_nodes.join(", "),
            view.index_id,
            seen_by.join(", ")
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// Why answers may lack data, naming each index that held documents and cannot be
/// reached through any upstream, or a store unhealthy on every upstream; `answering`
/// is the upstream stateful calls go to now.
fn degradation(views: &[MemberView], addresses: &[String], answering: Option<usize>) -> Option<String> {
    let mut problems = Vec::new();
    for (view, address) in views.iter().zip(addresses) {
        let reachable_elsewhere = views.iter().any(|o| o.up && o.shared && o.index_id == view.index_id);
        if !view.up && view.held_data && !reachable_elsewhere {
            problems.push(format!("index {} at {address} unreachable", view.index_id));
        }
    }
    let up: Vec<&MemberView> = views.iter().filter(|v| v.up).collect();
    if !up.is_empty() && up.iter().all(|v| !v.store_healthy) {
        let mut ids: Vec<&str> = up.iter().map(|v| v.index_id.as_str()).collect();
        ids.dedup();
        problems.push(format!("store of index {} unhealthy on every upstream", ids.join(", ")));
    }
    let diverged = divergence(views, addresses, answering);
    if !diverged.is_empty() {
        problems.extend(diverged);
        let counts: Vec<String> = views
            .iter()
            .zip(addresses)
            .map(|(view, address)| match view.documents {
                Some(count) => format!("{address} {count}"),
                None => format!("{address} unknown"),
            })
            .collect();
        problems.push(format!("document counts: {}", counts.join(", ")));
    }
    if problems.is_empty() {
        return None;
    }
    let now = match answering.map(|i| &views[i]).filter(|v| v.up) {
        Some(view) => format!("answering from index {}", view.index_id),
        None => "no upstream answers".to_string(),
    };
    Some(format!("{}; {now}", problems.join("; ")))
}

/// Why the answering index lacks documents that another reachable index holds (see
/// the module doc): ids recorded as ingested elsewhere and not found in it, or
/// another index holding more documents. Empty when it lacks nothing known.
fn divergence(views: &[MemberView], addresses: &[String], answering: Option<usize>) -> Vec<String> {
    let Some((a, answer)) = answering.map(|i| (i, &views[i])).filter(|(_, v)| v.up) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    if answer.missing > 0 {
        problems.push(format!(
            "index {} at {} lacks {} documents ingested into another index while it did not answer",
            answer.index_id, addresses[a], answer.missing
        ));
    }
    for (other, address) in views.iter().zip(addresses) {
        if !other.up || other.index_id == answer.index_id {
            continue;
        }
        if let (Some(theirs), Some(ours)) = (other.documents, answer.documents)
            && theirs > ours
        {
            problems.push(format!(
                "index {} at {address} holds more documents ({theirs}) than index {} ({ours})",
                other.index_id, answer.index_id
            ));
        }
    }
    problems
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
                    .tcp_nodelay(true)
                    // Vector answers in one DATA frame, not 16 KiB pieces (see the constant).
                    .max_frame_size(embedwire_proto::transport::MAX_FRAME_SIZE);
                Ok(Member {
                    address: address.clone(),
                    channel: endpoint.connect_lazy(),
                    down_until: Mutex::new(None),
                    seen: Mutex::new(Seen::default()),
                })
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
        Ok(GrpcUpstream {
            members,
            next: AtomicUsize::new(0),
            next_stateful: AtomicUsize::new(0),
            settings,
            authorization,
        })
    }

    /// Probes every upstream now and then every `probe_interval`, until the gateway
    /// is dropped. Routing learns the upstreams' stores from these probes.
    pub fn spawn_probes(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let upstream: Weak<Self> = Arc::downgrade(self);
        let every = self.settings.probe_interval;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(upstream) = upstream.upgrade() else { return };
                upstream.probe_all().await;
            }
        })
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

    fn rerank_client(&self, channel: Channel) -> RerankServiceClient<Channel> {
        RerankServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes)
            .max_encoding_message_size(self.settings.max_message_bytes)
    }

    fn search_client(&self, channel: Channel) -> SearchServiceClient<Channel> {
        SearchServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes)
            .max_encoding_message_size(self.settings.max_message_bytes)
    }

    fn collection_client(&self, channel: Channel) -> CollectionServiceClient<Channel> {
        CollectionServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes)
            .max_encoding_message_size(self.settings.max_message_bytes)
    }

    fn views(&self) -> Vec<MemberView> {
        let now = Instant::now();
        self.members.iter().map(|member| member.view(now)).collect()
    }

    fn addresses(&self) -> Vec<String> {
        self.members.iter().map(|member| member.address.clone()).collect()
    }

    /// Embed and rerank calls: a rotation over every upstream, healthy ones first.
    fn round_robin(&self) -> Vec<usize> {
        let count = self.members.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed) % count;
        let views = self.views();
        preferred_first(&views, (0..count).map(|i| (first + i) % count))
    }

    /// Info: the configured order, healthy ones first.
    fn primary_first(&self) -> Vec<usize> {
        preferred_first(&self.views(), 0..self.members.len())
    }

    /// Ingest, search, jobs and statistics: see [`stateful_order`].
    fn stateful(&self) -> Vec<usize> {
        stateful_order(&self.views(), self.next_stateful.fetch_add(1, Ordering::Relaxed))
    }

    /// The answer of member `index` with the index it came from: the server's
    /// `x-embedwire-index` metadata, else what its Info said.
    fn served<T>(&self, index: usize, response: tonic::Response<T>) -> Served<T> {
        let member = &self.members[index];
        let origin = Origin::from_metadata(response.metadata(), member.store().index_id, &member.address);
        Served { value: response.into_inner(), origin }
    }

    /// Runs `call` on the members in `order` until one answers or fails in a way that
    /// another member would not fix; returns which member answered.
    async fn call<T, F, Fut>(&self, order: Vec<usize>, retry: Retry, call: F) -> Result<(usize, T), Status>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut last_error = Status::unavailable("no upstream configured");
        // What an upstream that answered said: the cause a caller can act on, which a
        // later upstream's connection failure must not hide.
        let mut answered_error: Option<Status> = None;
        for index in order {
            let member = &self.members[index];
            match call(member.channel.clone()).await {
                Ok(value) => {
                    member.mark_up();
                    return Ok((index, value));
                }
                // The server answered, but its store (or model) could not serve this
                // call: it is up, so it stays in the rotation, and the call goes to
                // the next one, which may reach another store node. Even an ingest:
                // an answered error acknowledged nothing (documents are stored by
                // id, so a job record it left half-written duplicates no document).
                Err(status) if status.code() == Code::Unavailable && transport::answered_unavailable(&status) => {
                    tracing::debug!(upstream = %member.address, error = %status.message(), "upstream answered unavailable");
                    answered_error.get_or_insert(status);
                }
                Err(status) if is_unreachable(&status) => {
                    tracing::warn!(upstream = %member.address, error = %status.message(), "upstream unreachable");
                    member.mark_down(self.settings.cool_down);
                    let sent = !is_connect_failure(&status);
                    last_error = Status::unavailable(format!("upstream {}: {}", member.address, status.message()));
                    if sent && retry == Retry::OnlyIfNotSent {
                        return Err(answered_error.unwrap_or(last_error));
                    }
                }
                Err(status) => return Err(status),
            }
        }
        Err(answered_error.unwrap_or(last_error))
    }

    /// Health, Info and index statistics of member `index`, recorded in its [`Seen`].
    /// Err says why it is not serving.
    async fn probe(&self, index: usize) -> Result<(), String> {
        let member = &self.members[index];
        let limit = self.settings.connect_timeout;
        let mut health = HealthClient::new(member.channel.clone());
        let check = health.check(self.request(HealthCheckRequest { service: String::new() }));
        let serving = match tokio::time::timeout(limit, check).await {
            Ok(Ok(response)) => response.get_ref().status(),
            Ok(Err(status)) => {
                if is_unreachable(&status) {
                    member.mark_down(self.settings.cool_down);
                }
                member.seen().serving = Some(false);
                return Err(format!("{}: {}", member.address, status.message()));
            }
            // A slow answer under load is not a reason to move stateful calls to
            // another index; only failed calls and refusals are.
            Err(_) => return Err(format!("{}: no answer", member.address)),
        };
        if serving != ServingStatus::Serving {
            member.seen().serving = Some(false);
            return Err(format!("{}: {serving:?}", member.address));
        }
        member.mark_up();
        let mut embed = self.embed_client(member.channel.clone());
        let mut search = self.search_client(member.channel.clone());
        let (info, stats) = tokio::join!(
            tokio::time::timeout(limit, embed.info(self.request(InfoRequest {}))),
            tokio::time::timeout(limit, search.get_index_stats(self.request(GetIndexStatsRequest::default()))),
        );
        let settled = {
            let mut seen = member.seen();
            // A slow or failed answer keeps what was known: the server is serving.
            if let Ok(Ok(info)) = info {
                seen.store = info.into_inner().store;
            }
            match stats {
                Ok(Ok(stats)) => {
                    seen.record_stats(stats.get_ref());
                    stats.get_ref().pending_documents == 0
                }
                _ => false,
            }
        };
        if settled {
            self.check_missing(index).await;
        }
        Ok(())
    }

    /// Forgets the recorded missing ids that member `index` now holds. Called only
    /// when it has nothing pending, so a found document is searchable. A failed call
    /// keeps them all: the next probe asks again.
    async fn check_missing(&self, index: usize) {
        let member = &self.members[index];
        let ids: Vec<String> = member.seen().missing.iter().cloned().collect();
        let mut search = self.search_client(member.channel.clone());
        for chunk in ids.chunks(IDS_PER_CHECK) {
            let request = self.request(GetDocumentsRequest { ids: chunk.to_vec(), ..Default::default() });
            let found = match tokio::time::timeout(self.settings.connect_timeout, search.get_documents(request)).await {
                Ok(Ok(response)) => response.into_inner().documents,
                _ => return,
            };
            let mut seen = member.seen();
            for document in found {
                seen.missing.remove(&document.id);
            }
        }
    }

    /// Records that documents `ids`, just ingested into member `writer`'s index, are
    /// missing from the index of every upstream before it in the order that has
    /// another index: those answer again when they come back, without them.
    fn record_missing_elsewhere(&self, writer: usize, ids: &[String]) {
        let written = self.members[writer].store().index_id;
        for member in &self.members[..writer] {
            if member.store().index_id == written {
                continue;
            }
            let mut seen = member.seen();
            let room = MAX_TRACKED_MISSING.saturating_sub(seen.missing.len());
            if ids.len() > room {
                tracing::warn!(
                    upstream = %member.address,
                    untracked = ids.len() - room,
                    "too many documents ingested while this upstream's index did not answer to track by id; \
                     only the document counts show the rest"
                );
            }
            seen.missing.extend(ids.iter().take(room).cloned());
        }
    }

    /// Probes every member at once; the reasons of those not serving.
    async fn probe_all(&self) -> Vec<String> {
        let probes = (0..self.members.len()).map(|index| self.probe(index));
        futures::future::join_all(probes).await.into_iter().filter_map(Result::err).collect()
    }

    /// Each upstream's status, and the degradation, from what the gateway knows now.
    fn status(&self) -> (Vec<UpstreamStatus>, Option<usize>, Option<String>) {
        let views = self.views();
        let order = stateful_order(&views, 0);
        let answering = order.first().copied().filter(|&i| views[i].up);
        let shared = shared_index(&views).map(str::to_string);
        let upstreams = self
            .members
            .iter()
            .zip(&views)
            .enumerate()
            .map(|(i, (member, view))| {
                let store = member.store();
                let seen = member.seen();
                UpstreamStatus {
                    address: member.address.clone(),
                    healthy: view.up,
                    store_kind: store.kind,
                    index_id: store.index_id,
                    shared: store.shared,
                    store_healthy: store.healthy,
                    document_count: seen.document_count(),
                    document_count_exact: seen.count.as_ref().is_some_and(|c| c.exact),
                    document_count_detail: seen.count.as_ref().and_then(|c| c.detail.clone()),
                    pending_documents: seen.pending_documents,
                    missing_documents: (!seen.missing.is_empty()).then_some(seen.missing.len() as u64),
                    answering: match &shared {
                        Some(id) => view.up && view.store_healthy && &view.index_id == id,
                        None => answering == Some(i),
                    },
                }
            })
            .collect();
        let degraded = degradation(&views, &self.addresses(), answering);
        (upstreams, answering, degraded)
    }

    /// Notes that member `index` answered for an index with content.
    fn saw_data(&self, index: usize) {
        self.members[index].seen().held_data = true;
    }
}

/// The upstream could not be reached, or went away mid-call (not an UNAVAILABLE
/// the server answered itself: see [`transport::UNAVAILABLE_CAUSE_METADATA`]). A
/// connection that breaks under a call (the server SIGKILLed) comes back as UNKNOWN
/// "transport error", with the channel's error as its source.
/// Whether a request's collection is the default one (what health and the divergence
/// checks count).
fn is_default_collection(collection: &str) -> bool {
    collection.is_empty() || collection == crate::access::DEFAULT_COLLECTION
}

fn is_unreachable(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => !transport::answered_unavailable(status),
        Code::Unknown => {
            status.message() == "transport error"
                || std::error::Error::source(status).is_some_and(|e| e.is::<tonic::transport::Error>())
        }
        _ => false,
    }
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
        let (_, response) = self
            .call(self.round_robin(), Retry::Idempotent, |channel| {
                let request = self.request(request.clone());
                let mut client = self.embed_client(channel);
                async move { client.embed(request).await }
            })
            .await?;
        Ok(response)
    }

    async fn rerank(&self, request: RerankRequest) -> Result<tonic::Response<RerankResponse>, Status> {
        let (_, response) = self
            .call(self.round_robin(), Retry::Idempotent, |channel| {
                let request = self.request(request.clone());
                let mut client = self.rerank_client(channel);
                async move { client.rerank(request).await }
            })
            .await?;
        Ok(response)
    }

    async fn info(&self) -> Result<InfoResponse, Status> {
        let (_, response) = self
            .call(self.primary_first(), Retry::Idempotent, |channel| {
                let request = self.request(InfoRequest {});
                let mut client = self.embed_client(channel);
                async move { client.info(request).await }
            })
            .await?;
        Ok(response.into_inner())
    }

    async fn ingest(&self, request: IngestRequest) -> Result<Served<IngestResponse>, Status> {
        // Where documents went is tracked for the default collection, the one health
        // reports on.
        let has_documents = !request.documents.is_empty() && is_default_collection(&request.collection);
        let (index, response) = self
            .call(self.stateful(), Retry::OnlyIfNotSent, |channel| {
                let request = self.request(request.clone());
                let mut client = self.search_client(channel);
                async move { client.ingest(request).await }
            })
            .await?;
        if has_documents {
            self.saw_data(index);
            self.record_missing_elsewhere(index, &response.get_ref().document_ids);
        }
        Ok(self.served(index, response))
    }

    async fn get_job(&self, collection: String, job_id: String) -> Result<Served<GetJobResponse>, Status> {
        let mut not_found = None;
        for index in self.stateful() {
            let found = self
                .call(vec![index], Retry::Idempotent, |channel| {
                    let request =
                        self.request(GetJobRequest { job_id: job_id.clone(), collection: collection.clone() });
                    let mut client = self.search_client(channel);
                    async move { client.get_job(request).await }
                })
                .await;
            match found {
                Ok((index, response)) => return Ok(self.served(index, response)),
                Err(status) if status.code() == Code::NotFound => not_found = Some(status),
                Err(status) if status.code() == Code::Unavailable => not_found = not_found.or(Some(status)),
                Err(status) => return Err(status),
            }
        }
        Err(not_found.unwrap_or_else(|| Status::not_found(format!("job_id: no job {job_id:?}"))))
    }

    async fn search(&self, request: SearchRequest) -> Result<Served<SearchResponse>, Status> {
        let (index, response) = self
            .call(self.stateful(), Retry::Idempotent, |channel| {
                let request = self.request(request.clone());
                let mut client = self.search_client(channel);
                async move { client.search(request).await }
            })
            .await?;
        let found = response.get_ref().results.iter().any(|result| !result.hits.is_empty());
        if found && is_default_collection(&request.collection) {
            self.saw_data(index);
        }
        Ok(self.served(index, response))
    }

    async fn get_documents(&self, request: GetDocumentsRequest) -> Result<Served<GetDocumentsResponse>, Status> {
        let (index, response) = self
            .call(self.stateful(), Retry::Idempotent, |channel| {
                let request = self.request(request.clone());
                let mut client = self.search_client(channel);
                async move { client.get_documents(request).await }
            })
            .await?;
        Ok(self.served(index, response))
    }

    async fn index_stats(&self, collection: String) -> Result<Served<GetIndexStatsResponse>, Status> {
        let default = is_default_collection(&collection);
        let (index, response) = self
            .call(self.stateful(), Retry::Idempotent, |channel| {
                let request = self.request(GetIndexStatsRequest { collection: collection.clone() });
                let mut client = self.search_client(channel);
                async move { client.get_index_stats(request).await }
            })
            .await?;
        if default {
            self.members[index].seen().record_stats(response.get_ref());
        }
        Ok(self.served(index, response))
    }

    /// Where ingests go, once: a retry after the request was sent could find the
    /// collection created and answer ALREADY_EXISTS for the caller's own creation.
    async fn create_collection(
        &self,
        request: CreateCollectionRequest,
    ) -> Result<Served<CreateCollectionResponse>, Status> {
        let (index, response) = self
            .call(self.stateful(), Retry::OnlyIfNotSent, |channel| {
                let request = self.request(request.clone());
                let mut client = self.collection_client(channel);
                async move { client.create_collection(request).await }
            })
            .await?;
        Ok(self.served(index, response))
    }

    async fn list_collections(&self) -> Result<Served<ListCollectionsResponse>, Status> {
        let (index, response) = self
            .call(self.stateful(), Retry::Idempotent, |channel| {
                let request = self.request(ListCollectionsRequest {});
                let mut client = self.collection_client(channel);
                async move { client.list_collections(request).await }
            })
            .await?;
        Ok(self.served(index, response))
    }

    async fn delete_collection(&self, name: String) -> Result<Served<DeleteCollectionResponse>, Status> {
        let (index, response) = self
            .call(self.stateful(), Retry::OnlyIfNotSent, |channel| {
                let request = self.request(DeleteCollectionRequest { name: name.clone() });
                let mut client = self.collection_client(channel);
                async move { client.delete_collection(request).await }
            })
            .await?;
        Ok(self.served(index, response))
    }

    /// Probes every upstream. Ready when at least one reports SERVING; degraded when
    /// an index that held documents is unreachable through every upstream, or the
    /// store is unhealthy on every upstream.
    async fn health(&self) -> HealthReport {
        let problems = self.probe_all().await;
        let ready = problems.len() < self.members.len();
        let (upstreams, answering, degraded) = self.status();
        let source = &self.members[answering.unwrap_or(0)];
        let views = self.views();
        HealthReport {
            readiness: Readiness { ready, detail: problems.join("; ") },
            document_count: vouched_count(&views, answering, Instant::now()),
            store: source.store(),
            upstreams: Some(upstreams),
            degraded,
            store_nodes_missing: store_nodes_missing(&views, &self.addresses()),
        }
    }

    fn metrics_text(&self) -> String {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct UpstreamLabel {
            upstream: String,
        }
        let now = Instant::now();
        let up = Family::<UpstreamLabel, Gauge>::default();
        for member in &self.members {
            up.get_or_create(&UpstreamLabel { upstream: member.address.clone() }).set(i64::from(!member.is_down(now)));
        }
        let documents = Family::<UpstreamLabel, Gauge>::default();
        let missing = Family::<UpstreamLabel, Gauge>::default();
        for member in &self.members {
            let label = UpstreamLabel { upstream: member.address.clone() };
            let seen = member.seen();
            // Only a count its server vouched for as exact: no stale gauge.
            if let Some(ProbedCount { documents: Some(count), exact: true, .. }) = &seen.count {
                documents.get_or_create(&label).set(i64::try_from(*count).unwrap_or(i64::MAX));
            }
            missing.get_or_create(&label).set(seen.missing.len() as i64);
        }
        let (_, answering, reason) = self.status();
        let degraded = Gauge::<i64>::default();
        degraded.set(i64::from(reason.is_some()));
        let divergent = Gauge::<i64>::default();
        divergent.set(i64::from(!divergence(&self.views(), &self.addresses(), answering).is_empty()));
        let mut registry = Registry::default();
        registry.register("embedwire_gateway_upstream_up", "Whether the gateway currently routes to this upstream", up);
        registry.register(
            "embedwire_gateway_index_degraded",
            "Whether an index that held documents is unreachable (see /healthz)",
            degraded,
        );
        registry.register(
            "embedwire_gateway_upstream_documents",
            "Documents in each upstream's index at the last probe (absent while its count is not exact)",
            documents,
        );
        registry.register(
            "embedwire_gateway_upstream_missing_documents",
            "Documents ingested into another index while this upstream's did not answer, not found in it since",
            missing,
        );
        registry.register(
            "embedwire_gateway_index_divergent",
            "Whether the answering index lacks documents another upstream's index holds (see /healthz)",
            divergent,
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode_registry(&mut text, &registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded(index_id: &str, up: bool, held_data: bool) -> MemberView {
        let documents = Some(u64::from(held_data));
        MemberView {
            up,
            index_id: index_id.into(),
            shared: false,
            store_healthy: true,
            held_data,
            documents,
            missing: 0,
            count: None,
            missing_nodes: Vec::new(),
        }
    }

    fn shared(index_id: &str, up: bool, store_healthy: bool) -> MemberView {
        MemberView {
            up,
            index_id: index_id.into(),
            shared: true,
            store_healthy,
            held_data: true,
            documents: Some(1),
            missing: 0,
            count: None,
            missing_nodes: Vec::new(),
        }
    }

    /// An embedded index that is up, with `documents` settled and `missing` recorded.
    fn counted(index_id: &str, documents: Option<u64>, missing: usize) -> MemberView {
        let held_data = documents.unwrap_or(0) > 0;
        MemberView {
            up: true,
            index_id: index_id.into(),
            shared: false,
            store_healthy: true,
            held_data,
            documents,
            missing,
            count: None,
            missing_nodes: Vec::new(),
        }
    }

    fn addresses(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("http://s{i}")).collect()
    }

    #[test]
    fn per_server_indexes_go_to_the_first_healthy_upstream() {
        let views = [embedded("a", true, true), embedded("b", true, false), embedded("c", true, false)];
        for turn in 0..5 {
            assert_eq!(stateful_order(&views, turn), [0, 1, 2], "no rotation without a shared index");
        }
        let first_down = [embedded("a", false, true), embedded("b", true, false), embedded("c", true, false)];
        assert_eq!(stateful_order(&first_down, 7), [1, 2, 0], "failover in the configured order");
        assert_eq!(shared_index(&views), None);
    }

    #[test]
    fn a_shared_index_is_balanced_over_the_healthy_upstreams() {
        let views = [shared("w", true, true), shared("w", true, true), shared("w", true, true)];
        assert_eq!(shared_index(&views), Some("w"));
        let firsts: Vec<usize> = (0..6).map(|turn| stateful_order(&views, turn)[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2]);
        assert_eq!(stateful_order(&views, 1), [1, 2, 0], "the others follow for retries");

        // A down upstream is skipped by the rotation and tried last.
        let one_down = [shared("w", true, true), shared("w", false, true), shared("w", true, true)];
        assert_eq!(shared_index(&one_down), Some("w"), "only healthy upstreams need to agree");
        assert_eq!(stateful_order(&one_down, 1), [2, 0, 1]);
        assert_eq!(stateful_order(&one_down, 2), [2, 0, 1]);
        assert_eq!(stateful_order(&one_down, 3), [0, 2, 1]);
    }

    #[test]
    fn balancing_needs_every_healthy_upstream_to_share_one_index() {
        let mixed = [shared("w", true, true), embedded("e", true, false)];
        assert_eq!(shared_index(&mixed), None);
        assert_eq!(stateful_order(&mixed, 1), [0, 1]);
        let two_collections = [shared("w1", true, true), shared("w2", true, true)];
        assert_eq!(shared_index(&two_collections), None);
        assert_eq!(stateful_order(&two_collections, 1), [0, 1]);
        let none_up = [shared("w", false, true), shared("w", false, true)];
        assert_eq!(shared_index(&none_up), None);
        assert_eq!(stateful_order(&none_up, 1), [0, 1], "nothing up: still tried, in order");
    }

    #[test]
    fn an_unhealthy_store_comes_last() {
        let views = [shared("w", true, false), shared("w", true, true)];
        assert_eq!(stateful_order(&views, 0), [1, 0]);
        assert_eq!(stateful_order(&views, 1), [1, 0]);
    }

    #[test]
    fn losing_the_index_that_held_documents_is_degraded() {
        let addresses = addresses(2);
        let healthy = [embedded("a", true, true), embedded("b", true, false)];
        assert_eq!(degradation(&healthy, &addresses, Some(0)), None);
        let lost = [embedded("a", false, true), embedded("b", true, false)];
        assert_eq!(
            degradation(&lost, &addresses, Some(1)).as_deref(),
            Some("index a at http://s0 unreachable; answering from index b")
        );
        let empty_lost = [embedded("a", false, false), embedded("b", true, true)];
        assert_eq!(degradation(&empty_lost, &addresses, Some(1)), None, "an index without documents loses nothing");
        let all_lost = [embedded("a", false, true), embedded("b", false, false)];
        assert_eq!(
            degradation(&all_lost, &addresses, None).as_deref(),
            Some("index a at http://s0 unreachable; no upstream answers")
        );
    }

    #[test]
    fn a_shared_index_survives_one_server() {
        let addresses = addresses(2);
        let one_down = [shared("w", false, true), shared("w", true, true)];
        assert_eq!(degradation(&one_down, &addresses, Some(1)), None);
        let store_down = [shared("w", true, false), shared("w", true, false)];
        assert_eq!(
            degradation(&store_down, &addresses, Some(0)).as_deref(),
            Some("store of index w unhealthy on every upstream; answering from index w")
        );
        let one_store_down = [shared("w", true, false), shared("w", true, true)];
        assert_eq!(degradation(&one_store_down, &addresses, Some(1)), None);
    }

    #[test]
    fn after_failback_the_answering_index_lacking_recorded_documents_is_degraded() {
        let addresses = addresses(2);
        // 200 documents before the failover, 3 ingested into b meanwhile: the counts
        // alone could not tell (200 > 3), the record does.
        let failback = [counted("a", Some(200), 3), counted("b", Some(3), 0)];
        assert_eq!(
            degradation(&failback, &addresses, Some(0)).as_deref(),
            Some(
                "index a at http://s0 lacks 3 documents ingested into another index while it did not answer; \
                 document counts: http://s0 200, http://s1 3; answering from index a"
            )
        );
        // Re-ingested into a: the record is empty, a holds more; b's stale copy is no
        // loss while a answers (losing a is reported as unreachable).
        let healed = [counted("a", Some(203), 0), counted("b", Some(3), 0)];
        assert_eq!(degradation(&healed, &addresses, Some(0)), None);
        assert!(divergence(&healed, &addresses, Some(0)).is_empty());
    }

    #[test]
    fn another_index_holding_more_documents_is_degraded_without_a_record() {
        let addresses = addresses(2);
        // E.g. a gateway restarted after the failback, or a server back with an empty disk.
        let behind = [counted("a", Some(20), 0), counted("b", Some(25), 0)];
        assert_eq!(
            degradation(&behind, &addresses, Some(0)).as_deref(),
            Some(
                "index b at http://s1 holds more documents (25) than index a (20); \
                 document counts: http://s0 20, http://s1 25; answering from index a"
            )
        );
        let down = [counted("a", Some(20), 0), MemberView { up: false, ..counted("b", Some(25), 0) }];
        assert!(divergence(&down, &addresses, Some(0)).is_empty(), "an unreachable index is not compared");
        assert_eq!(
            degradation(&down, &addresses, Some(0)).as_deref(),
            Some("index b at http://s1 unreachable; answering from index a"),
            "(it is lost instead)"
        );
        let unknown = [counted("a", None, 0), counted("b", Some(25), 0)];
        assert_eq!(degradation(&unknown, &addresses, Some(0)), None, "no settled count yet: nothing to compare");
    }

    #[test]
    fn empty_fresh_and_shared_indexes_are_never_divergent() {
        let addresses = addresses(3);
        let fresh = [counted("a", Some(0), 0), counted("b", Some(0), 0), counted("c", Some(0), 0)];
        assert_eq!(degradation(&fresh, &addresses, Some(0)), None, "fresh, empty servers");
        let standby_never_written = [counted("a", Some(50), 0), counted("b", Some(0), 0), counted("c", None, 0)];
        assert_eq!(degradation(&standby_never_written, &addresses, Some(0)), None);
        let one_store = [
            MemberView { documents: Some(10), ..shared("w", true, true) },
            MemberView { documents: Some(12), ..shared("w", true, true) },
            MemberView { documents: Some(11), ..shared("w", true, true) },
        ];
        assert_eq!(degradation(&one_store, &addresses, Some(1)), None, "one shared index, read at different moments");
        assert!(divergence(&one_store, &addresses, Some(0)).is_empty());
    }

    /// A probed count: exact, or last exact `age` before `now`, or unknown.
    fn probed(documents: Option<u64>, exact: bool, exact_at: Option<Instant>) -> Option<ProbedCount> {
        let detail = (!exact).then(|| "store node weaviate-2 missing".to_string());
        Some(ProbedCount { documents, exact, exact_at, detail })
    }

    fn shared_counting(count: Option<ProbedCount>) -> MemberView {
        MemberView { count, ..shared("w", true, true) }
    }

    #[test]
    fn servers_sharing_an_index_are_not_summed() {
        let now = Instant::now();
        let earlier = now - Duration::from_secs(3);
        let views = [
            shared_counting(probed(Some(300), true, Some(earlier))),
            shared_counting(probed(Some(301), true, Some(now))),
        ];
        let count = vouched_count(&views, Some(0), now);
        assert_eq!(
            count,
            DocumentCount { value: Some(301), exact: true, age: None, detail: None },
            "the freshest, not 601"
        );
    }

    #[test]
    fn an_inexact_count_is_never_reported_as_exact() {
        let now = Instant::now();
        let before_the_loss = now - Duration::from_secs(7);
        // A: the last exact count of its server (a node missing); B: unknown (it started
        // while the node was missing and never counted exactly).
        let views = [
            shared_counting(probed(Some(300), false, Some(before_the_loss))),
            shared_counting(probed(None, false, None)),
        ];
        let count = vouched_count(&views, Some(1), now);
        assert_eq!(count.value, Some(300));
        assert!(!count.exact, "{count:?}");
        assert_eq!(count.age, Some(Duration::from_secs(7)));
        assert_eq!(count.detail.as_deref(), Some("store node weaviate-2 missing"));

        // An exact count of one server wins over another's stale one.
        let views = [
            shared_counting(probed(Some(250), false, Some(before_the_loss))),
            shared_counting(probed(Some(300), true, Some(now))),
        ];
        assert_eq!(vouched_count(&views, Some(0), now).value, Some(300));
        assert!(vouched_count(&views, Some(0), now).exact);

        // Nothing vouched for: unknown with the reason, not 0.
        let views = [shared_counting(probed(None, false, None)), shared_counting(None)];
        let count = vouched_count(&views, Some(0), now);
        assert_eq!((count.value, count.exact), (None, false));
        assert_eq!(count.detail.as_deref(), Some("store node weaviate-2 missing"));
        assert_eq!(vouched_count(&views, None, now).detail.as_deref(), Some("no upstream answers"));
    }

    #[test]
    fn per_server_indexes_report_the_answering_index_only() {
        let now = Instant::now();
        let views = [
            MemberView { count: probed(Some(20), true, Some(now)), ..counted("a", Some(20), 0) },
            MemberView { count: probed(Some(25), true, Some(now)), ..counted("b", Some(25), 0) },
        ];
        assert_eq!(vouched_count(&views, Some(0), now).value, Some(20), "b's documents are another index's");
        let a_down = [MemberView { up: false, ..views[0].clone() }, views[1].clone()];
        assert_eq!(vouched_count(&a_down, Some(1), now).value, Some(25));
    }

    #[test]
    fn a_missing_store_node_is_named_once_per_index() {
        let addresses = addresses(3);
        let missing = |up| MemberView { missing_nodes: vec!["weaviate-2".into()], ..shared("w", up, true) };
        let views = [missing(true), missing(true), missing(false)];
        assert_eq!(
            store_nodes_missing(&views, &addresses).as_deref(),
            Some("store node weaviate-2 of index w missing (reported by http://s0, http://s1)")
        );
        let whole = [shared("w", true, true), shared("w", true, true)];
        assert_eq!(store_nodes_missing(&whole, &addresses), None);
        // Not a reason to stop routing to either server, nor degradation of the data.
        assert_eq!(stateful_order(&views, 1), [1, 0, 2]);
        assert_eq!(degradation(&views, &addresses, Some(0)), None);
    }

    #[test]
    fn an_unavailable_answered_by_a_server_is_not_unreachable() {
        let mut answered = Status::unavailable("weaviate store: write failed");
        transport::set_unavailable_cause(&mut answered, "server");
        assert!(!is_unreachable(&answered));
        assert!(is_unreachable(&Status::unavailable("tcp connect error")));
        assert!(is_unreachable(&Status::unknown("transport error")), "a connection broken under a call");
        assert!(!is_unreachable(&Status::unknown("the model failed")), "an error the server answered");
    }

    #[tokio::test]
    async fn what_a_server_answered_is_reported_over_a_later_servers_connection_failure() {
        let upstream = GrpcUpstream::new(GrpcUpstreamSettings {
            addresses: addresses(2),
            connect_timeout: Duration::from_secs(1),
            cool_down: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            max_message_bytes: 1 << 20,
            api_key: None,
            probe_interval: Duration::from_secs(1),
        })
        .unwrap();
        let calls = AtomicUsize::new(0);
        let result = upstream
            .call(vec![0, 1], Retry::OnlyIfNotSent, |_channel| {
                let call = calls.fetch_add(1, Ordering::Relaxed);
                async move {
                    if call == 0 {
                        let mut answered = Status::unavailable("weaviate store: write_pending: no node answered");
                        transport::set_unavailable_cause(&mut answered, "server");
                        return Err::<(), Status>(answered);
                    }
                    Err(Status::unavailable("tcp connect error"))
                }
            })
            .await;
        assert_eq!(calls.load(Ordering::Relaxed), 2, "the second server is tried");
        let error = result.unwrap_err();
        assert_eq!(error.message(), "weaviate store: write_pending: no node answered");
    }
}
