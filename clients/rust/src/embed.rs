//! Embed calls: one request ([`Client::embed`]) and bulk ([`Client::embed_many`]),
//! which splits the inputs into batches, keeps a bounded number of them in flight
//! (over every server of the client), and writes each answer into its place in one
//! contiguous output, so the result is in input order whatever order the batches
//! finish in.

use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype};
use futures::StreamExt;

use crate::Client;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::policy::Hedge;
use crate::pool::Route;

/// How the values travel. All are returned as f32; the compact ones are decoded
/// (approximately, for FLOAT16 and INT8) on arrival.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WireDtype {
    /// 4 bytes per value, read in place (the default).
    #[default]
    Float32,
    /// 2 bytes per value.
    Float16,
    /// 1 byte per value plus a scale per row.
    Int8,
    /// A protobuf `repeated float`, for comparing encodings.
    Float32List,
}

impl WireDtype {
    fn to_proto(self) -> EmbeddingDtype {
        match self {
            WireDtype::Float32 => EmbeddingDtype::Float32,
            WireDtype::Float16 => EmbeddingDtype::Float16,
            WireDtype::Int8 => EmbeddingDtype::Int8,
            WireDtype::Float32List => EmbeddingDtype::Float32List,
        }
    }
}

/// Options of an Embed call; the default is the server's default (normalized, all
/// dimensions, FLOAT32, long inputs truncated).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbedOptions {
    /// Scale vectors to unit length (server default: true).
    pub normalize: Option<bool>,
    /// Keep only the first n dimensions (Matryoshka); None keeps all.
    pub dimensions: Option<u32>,
    /// Cut inputs over the model's token limit instead of failing (server default: true).
    pub truncate: Option<bool>,
    /// Encoding on the wire.
    pub dtype: WireDtype,
}

/// How [`Client::embed_many`] splits and paces its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkOptions {
    /// Inputs per Embed call (at most the server's max_inputs_per_request).
    pub batch_size: usize,
    /// Embed calls in flight at once, over all servers.
    pub max_concurrent_requests: usize,
}

impl Default for BulkOptions {
    /// 64 inputs per call, matching the server's default model batch, and 8 calls
    /// in flight, enough to keep a server's batcher full across round trips.
    fn default() -> Self {
        BulkOptions { batch_size: 64, max_concurrent_requests: 8 }
    }
}

impl Client {
    /// Embeds `texts` in one call with the server's default options.
    pub async fn embed<I, S>(&self, texts: I) -> Result<Embeddings>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.embed_with(texts, &EmbedOptions::default()).await
    }

    /// Embeds `texts` in one call.
    pub async fn embed_with<I, S>(&self, texts: I, options: &EmbedOptions) -> Result<Embeddings>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let inputs: Vec<String> = texts.into_iter().map(Into::into).collect();
        self.embed_inputs(inputs, options).await
    }

    /// Embeds any number of `texts` in batches of `batch_size`, with at most
    /// `max_concurrent_requests` calls in flight, each retried and hedged by the
    /// client's policy. Returns every vector in input order, in one allocation.
    pub async fn embed_many<S>(&self, texts: &[S], bulk: BulkOptions, options: &EmbedOptions) -> Result<Embeddings>
    where
        S: AsRef<str>,
    {
        if bulk.batch_size == 0 || bulk.max_concurrent_requests == 0 {
            return Err(Error::InvalidRequest("batch_size and max_concurrent_requests must be at least 1".into()));
        }
        let batches = texts.chunks(bulk.batch_size).enumerate().map(|(index, batch)| {
            let inputs: Vec<String> = batch.iter().map(|text| text.as_ref().to_string()).collect();
            async move { (index, self.embed_inputs(inputs, options).await) }
        });
        let mut done = futures::stream::iter(batches).buffer_unordered(bulk.max_concurrent_requests);

        let mut assembled: Option<Assembly> = None;
        while let Some((index, result)) = done.next().await {
            let start = index * bulk.batch_size;
            let embeddings = result.map_err(|error| renumber_inputs(error, start))?;
            let assembly = assembled.get_or_insert_with(|| Assembly::new(texts.len(), &embeddings));
            let expected = bulk.batch_size.min(texts.len() - start);
            assembly.place(start, expected, &embeddings)?;
        }
        Ok(match assembled {
            Some(assembly) => assembly.finish(),
            None => Embeddings::from_vec(Vec::new(), 0, 0, String::new(), Vec::new()),
        })
    }

    async fn embed_inputs(&self, inputs: Vec<String>, options: &EmbedOptions) -> Result<Embeddings> {
        let request = EmbedRequest {
            inputs,
            normalize: options.normalize,
            truncate: options.truncate,
            dtype: options.dtype.to_proto() as i32,
            dimensions: options.dimensions,
        };
        let caller = &self.inner.caller;
        let (address, response) = caller
            .unary(Route::Balanced, Hedge::Allowed, |backend| {
                let request = caller.request(request.clone());
                async move {
                    let response = backend.embed().embed(request).await?;
                    Ok((backend.address.clone(), response.into_inner()))
                }
            })
            .await?;
        Embeddings::from_response(response, &address)
    }
}

