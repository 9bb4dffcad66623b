//! The exact f32 vectors, one contiguous row-major block, with the chunk id of each
//! row and the row of each chunk id. Both index kinds keep them: for `get`, and to
//! give every returned hit its exact f32 score.

use std::collections::HashMap;

use super::ChunkId;

/// Rows of `dim` floats. Removal moves the last row into the hole (`swap_remove`),
/// so rows stay dense and a scan never meets a gap.
#[derive(Debug, Clone)]
pub struct Rows {
    dim: usize,
    /// `ids.len() * dim` floats.
    values: Vec<f32>,
    /// The chunk id of each row.
    ids: Vec<ChunkId>,
    /// The row of each chunk id.
    row_of: HashMap<ChunkId, u32>,
}

/// Where an insertion put a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// The id was new; its row is the last one.
    Appended(usize),
    /// The id existed; its row was overwritten in place.
    Replaced(usize),
}

/// What a removal did to the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// The row that held the removed vector.
    pub row: usize,
    /// Whether the last row was moved into `row` (it was not when `row` was the last).
    pub moved_last: bool,
}

impl Rows {
    pub fn new(dim: usize) -> Rows {
        Rows { dim, values: Vec::new(), ids: Vec::new(), row_of: HashMap::new() }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn row_of(&self, id: ChunkId) -> Option<usize> {
        self.row_of.get(&id).map(|&row| row as usize)
    }

    pub fn id(&self, row: usize) -> ChunkId {
        self.ids[row]
    }

    pub fn vector(&self, row: usize) -> &[f32] {
        &self.values[row * self.dim..(row + 1) * self.dim]
    }

    pub fn get(&self, id: ChunkId) -> Option<&[f32]> {
        self.row_of(id).map(|row| self.vector(row))
    }

    /// Stores `vector` (of length `dim`, checked by the caller) under `id`.
    pub fn insert(&mut self, id: ChunkId, vector: &[f32]) -> Placed {
        debug_assert_eq!(vector.len(), self.dim);
        if let Some(row) = self.row_of(id) {
            let dim = self.dim;
            self.values[row * dim..(row + 1) * dim].copy_from_slice(vector);
            return Placed::Replaced(row);
        }
        let row = self.ids.len();
        let row_u32 = u32::try_from(row).expect("more than u32::MAX vectors in one index");
        self.values.extend_from_slice(vector);
        self.ids.push(id);
        self.row_of.insert(id, row_u32);
        Placed::Appended(row)
    }

    /// Removes `id`'s vector, if there is one.
    pub fn remove(&mut self, id: ChunkId) -> Option<Removed> {
        let row = self.row_of.remove(&id)? as usize;
        let last = self.ids.len() - 1;
        let dim = self.dim;
        if row != last {
            self.values.copy_within(last * dim..(last + 1) * dim, row * dim);
            self.ids[row] = self.ids[last];
            self.row_of.insert(self.ids[row], row as u32);
        }
        self.values.truncate(last * dim);
        self.ids.truncate(last);
        Some(Removed { row, moved_last: row != last })
    }

    /// Makes room for `additional` more rows without reallocating (bulk loads).
    pub fn reserve(&mut self, additional: usize) {
        self.values.reserve(additional * self.dim);
        self.ids.reserve(additional);
        self.row_of.reserve(additional);
    }
}
