//! Int8 codes with one scale per vector, and the bound on how far a score computed
//! from codes can be from the exact f32 score.
//!
//! A vector `x` is stored as `scale * codes` with `codes` in -127..=127 and
//! `scale = max|x_i| / 127`. The rounding leaves a residual `r = x - scale * codes`
//! whose norm is kept next to the codes. For a query `q` coded the same way, with
//! residual `s`, Cauchy-Schwarz bounds the gap between the approximate and the exact
//! score:
//!
//! `|x.q - (scale_x codes_x).(scale_q codes_q)| <= |r| |q| + |scale_x codes_x| |s|`
//!
//! which is what lets exact search rescore only a few rows and still be sure nothing
//! outside them belongs in the top k.

use super::kernels::{LINE, Line};

/// What is kept per row besides its codes.
#[derive(Debug, Clone, Copy)]
pub struct RowCode {
    /// Multiplies the integer dot product back to the vector's units.
    pub scale: f32,
    /// `|scale * codes|`: how much the query's residual can move the score.
    pub coded_norm: f32,
    /// `|x - scale * codes|`, rounded up: how much this row's residual can move it.
    pub residual_norm: f32,
}

/// The query, coded for [`super::kernels::Kernels::scan_i8`].
#[derive(Debug, Clone)]
pub struct QueryCode {
    /// The codes widened to i16, zero-padded to the row stride.
    pub codes: Vec<i16>,
    pub scale: f32,
    /// `|q|`, rounded up.
    pub norm: f32,
    /// `|q - scale * codes|`, rounded up.
    pub residual_norm: f32,
}

/// The number of lines of a row of `dim` codes.
pub fn lines_per_row(dim: usize) -> usize {
    dim.div_ceil(LINE)
}

/// Codes `vector` into `lines` (exactly `lines_per_row(vector.len())` of them).
pub fn encode_row(vector: &[f32], lines: &mut [Line]) -> RowCode {
    debug_assert_eq!(lines.len(), lines_per_row(vector.len()));
    let scale = scale_of(vector);
    let mut coded = lines.iter_mut().flat_map(|line| line.0.iter_mut());
    for (&value, code) in vector.iter().zip(coded.by_ref()) {
        *code = code_of(value, scale);
    }
    // The padding must be zero so it adds nothing to any dot product.
    coded.for_each(|code| *code = 0);
    let codes = lines.iter().flat_map(|line| line.0).map(i32::from);
    let (coded_norm, residual_norm) = norms(vector, codes, scale);
    RowCode { scale, coded_norm: round_up(coded_norm), residual_norm: round_up(residual_norm) }
}

impl QueryCode {
    /// Codes `query` for a row stride of `lines` lines.
    pub fn new(query: &[f32], lines: usize) -> QueryCode {
        let scale = scale_of(query);
        let mut codes = vec![0i16; lines * LINE];
        for (&value, code) in query.iter().zip(codes.iter_mut()) {
            *code = i16::from(code_of(value, scale));
        }
        let exact_norm = query.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
        let (_, residual_norm) = norms(query, codes.iter().map(|&c| i32::from(c)), scale);
        QueryCode { codes, scale, norm: round_up(exact_norm), residual_norm: round_up(residual_norm) }
    }
}

/// The largest magnitude maps to 127; an all-zero vector gets scale 0 and zero codes.
pub fn scale_of(vector: &[f32]) -> f32 {
    vector.iter().fold(0f32, |max, v| max.max(v.abs())) / 127.0
}

pub fn code_of(value: f32, scale: f32) -> i8 {
    if scale == 0.0 { 0 } else { (value / scale).round().clamp(-127.0, 127.0) as i8 }
}

/// `(|scale * codes|, |vector - scale * codes|)`, in f64 so the bound is not itself
/// spoiled by rounding.
fn norms(vector: &[f32], codes: impl Iterator<Item = i32>, scale: f32) -> (f64, f64) {
    let (mut coded, mut residual) = (0f64, 0f64);
    for (&value, code) in vector.iter().zip(codes) {
        let approx = f64::from(scale) * f64::from(code);
        coded += approx * approx;
        residual += (f64::from(value) - approx).powi(2);
    }
    (coded.sqrt(), residual.sqrt())
}

/// An f32 at least as large as `value`.
fn round_up(value: f64) -> f32 {
    let rounded = value as f32;
    if f64::from(rounded) < value { rounded.next_up() } else { rounded }
}

/// The largest possible distance, for this row and query, between the score computed
/// from codes and the exact f32 dot product, including what f32 rounding in both can
/// add (`rounding` is from [`rounding_slack`]).
pub fn error_bound(row: &RowCode, query: &QueryCode, rounding: f32) -> f32 {
    let row_norm = row.coded_norm + row.residual_norm;
    row.residual_norm * query.norm + row.coded_norm * query.residual_norm + rounding * row_norm * query.norm
}

/// A relative allowance for rounding: the f32 dot product of `dim` terms is off by at
/// most about `dim` units in the last place of `|x| |q|`, and the approximate score
/// is a product of three f32 values. Doubled for comfort; it is tiny next to the
/// quantization terms.
pub fn rounding_slack(dim: usize) -> f32 {
    2.0 * (dim as f32 + 4.0) * f32::EPSILON
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::kernels::{Kernels, dot_f32_scalar};
    use crate::index::synthetic::{Rng, unit_vector};

    #[test]
    fn the_bound_holds_and_is_tight_enough() {
        let mut rng = Rng::new(3);
        for dim in [1, 3, 64, 100, 384] {
            let lines = lines_per_row(dim);
            let slack = rounding_slack(dim);
            for _ in 0..200 {
                let x = unit_vector(&mut rng, dim);
                let q = unit_vector(&mut rng, dim);
                let mut row = vec![Line::ZERO; lines];
                let code = encode_row(&x, &mut row);
                let query = QueryCode::new(&q, lines);
                let mut raw = [0];
                Kernels::best().scan_i8(&row, &query.codes, &mut raw);
                let approx = raw[0] as f32 * code.scale * query.scale;
                let exact = dot_f32_scalar(&x, &q);
                let bound = error_bound(&code, &query, slack);
                assert!((approx - exact).abs() <= bound, "dim {dim}: {approx} vs {exact}, bound {bound}");
                assert!(bound < 0.05, "dim {dim}: bound {bound} too loose to be useful");
            }
        }
    }

    #[test]
    fn zero_vectors_code_to_zero() {
        let mut row = vec![Line([5; LINE]); 1];
        let code = encode_row(&[0.0; 10], &mut row);
        assert_eq!((code.scale, code.coded_norm, code.residual_norm), (0.0, 0.0, 0.0));
        assert!(row[0].0.iter().all(|&c| c == 0));
    }
}
