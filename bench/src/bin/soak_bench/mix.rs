//! The soak's mixed calls: Embed of 1 to 32 corpus paragraphs, Search with one
//! query sentence, and Ingest of a few documents whose ids cycle through a fixed
//! set. Call n's kind and inputs follow from a hash of n, so every run makes the
//! same calls in the same order, with no period a batcher could lock onto.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use embedwire_bench::closed_loop::Caller;
use embedwire_bench::corpus::Paragraph;
use embedwire_bench::open_loop::{Call, Outcome};
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::search_query::Query;
use embedwire_proto::v1::search_service_client::SearchServiceClient;
use embedwire_proto::v1::{Document, EmbedRequest, IngestRequest, SearchQuery, SearchRequest};
use tonic::transport::Channel;

/// A kind of call of the mix; its number is the sample's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Embed = 0,
    Search = 1,
    Ingest = 2,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Embed, Kind::Search, Kind::Ingest];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Embed => "Embed",
            Kind::Search => "Search",
            Kind::Ingest => "Ingest",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The inputs of the mix.
pub struct MixInputs {
    /// Texts Embed calls take slices of.
    pub embed_texts: Arc<[String]>,
    /// Query sentences of Search.
    pub queries: Arc<[String]>,
    /// Documents the soak's ingests send (none in the index beforehand).
    pub ingest_documents: Arc<[Paragraph]>,
}

/// The shape of the mix.
#[derive(Debug, Clone, Copy)]
pub struct MixShape {
    /// Percent (or any weights) of Embed, Search and Ingest calls.
    pub weights: [u32; 3],
    /// Most texts of one Embed call.
    pub embed_max_texts: usize,
    /// Hits asked of each Search.
    pub top_k: u32,
    /// Documents per Ingest call.
    pub ingest_batch: usize,
    /// Ids the ingests cycle through.
    pub ingest_ids: usize,
}

/// Makes the mix's calls over a few shared connections.
pub struct MixedLoad {
    embed: Vec<EmbedServiceClient<Channel>>,
    search: Vec<SearchServiceClient<Channel>>,
    inputs: MixInputs,
    shape: MixShape,
    /// Documents sent by Ingest so far: the next call's ids and texts start here.
    ingested: AtomicU64,
    /// The job of every accepted Ingest, checked when the load is over.
    jobs: Mutex<Vec<String>>,
}

impl MixedLoad {
    pub fn new(channels: &[Channel], inputs: MixInputs, shape: MixShape) -> Self {
        MixedLoad {
            embed: channels.iter().cloned().map(EmbedServiceClient::new).collect(),
            search: channels.iter().cloned().map(SearchServiceClient::new).collect(),
            inputs,
            shape,
            ingested: AtomicU64::new(0),
            jobs: Mutex::new(Vec::new()),
        }
    }

    /// The jobs of the ingests accepted so far.
    pub fn jobs(&self) -> Vec<String> {
        self.jobs.lock().map(|jobs| jobs.clone()).unwrap_or_default()
    }

    /// Documents sent by Ingest so far.
    pub fn ingested_documents(&self) -> u64 {
        self.ingested.load(Ordering::Relaxed)
    }

    /// Call n's kind.
    pub fn kind(&self, n: u64) -> Kind {
        let [embed, search, ingest] = self.shape.weights.map(u64::from);
        let pick = splitmix64(n) % (embed + search + ingest);
        if pick < embed {
            Kind::Embed
        } else if pick < embed + search {
            Kind::Search
        } else {
            Kind::Ingest
        }
    }

    /// Makes call n.
    pub async fn make(&self, n: u64) -> (Kind, Outcome) {
        let kind = self.kind(n);
        // A second hash for the inputs, independent of the kind's.
        let hash = splitmix64(n ^ 0x5bd1_e995_5bd1_e995);
        let connection = n as usize % self.embed.len();
        let outcome = match kind {
            Kind::Embed => self.embed_call(connection, hash).await,
            Kind::Search => self.search_call(connection, n).await,
            Kind::Ingest => self.ingest_call(connection).await,
        };
        (kind, outcome)
    }

