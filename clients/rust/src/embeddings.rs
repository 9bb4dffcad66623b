//! [`Embeddings`]: rows of f32 read straight out of the response bytes.
//!
//! The server sends FLOAT32 vectors as one little-endian byte string, and prost
//! (configured with `bytes::Bytes` fields) hands that string over as a slice of
//! the receive buffer. On a little-endian host whose slice starts on a 4-byte
//! boundary, the rows are those bytes reinterpreted: no copy, no decode. The slice
//! starts wherever the field happens to sit in the message, so it is not always
//! aligned; then the values are copied once into an aligned `Vec<f32>`, which is
//! still far cheaper than parsing. Big-endian hosts decode (one copy, byte-swapped).
//! Compact dtypes (FLOAT16, INT8, FLOAT32_LIST) are decoded into the vector too.

use bytes::Bytes;
use embedwire_proto::v1::{EmbedResponse, EmbeddingDtype};
use embedwire_proto::vectors;

use crate::error::{Error, Result};

/// `len()` vectors of `dim()` f32 values, row `i` for input `i`.
#[derive(Clone)]
pub struct Embeddings {
    values: Values,
    count: usize,
    dim: usize,
    /// The model that produced the vectors (empty when assembled by `embed_many`
    /// from answers of several servers that disagree).
    model: String,
    /// Tokens per input, after truncation (empty when the server sent none).
    token_counts: Vec<u32>,
}

/// Where the values live.
#[derive(Clone)]
enum Values {
    /// The response's bytes, 4-aligned little-endian f32: read in place.
    Shared(Bytes),
    /// An aligned copy, a decode, or values assembled from several responses.
    Owned(Vec<f32>),
}

impl Embeddings {
    /// The vectors of an Embed response, without copying them when possible.
    pub(crate) fn from_response(response: EmbedResponse, address: &str) -> Result<Self> {
        let protocol = |reason: String| Error::Protocol { address: address.to_string(), reason };
        let (count, dim) = (response.count as usize, response.dim as usize);
        let dtype = EmbeddingDtype::try_from(response.dtype)
            .map_err(|_| protocol(format!("unknown dtype {}", response.dtype)))?;
        let values = if vectors::effective_dtype(dtype) == EmbeddingDtype::Float32 {
            let expected = count * dim * 4;
            if response.embeddings.len() != expected {
                return Err(protocol(format!(
                    "embeddings has {} bytes, expected {expected} for {count} x {dim} FLOAT32",
                    response.embeddings.len()
                )));
            }
            f32_values(response.embeddings)
        } else {
            let decoded =
                vectors::decode_rows(&response.embeddings, &response.row_scales, &response.values, count, dim, dtype)
                    .map_err(|error| protocol(error.to_string()))?;
            Values::Owned(decoded)
        };
        Ok(Embeddings { values, count, dim, model: response.model, token_counts: response.token_counts })
    }

    /// Rows assembled by the caller (row-major, `values.len() == count * dim`).
    pub(crate) fn from_vec(values: Vec<f32>, count: usize, dim: usize, model: String, token_counts: Vec<u32>) -> Self {
        debug_assert_eq!(values.len(), count * dim);
        Embeddings { values: Values::Owned(values), count, dim, model, token_counts }
    }

    /// Number of vectors (the number of inputs).
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when there are no vectors.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Values per vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Row `i`, the vector of input `i`. Panics when `i >= len()`.
    pub fn row(&self, i: usize) -> &[f32] {
        assert!(i < self.count, "row {i} of {} embeddings", self.count);
        &self.as_slice()[i * self.dim..(i + 1) * self.dim]
    }

    /// The rows in input order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = &[f32]> + '_ {
        let dim = self.dim.max(1);
        // chunks_exact of an empty slice yields nothing, whatever the chunk size.
        self.as_slice().chunks_exact(dim).take(self.count)
    }

    /// All values, row-major (`len() * dim()` of them).
    pub fn as_slice(&self) -> &[f32] {
        match &self.values {
            Values::Shared(bytes) => bytemuck::cast_slice(bytes),
            Values::Owned(values) => values,
        }
    }

    /// The values as an owned vector (a copy only if they are still in the
    /// response buffer).
    pub fn into_vec(self) -> Vec<f32> {
        match self.values {
            Values::Shared(bytes) => bytemuck::cast_slice(&bytes).to_vec(),
            Values::Owned(values) => values,
        }
    }

    /// True when the rows are read in place from the response bytes.
    pub fn is_zero_copy(&self) -> bool {
        matches!(self.values, Values::Shared(_))
    }

    /// The model that produced the vectors.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Tokens of each input after truncation, special tokens included.
    pub fn token_counts(&self) -> &[u32] {
        &self.token_counts
    }

    /// A `len() x dim()` ndarray view of the same memory.
    #[cfg(feature = "ndarray")]
    pub fn view(&self) -> ndarray::ArrayView2<'_, f32> {
        ndarray::ArrayView2::from_shape((self.count, self.dim), self.as_slice())
            .expect("count * dim values, checked on construction")
    }
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("len", &self.count)
            .field("dim", &self.dim)
            .field("zero_copy", &self.is_zero_copy())
            .field("model", &self.model)
            .finish()
    }
}

