//! The split deployment's front: forwards embedding work to upstream embedwire
//! servers over gRPC, round robin, moving on to the next upstream when one is
//! unreachable. Vectors come back unnormalized so that the front applies the
//! request's options with the same code as every other backend.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype, InfoRequest, TokenizeRequest};
use tonic::transport::{Channel, Endpoint};

use super::RawEmbeddings;
use crate::error::{Error, Result};
use crate::model::{ModelInfo, TokenizedText};
use crate::wire;

/// One upstream server.
#[derive(Clone)]
struct Upstream {
    address: String,
    client: EmbedServiceClient<Channel>,
}

/// Upstream servers serving the same model.
pub struct RemoteBackend {
    upstreams: Vec<Upstream>,
    /// Round-robin cursor.
    next: AtomicUsize,
    info: ModelInfo,
}

/// Pause between attempts to reach an upstream that is not up yet.
const READY_POLL_INTERVAL: Duration = Duration::from_millis(200);

impl RemoteBackend {
    /// Waits until an upstream answers Info, then returns a backend serving its model.
    /// Until then the server reports NOT_SERVING; this waits as long as it takes.
    pub async fn connect(addresses: &[String], max_message_bytes: usize) -> Result<Self> {
        let upstreams = addresses
            .iter()
            .map(|address| {
                let endpoint = Endpoint::from_shared(address.clone())
                    .map_err(|e| Error::Config(format!("--upstream {address}: {e}")))?
                    .connect_timeout(Duration::from_secs(2))
                    .tcp_nodelay(true)
                    // Large answers in few frames: each frame is a write on the sender.
                    .max_frame_size(embedwire_proto::transport::MAX_FRAME_SIZE);
                let client = EmbedServiceClient::new(endpoint.connect_lazy())
                    .max_decoding_message_size(max_message_bytes)
                    .max_encoding_message_size(max_message_bytes);
                Ok(Upstream { address: address.clone(), client })
            })
            .collect::<Result<Vec<_>>>()?;
        loop {
            for upstream in &upstreams {
                match upstream.client.clone().info(InfoRequest {}).await {
                    Ok(response) => {
                        let info = wire::model_info_from_wire(response.into_inner())?;
                        tracing::info!(upstream = %upstream.address, model = %info.model_id, "upstream ready");
                        return Ok(RemoteBackend { upstreams, next: AtomicUsize::new(0), info });
                    }
                    Err(status) => tracing::debug!(upstream = %upstream.address, %status, "upstream not ready"),
                }
            }
            tokio::time::sleep(READY_POLL_INTERVAL).await;
        }
    }

    /// The upstreams' model.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Embeds on an upstream, unnormalized float32.
    pub async fn embed(&self, texts: Vec<String>, truncate: bool) -> Result<RawEmbeddings> {
        let count = texts.len();
        let request = EmbedRequest {
            inputs: texts,
            normalize: Some(false),
            truncate: Some(truncate),
            dtype: EmbeddingDtype::Float32 as i32,
            dimensions: None,
        };
        let response = self
            .call(|mut client| {
                let request = request.clone();
                async move { client.embed(request).await }
            })
            .await?;
        wire::raw_embeddings_from_wire(response, count, self.info.dim)
    }

    /// Tokenizes on an upstream.
    pub async fn tokenize(&self, texts: Vec<String>, truncate: bool) -> Result<Vec<TokenizedText>> {
        let request = TokenizeRequest { inputs: texts, truncate: Some(truncate) };
        let response = self
            .call(|mut client| {
                let request = request.clone();
                async move { client.tokenize(request).await }
            })
            .await?;
        Ok(response.tokenized.into_iter().map(wire::tokenized_from_wire).collect())
    }

    /// Runs `rpc` on the next upstream, moving on to the others while they answer
    /// UNAVAILABLE (down or unreachable); any other answer is final.
    async fn call<T, F, Fut>(&self, rpc: F) -> Result<T>
    where
        F: Fn(EmbedServiceClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last_error = None;
        for offset in 0..self.upstreams.len() {
            let upstream = &self.upstreams[(first + offset) % self.upstreams.len()];
            match rpc(upstream.client.clone()).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == tonic::Code::Unavailable => {
                    tracing::warn!(upstream = %upstream.address, %status, "upstream unavailable, trying the next");
                    last_error = Some(status);
                }
                Err(status) => return Err(wire::error_from_upstream(status)),
            }
        }
        Err(Error::Unavailable(format!(
            "no upstream reachable: {}",
            last_error.map(|s| s.message().to_string()).unwrap_or_default()
        )))
    }
}
