//! The request pipeline every front end shares (gRPC now, HTTP through the same
//! calls): validate, admit, embed on the backend, then apply the request's options.
//! It owns the backend once loaded; before that every call is UNAVAILABLE.

use std::sync::{Arc, OnceLock};

use crate::admission::InFlightLimiter;
use crate::backend::Backend;
use crate::batcher::Priority;
use crate::error::{Error, Result};
use crate::model::pooling::l2_normalize_rows;
use crate::model::{ModelInfo, TokenizedText};
use crate::stats::Stats;

/// Bounds on a single request.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// Most inputs in one call.
    pub max_inputs_per_request: usize,
    /// Longest input in characters.
    pub max_input_chars: usize,
    /// Inputs queued or running at once.
    pub max_in_flight_inputs: usize,
}

/// Per-request options of an embedding call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedOptions {
    /// Scale each vector to unit length.
    pub normalize: bool,
    /// Cut over-long inputs instead of failing.
    pub truncate: bool,
    /// Keep only the first n dimensions.
    pub dimensions: Option<usize>,
    /// Background work yields to requests someone waits for.
    pub priority: Priority,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { normalize: true, truncate: true, dimensions: None, priority: Priority::Interactive }
    }
}

/// Finished vectors for a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Dimensions of each vector.
    pub dim: usize,
    /// `token_counts.len() * dim` values, row-major.
    pub values: Vec<f32>,
    /// Tokens of each input.
    pub token_counts: Vec<u32>,
    /// The model that made them.
    pub model_id: String,
    /// Queue and model time, for the response's timing metadata.
    pub timing: crate::batcher::BatchTiming,
}

/// Validation, admission and post-processing around the backend.
pub struct EmbeddingEngine {
    backend: OnceLock<Backend>,
    admission: InFlightLimiter,
    limits: RequestLimits,
    stats: Arc<Stats>,
}

impl EmbeddingEngine {
    /// An engine with no backend yet.
    pub fn new(limits: RequestLimits, stats: Arc<Stats>) -> Self {
        EmbeddingEngine {
            backend: OnceLock::new(),
            admission: InFlightLimiter::new(limits.max_in_flight_inputs),
            limits,
            stats,
        }
    }

    /// Installs the loaded backend; calls succeed from now on.
    pub fn install(&self, backend: Backend) {
        if self.backend.set(backend).is_err() {
            tracing::warn!("a backend was already installed; keeping the first");
        }
    }

    /// Whether a backend is installed.
    pub fn is_ready(&self) -> bool {
        self.backend.get().is_some()
    }

    /// The request limits.
    pub fn limits(&self) -> RequestLimits {
        self.limits
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Inputs admitted and not finished.
    pub fn in_flight_inputs(&self) -> usize {
        self.admission.in_flight()
    }

    /// The admission rule for interactive calls (local backend only: a remote
    /// backend's servers admit their own calls).
    pub fn admission(&self) -> Option<crate::lanes::Admission> {
        match self.backend.get() {
            Some(Backend::Local(local)) => Some(local.admission()),
            _ => None,
        }
    }

    /// Sequences waiting for the model (local backend only).
    pub fn queue_depth(&self) -> usize {
        match self.backend.get() {
            Some(Backend::Local(local)) => local.queue_depth(),
            _ => 0,
        }
    }

    /// The served model, once loaded.
    pub fn info(&self) -> Result<&ModelInfo> {
        Ok(self.backend()?.info())
    }

    /// Embeds `texts` with `options`.
    pub async fn embed(&self, texts: Vec<String>, options: EmbedOptions) -> Result<Embeddings> {
        Stats::add(&self.stats.requests, 1);
        self.check_inputs(&texts)?;
        let backend = self.backend()?;
        let dim = output_dim(options.dimensions, backend.info().dim)?;
        let _admission = self.admission.try_admit(texts.len()).inspect_err(|_| {
            Stats::add(&self.stats.rejected_overload, 1);
        })?;
        let raw = backend.embed(texts, options.truncate, options.priority).await.inspect_err(|error| {
            if matches!(error, Error::Overloaded { .. }) {
                Stats::add(&self.stats.rejected_overload, 1);
            }
        })?;
        let full_dim = backend.info().dim;
        let mut values = if dim == full_dim {
            raw.values
        } else {
            raw.values.chunks_exact(full_dim).flat_map(|row| &row[..dim]).copied().collect()
        };
        if options.normalize {
            l2_normalize_rows(&mut values, dim);
        }
        Ok(Embeddings {
            dim,
            values,
            token_counts: raw.token_counts,
            model_id: backend.info().model_id.clone(),
            timing: raw.timing,
        })
    }

    /// Units to chunk `text` by and units per token (see `Backend::chunking_units`).
    pub fn chunking_units(&self, text: &str) -> Result<(Vec<(usize, usize)>, f32)> {
        self.backend()?.chunking_units(text)
    }

    /// The model's tokenization of `texts`.
    pub async fn tokenize(&self, texts: Vec<String>, truncate: bool) -> Result<Vec<TokenizedText>> {
        self.check_inputs(&texts)?;
        self.backend()?.tokenize(texts, truncate).await
    }

    fn backend(&self) -> Result<&Backend> {
        self.backend.get().ok_or_else(|| Error::Unavailable("the model is still loading; retry shortly".into()))
    }

    /// Count and size checks that need no model.
    fn check_inputs(&self, texts: &[String]) -> Result<()> {
        if texts.is_empty() {
            return Err(Error::invalid("inputs", "must contain at least one text"));
        }
        if texts.len() > self.limits.max_inputs_per_request {
            return Err(Error::invalid(
                "inputs",
                format!(
                    "has {} texts, more than the limit of {} per request",
                    texts.len(),
                    self.limits.max_inputs_per_request
                ),
            ));
        }
        for (index, text) in texts.iter().enumerate() {
            if text.trim().is_empty() {
                return Err(Error::invalid(format!("inputs[{index}]"), "is empty"));
            }
            // Bytes bound characters from above, so most texts skip the count.
            if text.len() > self.limits.max_input_chars && text.chars().count() > self.limits.max_input_chars {
                return Err(Error::invalid(
                    format!("inputs[{index}]"),
                    format!("is longer than the limit of {} characters", self.limits.max_input_chars),
                ));
            }
        }
        Ok(())
    }
}

/// The dimension a request gets: all of the model's, or the requested prefix.
fn output_dim(requested: Option<usize>, model_dim: usize) -> Result<usize> {
    match requested {
        None | Some(0) => Ok(model_dim),
        Some(n) if n <= model_dim => Ok(n),
        Some(n) => Err(Error::invalid("dimensions", format!("{n} is more than the model's {model_dim}"))),
    }
}
