//! Approximate search over an HNSW graph (the `hnsw_rs` crate), for collections where
//! even the int8 scan of exact search is too slow.
//!
//! The graph cannot delete, so a removed or replaced vector leaves a tombstone: its
//! graph node stays (still useful for navigation) but never comes out of a search.
//! Every graph node is a slot; slot numbers are the graph's own ids and are never
//! reused. Tombstones cost memory and some search effort until the index is rebuilt
//! from the store, which is the caller's call (`VectorIndex::tombstones` counts them).
//!
//! The f32 vectors are kept a second time, outside the graph, for `get` and so every
//! hit's score is the same exact f32 dot product exact search returns.

use std::collections::HashMap;

use hnsw_rs::prelude::{Distance, Hnsw};

use super::kernels::Kernels;
use super::rows::Rows;
use super::{ChunkId, Filter};

/// Layers of the graph; with the crate's level scale (1/ln m) far more than a billion
/// vectors would ever fill.
const MAX_LAYERS: usize = 16;

/// `1 - dot`, the crate's distance for normalized vectors, computed with our SIMD dot
/// (the crate's own is a sequential scalar fold). Clamped at 0 because the crate
/// asserts non-negative distances and rounding can push the dot of near-duplicates
/// past 1.
#[derive(Debug, Clone, Copy)]
struct DotDistance(Kernels);

impl Distance<f32> for DotDistance {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - self.0.dot_f32(a, b)).max(0.0)
    }
}

/// An HNSW graph plus the bookkeeping for ids, tombstones and exact scores.
pub struct HnswIndex {
    graph: Hnsw<'static, f32, DotDistance>,
    /// The live vectors, by chunk id.
    rows: Rows,
    /// The chunk id of each graph slot, `None` once tombstoned.
    slots: Vec<Option<ChunkId>>,
    /// The live slot of each chunk id.
    slot_of: HashMap<ChunkId, usize>,
    /// Width of the search in the bottom layer (at least `k`).
    ef_search: usize,
    kernels: Kernels,
}

impl std::fmt::Debug for HnswIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HnswIndex")
            .field("len", &self.rows.len())
            .field("tombstones", &self.tombstones())
            .field("ef_search", &self.ef_search)
            .finish_non_exhaustive()
    }
}

impl HnswIndex {
    /// `m` links per node and layer (at most 255), `ef_construction` the search width
    /// while inserting.
    pub fn new(dim: usize, m: usize, ef_construction: usize, ef_search: usize) -> HnswIndex {
        let kernels = Kernels::best();
        HnswIndex {
            graph: Hnsw::new(m, 0, MAX_LAYERS, ef_construction, DotDistance(kernels)),
            rows: Rows::new(dim),
            slots: Vec::new(),
            slot_of: HashMap::new(),
            ef_search,
            kernels,
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Graph nodes that no longer answer: removed or replaced vectors.
    pub fn tombstones(&self) -> usize {
        self.slots.len() - self.rows.len()
    }

    pub fn set_ef_search(&mut self, ef_search: usize) {
        self.ef_search = ef_search.max(1);
    }

    pub fn ef_search(&self) -> usize {
        self.ef_search
    }

    /// The live vectors, by row (rows move when vectors are removed).
    pub fn rows(&self) -> &Rows {
        &self.rows
    }

    /// The ids of the `k` nearest live vectors the graph finds at search width `ef`
    /// (for measuring recall: no filter, no scores).
    pub fn neighbours_at(&self, query: &[f32], k: usize, ef: usize) -> Vec<ChunkId> {
        if k == 0 || self.rows.len() == 0 {
            return Vec::new();
        }
        self.search_live(query, k, ef)
    }

    pub fn get(&self, id: ChunkId) -> Option<&[f32]> {
        self.rows.get(id)
    }

    pub fn insert(&mut self, id: ChunkId, vector: &[f32]) {
        let slot = self.assign_slot(id, vector);
        self.graph.insert_slice((vector, slot));
    }

    /// Inserts a batch with the crate's parallel insertion (all cores, through rayon):
    /// the way to load a large collection.
    pub fn extend(&mut self, batch: &[(ChunkId, &[f32])]) {
        self.rows.reserve(batch.len());
        self.slots.reserve(batch.len());
        let slotted: Vec<(&[f32], usize)> =
            batch.iter().map(|&(id, vector)| (vector, self.assign_slot(id, vector))).collect();
        self.graph.parallel_insert_slice(&slotted);
    }

    /// Records `id`'s vector and gives it a new slot, tombstoning its old one.
    fn assign_slot(&mut self, id: ChunkId, vector: &[f32]) -> usize {
        self.rows.insert(id, vector);
        let slot = self.slots.len();
        self.slots.push(Some(id));
        if let Some(old) = self.slot_of.insert(id, slot) {
            self.slots[old] = None;
        }
        slot
    }

    pub fn remove(&mut self, id: ChunkId) -> bool {
        let Some(slot) = self.slot_of.remove(&id) else { return false };
        self.slots[slot] = None;
        self.rows.remove(id);
        true
    }

    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        min_score: Option<f32>,
        filter: Option<&Filter>,
    ) -> Vec<(ChunkId, f32)> {
        if k == 0 || self.rows.len() == 0 {
            return Vec::new();
        }
        let ids = match filter {
            Some(filter) => self.search_filtered(query, k, filter),
            None => self.search_live(query, k, self.ef_search),
        };
        let floor = min_score.unwrap_or(f32::NEG_INFINITY);
        let mut hits: Vec<(ChunkId, f32)> = ids
            .into_iter()
            .filter_map(|id| {
                let score = self.kernels.dot_f32(self.rows.get(id)?, query);
                (score >= floor).then_some((id, score))
            })
            .collect();
        hits.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(k);
        hits
    }

    /// Without a caller's filter: an unfiltered graph search (the crate's fast path;
    /// its filtered search never stops early) over-fetching by the share of
    /// tombstones, and fetching more in the rare case that still leaves fewer than
    /// `k` live hits.
    fn search_live(&self, query: &[f32], k: usize, ef_search: usize) -> Vec<ChunkId> {
        let nodes = self.slots.len();
        let mut fetch = (k * nodes).div_ceil(self.rows.len()) + if self.tombstones() > 0 { 8 } else { 0 };
        loop {
            let fetch_now = fetch.min(nodes);
            let neighbours = self.graph.search(query, fetch_now, ef_search.max(fetch_now));
            let live: Vec<ChunkId> = neighbours.iter().filter_map(|n| self.slots[n.d_id]).take(k).collect();
            if live.len() >= k.min(self.rows.len()) || fetch_now == nodes {
                return live;
            }
            fetch *= 2;
        }
    }

    /// With a caller's filter: the crate's filtered search, which only returns nodes
    /// passing the filter (tombstones fail it).
    fn search_filtered(&self, query: &[f32], k: usize, filter: &Filter) -> Vec<ChunkId> {
        let passes = |slot: &usize| self.slots[*slot].is_some_and(filter);
        let neighbours = self.graph.search_filter(query, k, self.ef_search.max(k), Some(&passes));
        neighbours.iter().filter_map(|n| self.slots[n.d_id]).collect()
    }
}