    async fn embed_call(&self, connection: usize, hash: u64) -> Outcome {
        let texts = &self.inputs.embed_texts;
        let count = 1 + (hash >> 32) as usize % self.shape.embed_max_texts;
        let first = (hash & 0xffff_ffff) as usize % texts.len();
        let inputs: Vec<String> = (0..count).map(|i| texts[(first + i) % texts.len()].clone()).collect();
        let mut client = self.embed[connection].clone();
        let result = client.embed(EmbedRequest { inputs, ..Default::default() }).await;
        Outcome::of(result, |response| {
            let response = response.into_inner();
            let expected = count * response.dim as usize * 4;
            if response.count as usize == count && response.embeddings.len() == expected {
                Ok(())
            } else {
                Err(format!(
                    "Embed of {count} texts answered {} vectors in {} bytes",
                    response.count,
                    response.embeddings.len()
                ))
            }
        })
    }

    async fn search_call(&self, connection: usize, n: u64) -> Outcome {
        let queries = &self.inputs.queries;
        let query = queries[n as usize % queries.len()].clone();
        let request = SearchRequest {
            queries: vec![SearchQuery { query: Some(Query::Text(query)) }],
            top_k: Some(self.shape.top_k),
            ..Default::default()
        };
        let mut client = self.search[connection].clone();
        Outcome::of(client.search(request).await, |response| {
            let results = response.into_inner().results;
            match results.as_slice() {
                [one] if !one.hits.is_empty() => Ok(()),
                _ => Err(format!("Search of one query answered {} results, or no hits", results.len())),
            }
        })
    }

    async fn ingest_call(&self, connection: usize) -> Outcome {
        let batch = self.shape.ingest_batch;
        let first = self.ingested.fetch_add(batch as u64, Ordering::Relaxed) as usize;
        let pool = &self.inputs.ingest_documents;
        let documents: Vec<Document> = (first..first + batch)
            .map(|k| {
                let paragraph = &pool[k % pool.len()];
                Document {
                    id: format!("soak-live-{:05}", k % self.shape.ingest_ids),
                    text: paragraph.text.clone(),
                    metadata: HashMap::from([("source".to_string(), paragraph.source.clone())]),
                }
            })
            .collect();
        let mut client = self.search[connection].clone();
        Outcome::of(client.ingest(IngestRequest { documents }).await, |response| {
            let response = response.into_inner();
            match response.job {
                Some(job) if response.document_ids.len() == batch => {
                    if let Ok(mut jobs) = self.jobs.lock() {
                        jobs.push(job.job_id);
                    }
                    Ok(())
                }
                _ => {
                    Err(format!("Ingest of {batch} documents answered {} ids, or no job", response.document_ids.len()))
                }
            }
        })
    }
}

impl Call for MixedLoad {
    async fn call(&self, n: u64) -> (usize, Outcome) {
        let (kind, outcome) = self.make(n).await;
        (kind.index(), outcome)
    }
}

/// Longest pause of a closed-loop worker before it retries a refused call.
const MAX_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// One closed-loop worker of the maximum's measurement: worker w of W makes calls
/// w, w + W, w + 2W, ..., so the workers together make the mix's calls in order.
/// A refused call (RESOURCE_EXHAUSTED) is retried after a pause that doubles each
/// time, as the clients do: the maximum is what the server answers to clients
/// that back off, not how fast it refuses clients that do not.
pub struct MixWorker {
    pub load: Arc<MixedLoad>,
    pub worker: usize,
    pub workers: usize,
}

impl Caller for MixWorker {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let call = (self.worker + n * self.workers) as u64;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            match self.load.make(call).await {
                (_, Outcome::Ok) => return Ok(()),
                (_, Outcome::Rejected) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
                (kind, outcome) => anyhow::bail!("{} call {call}: {outcome:?}", kind.name()),
            }
        }
    }
}

/// A fixed bijective mix of the bits of `x` (SplitMix64's finalizer): well spread
/// pseudo-random numbers from a counter, without a random number generator.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_kinds_follow_the_weights() {
        let shape = MixShape { weights: [70, 25, 5], embed_max_texts: 32, top_k: 5, ingest_batch: 4, ingest_ids: 10 };
        let inputs = MixInputs { embed_texts: Arc::from([]), queries: Arc::from([]), ingest_documents: Arc::from([]) };
        let load = MixedLoad::new(&[], inputs, shape);
        let mut counts = [0usize; 3];
        for n in 0..100_000 {
            counts[load.kind(n).index()] += 1;
        }
        // Within 1 point of the weights over 100k calls.
        assert!((69_000..71_000).contains(&counts[0]), "{counts:?}");
        assert!((24_000..26_000).contains(&counts[1]), "{counts:?}");
        assert!((4_000..6_000).contains(&counts[2]), "{counts:?}");
    }
}
