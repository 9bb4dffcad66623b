//! Byte encodings of embedding rows as they travel in `EmbedResponse`.
//!
//! Rows are row-major and little-endian whatever the host, so any client can decode
//! them with one call (`numpy.frombuffer(b, "<f4")`, `Float32Array`, ...).

use prost::bytes::Bytes;

use crate::v1::EmbeddingDtype;

/// Why bytes could not be decoded into rows.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The byte count does not fit `count` rows of `dim` values of this dtype.
    #[error("embeddings has {actual} bytes, expected {expected} for {count} x {dim} {dtype}")]
    WrongLength { actual: usize, expected: usize, count: usize, dim: usize, dtype: &'static str },
    /// INT8 rows need one scale per row.
    #[error("row_scales has {actual} entries, expected {expected}")]
    WrongScaleCount { actual: usize, expected: usize },
    /// Bits cannot be turned back into values.
    #[error("{0} cannot be decoded to float values")]
    NotDecodable(&'static str),
}

/// Rows encoded for the wire: the fields of `EmbedResponse` that carry values.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EncodedRows {
    /// `EmbedResponse.embeddings`.
    pub bytes: Vec<u8>,
    /// `EmbedResponse.row_scales` (INT8 only).
    pub row_scales: Vec<f32>,
    /// `EmbedResponse.values` (FLOAT32_LIST only).
    pub values: Vec<f32>,
}

/// The dtype a request asked for, with UNSPECIFIED resolved to the FLOAT32 default.
pub fn effective_dtype(dtype: EmbeddingDtype) -> EmbeddingDtype {
    match dtype {
        EmbeddingDtype::Unspecified => EmbeddingDtype::Float32,
        other => other,
    }
}

/// Bytes one row of `dim` values takes in `dtype`.
pub fn bytes_per_row(dtype: EmbeddingDtype, dim: usize) -> usize {
    match effective_dtype(dtype) {
        EmbeddingDtype::Float32 => dim * 4,
        EmbeddingDtype::Float16 => dim * 2,
        EmbeddingDtype::Int8 => dim,
        EmbeddingDtype::Ubinary => dim.div_ceil(8),
        EmbeddingDtype::Float32List | EmbeddingDtype::Unspecified => 0,
    }
}

/// Encodes `values` (rows of `dim` floats, row-major) as `dtype`.
pub fn encode_rows(values: &[f32], dim: usize, dtype: EmbeddingDtype) -> EncodedRows {
    match effective_dtype(dtype) {
        EmbeddingDtype::Float32 | EmbeddingDtype::Unspecified => {
            EncodedRows { bytes: f32_to_le_bytes(values), ..Default::default() }
        }
        EmbeddingDtype::Float16 => EncodedRows {
            bytes: values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
            ..Default::default()
        },
        EmbeddingDtype::Int8 => encode_int8(values, dim),
        EmbeddingDtype::Ubinary => EncodedRows { bytes: pack_sign_bits(values, dim), ..Default::default() },
        EmbeddingDtype::Float32List => EncodedRows { values: values.to_vec(), ..Default::default() },
    }
}

/// Float32 values as little-endian bytes.
pub fn f32_to_le_bytes(values: &[f32]) -> Vec<u8> {
    #[cfg(target_endian = "little")]
    {
        // One memcpy: appending 4 bytes per value ran at a tenth of memory speed
        // (7-11 % of the server's CPU on a 256 x 384 answer).
        little_endian::as_bytes(values).to_vec()
    }
    #[cfg(not(target_endian = "little"))]
    {
        values.iter().flat_map(|value| value.to_le_bytes()).collect()
    }
}

/// Float32 rows as little-endian bytes for `EmbedResponse.embeddings`, taking the
/// vector: on little-endian hosts its own buffer becomes the `Bytes`, so a FLOAT32
/// answer is neither allocated nor copied a second time before the transport.
pub fn f32_rows_into_bytes(values: Vec<f32>) -> Bytes {
    #[cfg(target_endian = "little")]
    {
        Bytes::from_owner(little_endian::F32Bytes(values))
    }
    #[cfg(not(target_endian = "little"))]
    {
        Bytes::from(f32_to_le_bytes(&values))
    }
}

/// Decodes `count` rows of `dim` values back to float32, row-major. FLOAT16 and INT8
/// come back approximately; UBINARY cannot be decoded.
pub fn decode_rows(
    bytes: &[u8],
    row_scales: &[f32],
    values: &[f32],
    count: usize,
    dim: usize,
    dtype: EmbeddingDtype,
) -> Result<Vec<f32>, DecodeError> {
    let dtype = effective_dtype(dtype);
    if dtype == EmbeddingDtype::Float32List {
        if values.len() != count * dim {
            return Err(DecodeError::WrongLength {
                actual: values.len() * 4,
                expected: count * dim * 4,
                count,
                dim,
                dtype: dtype.as_str_name(),
            });
        }
        return Ok(values.to_vec());
    }
    let expected = count * bytes_per_row(dtype, dim);
    if bytes.len() != expected {
        return Err(DecodeError::WrongLength { actual: bytes.len(), expected, count, dim, dtype: dtype.as_str_name() });
    }
    match dtype {
        EmbeddingDtype::Float16 => {
            Ok(bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect())
        }
        EmbeddingDtype::Int8 => {
            if row_scales.len() != count {
                return Err(DecodeError::WrongScaleCount { actual: row_scales.len(), expected: count });
            }
            Ok(bytes
                .chunks_exact(dim.max(1))
                .zip(row_scales)
                .flat_map(|(row, scale)| row.iter().map(move |q| (*q as i8) as f32 * scale))
                .collect())
        }
        EmbeddingDtype::Ubinary => Err(DecodeError::NotDecodable(dtype.as_str_name())),
        _ => Ok(f32_from_le_bytes(bytes)),
    }
}