/// Little-endian f32 bytes (a multiple of 4 long) as values: in place when the
/// host is little-endian and the bytes are aligned, else one copy.
fn f32_values(bytes: Bytes) -> Values {
    if cfg!(target_endian = "little") && bytemuck::try_cast_slice::<u8, f32>(&bytes).is_ok() {
        Values::Shared(bytes)
    } else {
        Values::Owned(vectors::f32_from_le_bytes(&bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response_with(bytes: Bytes, count: u32, dim: u32) -> EmbedResponse {
        EmbedResponse { dim, count, dtype: EmbeddingDtype::Float32 as i32, embeddings: bytes, ..Default::default() }
    }

    fn le_bytes(values: &[f32]) -> Vec<u8> {
        vectors::f32_to_le_bytes(values)
    }

    #[test]
    fn aligned_bytes_are_read_in_place() {
        let values: Vec<f32> = (0..12).map(|v| v as f32 * 0.5).collect();
        // Bytes from a Vec<f32>'s allocation start aligned.
        let mut storage: Vec<f32> = vec![0.0; 12];
        bytemuck::cast_slice_mut(&mut storage).copy_from_slice(&le_bytes(&values));
        let bytes = Bytes::from(bytemuck::cast_slice::<f32, u8>(&storage).to_vec());
        let aligned = bytes.as_ptr().align_offset(4) == 0;
        let embeddings = Embeddings::from_response(response_with(bytes.clone(), 3, 4), "h").unwrap();
        assert_eq!(embeddings.is_zero_copy(), aligned && cfg!(target_endian = "little"));
        if embeddings.is_zero_copy() {
            assert_eq!(embeddings.as_slice().as_ptr() as *const u8, bytes.as_ptr(), "same memory");
        }
        assert_eq!(embeddings.row(1), &values[4..8]);
        assert_eq!(embeddings.rows().len(), 3);
    }

    #[test]
    fn misaligned_bytes_are_copied_once_and_read_the_same() {
        let values: Vec<f32> = (0..8).map(|v| v as f32 - 3.25).collect();
        let mut padded = vec![0u8; 1];
        padded.extend(le_bytes(&values));
        let whole = Bytes::from(padded);
        // One of offsets 1..=4 is misaligned whatever the allocation's alignment.
        let misaligned = (1..4).find(|offset| whole[*offset..].as_ptr().align_offset(4) != 0).unwrap_or(1);
        let mut shifted = vec![0u8; misaligned];
        shifted.extend(le_bytes(&values));
        let bytes = Bytes::from(shifted).slice(misaligned..);
        if bytes.as_ptr().align_offset(4) == 0 {
            return; // the allocator placed it aligned after all; covered by the other test
        }
        let embeddings = Embeddings::from_response(response_with(bytes, 2, 4), "h").unwrap();
        assert!(!embeddings.is_zero_copy());
        assert_eq!(embeddings.as_slice(), &values[..]);
        assert_eq!(embeddings.rows().collect::<Vec<_>>(), vec![&values[..4], &values[4..]]);
    }

    #[test]
    fn a_wrong_length_is_a_protocol_error() {
        let error = Embeddings::from_response(response_with(Bytes::from(vec![0u8; 7]), 1, 2), "h").unwrap_err();
        assert!(error.to_string().contains("expected 8"), "{error}");
    }

    #[test]
    fn int8_rows_are_decoded() {
        let values = [0.5f32, -0.25, 1.0, 0.0];
        let encoded = vectors::encode_rows(&values, 2, EmbeddingDtype::Int8);
        let response = EmbedResponse {
            dim: 2,
            count: 2,
            dtype: EmbeddingDtype::Int8 as i32,
            embeddings: Bytes::from(encoded.bytes),
            row_scales: encoded.row_scales,
            ..Default::default()
        };
        let embeddings = Embeddings::from_response(response, "h").unwrap();
        for (got, want) in embeddings.as_slice().iter().zip(values) {
            assert!((got - want).abs() < 0.01, "{got} vs {want}");
        }
    }

    #[test]
    fn no_rows_is_empty() {
        let embeddings = Embeddings::from_response(response_with(Bytes::new(), 0, 384), "h").unwrap();
        assert!(embeddings.is_empty());
        assert_eq!(embeddings.rows().count(), 0);
    }
}
