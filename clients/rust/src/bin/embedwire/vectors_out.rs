//! Writing vectors: JSON lines, NumPy `.npy` (format 1.0, written here: it is a
//! fixed header and the raw values), or raw little-endian float32.

use std::io::{self, Write};

use embedwire_client::Embeddings;

/// One `{"index":i,"embedding":[...]}` line per vector. Floats are printed in their
/// shortest form that reads back to the same f32.
pub fn write_jsonl(out: &mut impl Write, embeddings: &Embeddings) -> io::Result<()> {
    for (index, row) in embeddings.rows().enumerate() {
        write!(out, "{{\"index\":{index},\"embedding\":")?;
        serde_json::to_writer(&mut *out, row)?;
        out.write_all(b"}\n")?;
    }
    Ok(())
}

/// The `.npy` header for a C-order float32 array of `rows` x `dim`: magic, version
/// 1.0, the header length, and the dict padded with spaces and a newline so that
/// the data starts at a multiple of 64 bytes (what numpy writes, and what lets a
/// reader map the data aligned).
pub fn npy_header(rows: usize, dim: usize) -> Vec<u8> {
    const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dim}), }}");
    let unpadded = MAGIC.len() + 2 + dict.len() + 1;
    let padding = unpadded.next_multiple_of(64) - unpadded;
    let header_len = dict.len() + padding + 1;
    let mut header = Vec::with_capacity(unpadded + padding);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(header_len as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header.extend(std::iter::repeat_n(b' ', padding));
    header.push(b'\n');
    header
}

/// The whole `.npy` file.
pub fn write_npy(out: &mut impl Write, embeddings: &Embeddings) -> io::Result<()> {
    out.write_all(&npy_header(embeddings.len(), embeddings.dim()))?;
    write_raw(out, embeddings)
}

/// The values, row-major, little-endian float32.
pub fn write_raw(out: &mut impl Write, embeddings: &Embeddings) -> io::Result<()> {
    if cfg!(target_endian = "little") {
        out.write_all(bytemuck::cast_slice(embeddings.as_slice()))
    } else {
        for value in embeddings.as_slice() {
            out.write_all(&value.to_le_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_npy_header_is_padded_to_64_bytes_and_ends_with_a_newline() {
        for (rows, dim) in [(0, 0), (3, 384), (123456, 1024)] {
            let header = npy_header(rows, dim);
            assert_eq!(header.len() % 64, 0, "{rows} x {dim}");
            assert_eq!(&header[..8], b"\x93NUMPY\x01\x00");
            let declared = u16::from_le_bytes([header[8], header[9]]) as usize;
            assert_eq!(10 + declared, header.len());
            assert_eq!(*header.last().unwrap(), b'\n');
            let dict = std::str::from_utf8(&header[10..]).unwrap();
            assert!(
                dict.starts_with(&format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dim}), }}"))
            );
        }
    }
}
