//! Turns a batch of token vectors into one vector per text, as sentence-transformers
//! does: padding positions never count.

/// How token vectors become one text vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Average of the token vectors under the attention mask.
    Mean,
    /// The first token's ([CLS]) vector.
    Cls,
}

impl Pooling {
    /// The name reported by the Info rpc.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        }
    }

    /// Pools `hidden` ([batch, seq_len, dim], row-major) into [batch, dim]. `lengths`
    /// holds each row's real token count; positions past it are padding.
    pub fn pool(self, hidden: &[f32], lengths: &[usize], seq_len: usize, dim: usize) -> Vec<f32> {
        let mut pooled = vec![0.0f32; lengths.len() * dim];
        for (row, (&length, out)) in lengths.iter().zip(pooled.chunks_exact_mut(dim)).enumerate() {
            let tokens = &hidden[row * seq_len * dim..(row * seq_len + length) * dim];
            match self {
                Pooling::Cls => out.copy_from_slice(&tokens[..dim]),
                Pooling::Mean => {
                    for token in tokens.chunks_exact(dim) {
                        for (acc, value) in out.iter_mut().zip(token) {
                            *acc += value;
                        }
                    }
                    // sentence-transformers clamps the divisor at 1e-9; length >= 1 here.
                    let inverse = 1.0 / length.max(1) as f32;
                    out.iter_mut().for_each(|v| *v *= inverse);
                }
            }
        }
        pooled
    }
}

/// Scales each row of `values` to unit L2 length; all-zero rows stay zero.
pub fn l2_normalize_rows(values: &mut [f32], dim: usize) {
    for row in values.chunks_exact_mut(dim) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        // sentence-transformers' Normalize divides by max(norm, 1e-12).
        let inverse = 1.0 / norm.max(1e-12);
        row.iter_mut().for_each(|v| *v *= inverse);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_pooling_ignores_padding() {
        // batch of 2, seq_len 3, dim 2; row 1 has one real token and two pads of 100s.
        let hidden = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 100.0, 100.0, 100.0, 100.0];
        let pooled = Pooling::Mean.pool(&hidden, &[3, 1], 3, 2);
        assert_eq!(pooled, vec![3.0, 4.0, 7.0, 8.0]);
        assert_eq!(Pooling::Cls.pool(&hidden, &[3, 1], 3, 2), vec![1.0, 2.0, 7.0, 8.0]);
    }

    #[test]
    fn normalization_gives_unit_rows_and_keeps_zero_rows() {
        let mut rows = vec![3.0, 4.0, 0.0, 0.0];
        l2_normalize_rows(&mut rows, 2);
        assert_eq!(rows, vec![0.6, 0.8, 0.0, 0.0]);
    }
}
