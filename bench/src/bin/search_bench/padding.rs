//! An estimate of the tokens the model runs for the corpus on each path, padding
//! included, from the token counts Embed reported and the server's batching rules
//! (`embedwire_server::batcher`): a batch is padded to its longest sequence.
//!
//! - Embed: concurrent calls fill the interactive queue; the model thread takes a
//!   window of up to 4 batches, sorts it by length and cuts it under the budget, so
//!   similar lengths share a batch. Estimated with windows of the texts that the
//!   concurrent clients send together.
//! - Ingest: the job runner embeds `--ingest-batch-documents` documents at a time as
//!   bulk work, which the model thread takes one batch at a time in arrival order,
//!   unsorted, under the smaller `--max-bulk-batch-tokens` budget (assuming one chunk
//!   per document, which GetIndexStats confirms or not).
//!
//! It explains a gap between the two rates; it is not a measurement.

/// Batching limits of the server, as configured.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    pub max_batch_size: usize,
    pub max_batch_tokens: usize,
    /// Token budget of a bulk (ingestion) batch.
    pub max_bulk_batch_tokens: usize,
    /// Documents the ingest job runner embeds per engine call.
    pub ingest_batch_documents: usize,
}

/// The model's work for a list of sequence lengths on one path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelWork {
    /// Sum of the sequence lengths.
    pub real_tokens: u64,
    /// Sum over batches of batch size x longest sequence.
    pub padded_tokens: u64,
    pub batches: usize,
}

impl ModelWork {
    /// Padded over real tokens (1.0 = no padding).
    pub fn padding_factor(&self) -> f64 {
        self.padded_tokens as f64 / self.real_tokens.max(1) as f64
    }
}

/// Embed's batches: windows of `window` consecutive texts, each sorted by length,
/// then cut like the batcher cuts them.
pub fn embed_path(lengths: &[u32], window: usize, limits: Batching) -> ModelWork {
    let mut work = ModelWork { real_tokens: 0, padded_tokens: 0, batches: 0 };
    for chunk in lengths.chunks(window.max(1)) {
        let mut sorted = chunk.to_vec();
        sorted.sort_unstable();
        add_batches(&mut work, &sorted, limits.max_batch_size, limits.max_batch_tokens);
    }
    work
}

/// Ingest's batches: groups of `ingest_batch_documents` in document order, each cut
/// in arrival order under the bulk budget.
pub fn ingest_path(lengths: &[u32], limits: Batching) -> ModelWork {
    let mut work = ModelWork { real_tokens: 0, padded_tokens: 0, batches: 0 };
    for group in lengths.chunks(limits.ingest_batch_documents.max(1)) {
        add_batches(&mut work, group, limits.max_batch_size, limits.max_bulk_batch_tokens);
    }
    work
}

/// What Ingest would cost if each group were sorted by length before being cut,
/// as the interactive path sorts its windows: the room a server change has.
pub fn ingest_path_sorted(lengths: &[u32], limits: Batching) -> ModelWork {
    let mut work = ModelWork { real_tokens: 0, padded_tokens: 0, batches: 0 };
    for group in lengths.chunks(limits.ingest_batch_documents.max(1)) {
        let mut sorted = group.to_vec();
        sorted.sort_unstable();
        add_batches(&mut work, &sorted, limits.max_batch_size, limits.max_bulk_batch_tokens);
    }
    work
}

/// Cuts `lengths`, in the given order, into batches of at most `max_size`
/// sequences and `max_tokens` tokens (padding included), as the batcher does, and
/// adds them to `work`.
fn add_batches(work: &mut ModelWork, lengths: &[u32], max_size: usize, max_tokens: usize) {
    let (mut count, mut longest) = (0usize, 0u64);
    for &length in lengths {
        let length = u64::from(length);
        let would_be = (count as u64 + 1) * longest.max(length);
        if count > 0 && (count == max_size || would_be > max_tokens as u64) {
            work.padded_tokens += count as u64 * longest;
            work.batches += 1;
            (count, longest) = (0, 0);
        }
        count += 1;
        longest = longest.max(length);
        work.real_tokens += length;
    }
    if count > 0 {
        work.padded_tokens += count as u64 * longest;
        work.batches += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Batching =
        Batching { max_batch_size: 2, max_batch_tokens: 1000, max_bulk_batch_tokens: 1000, ingest_batch_documents: 4 };

    #[test]
    fn sorting_a_window_saves_padding() {
        let lengths = [10, 100, 10, 100];
        let ingest = ingest_path(&lengths, LIMITS);
        assert_eq!(ingest, ModelWork { real_tokens: 220, padded_tokens: 400, batches: 2 });
        assert_eq!(ingest_path_sorted(&lengths, LIMITS).padded_tokens, 220);
        let embed = embed_path(&lengths, 4, LIMITS);
        assert_eq!(embed, ModelWork { real_tokens: 220, padded_tokens: 220, batches: 2 });
        assert!((embed.padding_factor() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_token_budgets_cut_batches() {
        let limits = Batching {
            max_batch_size: 64,
            max_batch_tokens: 1000,
            max_bulk_batch_tokens: 250,
            ingest_batch_documents: 64,
        };
        let work = ingest_path(&[100, 100, 100], limits);
        assert_eq!(work, ModelWork { real_tokens: 300, padded_tokens: 300, batches: 2 });
        assert_eq!(embed_path(&[100, 100, 100], 3, limits).batches, 1);
    }
}