/// The output of `embed_many` while batches arrive.
struct Assembly {
    values: Vec<f32>,
    token_counts: Vec<u32>,
    count: usize,
    dim: usize,
    model: String,
}

impl Assembly {
    /// Sized from the first answer (the dimension is known only then).
    fn new(count: usize, first: &Embeddings) -> Self {
        Assembly {
            values: vec![0.0; count * first.dim()],
            token_counts: vec![0; count],
            count,
            dim: first.dim(),
            model: first.model().to_string(),
        }
    }

    /// Copies a batch's rows to their place, starting at input `start`.
    fn place(&mut self, start: usize, expected: usize, batch: &Embeddings) -> Result<()> {
        let mismatch = if batch.dim() != self.dim {
            Some(format!("one batch has {} dimensions, another {}", batch.dim(), self.dim))
        } else if batch.len() != expected {
            Some(format!("{} vectors for a batch of {expected} inputs", batch.len()))
        } else {
            None
        };
        if let Some(reason) = mismatch {
            return Err(Error::Protocol { address: "the servers".to_string(), reason });
        }
        self.values[start * self.dim..(start + batch.len()) * self.dim].copy_from_slice(batch.as_slice());
        if batch.token_counts().len() == batch.len() {
            self.token_counts[start..start + batch.len()].copy_from_slice(batch.token_counts());
        }
        if batch.model() != self.model {
            self.model.clear();
        }
        Ok(())
    }

    fn finish(self) -> Embeddings {
        Embeddings::from_vec(self.values, self.count, self.dim, self.model, self.token_counts)
    }
}

/// The server names a bad input by its index in the request (`inputs[3]: ...`);
/// in a batch of `embed_many` that index is shifted by the batch's start, so it is
/// renumbered to name the caller's input. Other messages are left as they are.
fn renumber_inputs(error: Error, start: usize) -> Error {
    let Error::Status { code, message, address, retry_after } = error else { return error };
    let renumbered = message
        .strip_prefix("inputs[")
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(index, rest)| Some(format!("inputs[{}]{rest}", index.parse::<usize>().ok()? + start)));
    Error::Status { code, message: renumbered.unwrap_or(message), address, retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_input_is_named_by_its_index_in_the_whole_input() {
        let error = Error::Status {
            code: tonic::Code::InvalidArgument,
            message: "inputs[3]: is empty".to_string(),
            address: "h".to_string(),
            retry_after: None,
        };
        assert_eq!(renumber_inputs(error, 64).to_string(), "INVALID_ARGUMENT: inputs[67]: is empty");
        let other = Error::Status {
            code: tonic::Code::Internal,
            message: "boom".to_string(),
            address: "h".to_string(),
            retry_after: None,
        };
        assert_eq!(renumber_inputs(other, 64).to_string(), "INTERNAL: boom");
    }
}