/// Little-endian bytes (a multiple of 4 long) as float32 values.
pub fn f32_from_le_bytes(bytes: &[u8]) -> Vec<f32> {
    #[cfg(target_endian = "little")]
    {
        // One memcpy instead of assembling each value from 4 bytes; every decoding
        // client (gRPC and octet-stream alike) pays this per answer.
        let mut values = Vec::with_capacity(bytes.len() / 4);
        little_endian::extend_from_bytes(&mut values, bytes);
        values
    }
    #[cfg(not(target_endian = "little"))]
    {
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }
}

/// On a little-endian host an `f32` slice already is the wire encoding; these views
/// let it be copied or handed out whole.
#[cfg(target_endian = "little")]
mod little_endian {
    /// The bytes of `values`, as they lie in memory.
    pub(super) fn as_bytes(values: &[f32]) -> &[u8] {
        // SAFETY: the slice covers exactly the memory of `values` (len * 4 bytes,
        // same lifetime); f32 has no padding and u8 needs no alignment.
        unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
    }

    /// Appends the whole f32 values in `bytes` (any bit pattern is a valid f32)
    /// without zeroing the space first.
    pub(super) fn extend_from_bytes(values: &mut Vec<f32>, bytes: &[u8]) {
        let count = bytes.len() / 4;
        values.reserve(count);
        // SAFETY: `reserve` made room for `count` more values; the copy writes
        // exactly their count * 4 bytes (u8 source, no overlap with a fresh
        // reservation) before the length is raised to cover them.
        unsafe {
            let end = values.as_mut_ptr().add(values.len()).cast::<u8>();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), end, count * 4);
            values.set_len(values.len() + count);
        }
    }

    /// Owns a vector so that `Bytes::from_owner` can serve its memory as bytes.
    pub(super) struct F32Bytes(pub(super) Vec<f32>);

    impl AsRef<[u8]> for F32Bytes {
        fn as_ref(&self) -> &[u8] {
            as_bytes(&self.0)
        }
    }
}

/// Symmetric per-row quantization: the largest magnitude of a row maps to 127, so
/// unnormalized rows keep their precision as well as normalized ones.
fn encode_int8(values: &[f32], dim: usize) -> EncodedRows {
    let mut bytes = Vec::with_capacity(values.len());
    let mut row_scales = Vec::with_capacity(values.len() / dim.max(1));
    for row in values.chunks_exact(dim.max(1)) {
        let max_abs = row.iter().fold(0.0f32, |acc, v| acc.max(v.abs()));
        let scale = if max_abs > 0.0 { max_abs / 127.0 } else { 1.0 };
        row_scales.push(scale);
        bytes.extend(row.iter().map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8 as u8));
    }
    EncodedRows { bytes, row_scales, values: Vec::new() }
}

/// One bit per value (set when > 0), most significant bit first, rows padded to bytes.
fn pack_sign_bits(values: &[f32], dim: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(values.len().div_ceil(8));
    for row in values.chunks_exact(dim.max(1)) {
        for chunk in row.chunks(8) {
            let byte =
                chunk.iter().enumerate().fold(0u8, |acc, (bit, v)| if *v > 0.0 { acc | (0x80 >> bit) } else { acc });
            bytes.push(byte);
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: [f32; 6] = [0.5, -0.25, 1.0, -1.0, 0.0, 0.125];

    #[test]
    fn float32_round_trips_exactly_and_is_little_endian() {
        let encoded = encode_rows(&ROWS, 3, EmbeddingDtype::Float32);
        assert_eq!(&encoded.bytes[..4], &0.5f32.to_le_bytes());
        let decoded = decode_rows(&encoded.bytes, &[], &[], 2, 3, EmbeddingDtype::Unspecified).unwrap();
        assert_eq!(decoded, ROWS);
    }

    #[test]
    fn float16_and_int8_round_trip_within_their_precision() {
        for dtype in [EmbeddingDtype::Float16, EmbeddingDtype::Int8] {
            let encoded = encode_rows(&ROWS, 3, dtype);
            assert_eq!(encoded.bytes.len(), bytes_per_row(dtype, 3) * 2);
            let decoded = decode_rows(&encoded.bytes, &encoded.row_scales, &[], 2, 3, dtype).unwrap();
            for (a, b) in decoded.iter().zip(ROWS) {
                assert!((a - b).abs() < 0.01, "{dtype:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn ubinary_packs_sign_bits_msb_first_per_row() {
        let values: Vec<f32> = (0..10).map(|i| if i % 3 == 0 { 1.0 } else { -1.0 }).collect();
        let encoded = encode_rows(&values, 10, EmbeddingDtype::Ubinary);
        // bits 1001001001 -> 0b1001_0010, 0b0100_0000
        assert_eq!(encoded.bytes, vec![0b1001_0010, 0b0100_0000]);
    }

    #[test]
    fn owned_float32_rows_are_the_same_bytes_as_the_copy() {
        let bytes = f32_rows_into_bytes(ROWS.to_vec());
        assert_eq!(&bytes[..], &f32_to_le_bytes(&ROWS)[..]);
        assert_eq!(&bytes[4..8], &(-0.25f32).to_le_bytes());
        assert_eq!(f32_from_le_bytes(&bytes), ROWS);
    }

    #[test]
    fn wrong_lengths_are_reported() {
        let err = decode_rows(&[0; 7], &[], &[], 2, 1, EmbeddingDtype::Float32).unwrap_err();
        assert!(matches!(err, DecodeError::WrongLength { expected: 8, .. }));
    }
}
