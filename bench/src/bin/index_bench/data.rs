//! The stored vectors and the queries: drawn from the same clustered distribution
//! (the queries continue the generator), so a query is a new text on a known topic.

use embedwire_server::index::ChunkId;
use embedwire_server::index::synthetic::Clustered;

use crate::config::Plan;

/// `size` stored vectors, row-major, and the queries.
pub struct Dataset {
    pub size: usize,
    pub dim: usize,
    rows: Vec<f32>,
    pub queries: Vec<Vec<f32>>,
}

impl Dataset {
    pub fn generate(plan: &Plan, size: usize) -> Dataset {
        let mut stored = Clustered::with_noise_rank(plan.seed, plan.dim, plan.clusters, plan.spread, plan.noise_rank);
        let rows = stored.rows(size);
        let queries = (0..plan.queries).map(|_| stored.next_vector()).collect();
        Dataset { size, dim: plan.dim, rows, queries }
    }

    /// Chunk ids 0.. in row order, as `VectorIndex::extend` takes them.
    pub fn batch(&self) -> Vec<(ChunkId, &[f32])> {
        self.rows.chunks_exact(self.dim).enumerate().map(|(i, row)| (i as ChunkId, row)).collect()
    }
}
