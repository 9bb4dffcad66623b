//! The two inner loops of the index, each with an AVX-512, an AVX2+FMA and a portable
//! scalar version, chosen once at run time from what the CPU reports:
//!
//! - [`Kernels::dot_f32`]: the exact score of one stored vector.
//! - [`Kernels::scan_i8`]: approximate scores of many int8 rows against one query,
//!   the memory-bound part of exact search.
//!
//! The scalar versions are correct on any CPU and are what the SIMD ones are tested
//! against. The int8 scan computes exact integer sums, so all three versions agree bit
//! for bit; the f32 dot only agrees to rounding, since it adds in a different order.

use std::sync::OnceLock;

/// Bytes in one line of an int8 row. Rows are padded with zeros to a whole number of
/// lines so the SIMD loops need no tail (a line is two AVX-512 steps of 32 codes, four
/// AVX2 steps of 16), and each row starts on a cache line.
pub const LINE: usize = 64;

/// One cache-line-aligned run of int8 codes; a row of codes is `stride / LINE` of them.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Line(pub [i8; LINE]);

impl Line {
    pub const ZERO: Line = Line([0; LINE]);
}

/// The instruction sets the kernels can use, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Avx512,
    Avx2Fma,
    Scalar,
}

impl Isa {
    /// The best level this CPU supports, detected once per process.
    pub fn detect() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                    return Isa::Avx512;
                }
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    return Isa::Avx2Fma;
                }
            }
            Isa::Scalar
        })
    }

    /// Whether this CPU can run kernels of this level (tests use it to try every level
    /// the machine has).
    #[cfg(test)]
    pub fn supported(self) -> bool {
        matches!(
            (self, Isa::detect()),
            (Isa::Scalar, _) | (Isa::Avx2Fma, Isa::Avx512 | Isa::Avx2Fma) | (Isa::Avx512, Isa::Avx512)
        )
    }
}

/// The kernels of one [`Isa`] level. Only constructible for a level the CPU supports,
/// which is what makes calling the `target_feature` functions inside sound.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    isa: Isa,
}

impl Kernels {
    /// The best kernels for this CPU.
    pub fn best() -> Kernels {
        Kernels { isa: Isa::detect() }
    }

    /// The kernels of `isa`, or `None` if this CPU lacks it.
    #[cfg(test)]
    pub fn of(isa: Isa) -> Option<Kernels> {
        isa.supported().then_some(Kernels { isa })
    }

    pub fn isa(self) -> Isa {
        self.isa
    }

    /// The dot product of two equally long f32 slices.
    pub fn dot_f32(self, a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len(), "dot of slices of different lengths");
        match self.isa {
            // SAFETY: `Kernels` of a SIMD level only exist when the CPU supports it.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { x86::dot_f32_avx512(a, b) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => unsafe { x86::dot_f32_avx2(a, b) },
            _ => dot_f32_scalar(a, b),
        }
    }

    /// The integer dot product of two equally long i8 slices, as a plain function of
    /// this level: the HNSW graph calls it through a pointer millions of times, so
    /// the level is chosen once, not per call.
    pub fn dot_i8_fn(self) -> fn(&[i8], &[i8]) -> i32 {
        match self.isa {
            // SAFETY (both): the function is only handed out on a CPU that has the
            // level, as `Kernels` of that level exist only there.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => |a, b| unsafe { x86::dot_i8_avx512(a, b) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => |a, b| unsafe { x86::dot_i8_avx2(a, b) },
            _ => dot_i8_scalar,
        }
    }

    /// Writes into `out[r]` the integer dot product of row `r` of `rows` with `query`.
    /// `rows` holds `out.len()` rows of `query.len() / LINE` lines each; `query` holds
    /// the query's codes widened to i16, zero-padded like the rows.
    pub fn scan_i8(self, rows: &[Line], query: &[i16], out: &mut [i32]) {
        check_scan(rows, query, out);
        match self.isa {
            // SAFETY: as in `dot_f32`; the lengths were checked above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { x86::scan_i8_avx512(rows, query, out) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => unsafe { x86::scan_i8_avx2(rows, query, out) },
            _ => scan_i8_scalar(rows, query, out),
        }
    }
}

impl Kernels {
    /// [`Kernels::scan_i8`] for several queries over the same rows: `outs[q]` gets
    /// query `q`'s products. With AVX-512, up to [`GROUP`] queries share each row's
    /// loads and widening, and their sums run side by side (one query's sums form a
    /// chain the core waits on; four are independent).
    pub fn scan_i8_group(self, rows: &[Line], queries: &[&[i16]], outs: &mut [&mut [i32]]) {
        assert_eq!(queries.len(), outs.len(), "one output a query");
        for (query, out) in queries.iter().zip(outs.iter()) {
            check_scan(rows, query, out);
        }
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                for (queries, outs) in queries.chunks(GROUP).zip(outs.chunks_mut(GROUP)) {
                    // SAFETY: as in `dot_f32`; every length was checked above.
                    unsafe {
                        match (queries, outs) {
                            ([a, b, c, d], [oa, ob, oc, od]) => x86::scan_i8_group_avx512(
                                rows,
                                [*a, *b, *c, *d],
                                [&mut **oa, &mut **ob, &mut **oc, &mut **od],
                            ),
                            ([a, b, c], [oa, ob, oc]) => {
                                x86::scan_i8_group_avx512(rows, [*a, *b, *c], [&mut **oa, &mut **ob, &mut **oc])
                            }
                            ([a, b], [oa, ob]) => x86::scan_i8_group_avx512(rows, [*a, *b], [&mut **oa, &mut **ob]),
                            (queries, outs) => {
                                for (query, out) in queries.iter().zip(outs.iter_mut()) {
                                    x86::scan_i8_avx512(rows, query, out);
                                }
                            }
                        }
                    }
                }
            }
            _ => {
                for (query, out) in queries.iter().zip(outs.iter_mut()) {
                    self.scan_i8(rows, query, out);
                }
            }
        }
    }
}

/// Queries [`Kernels::scan_i8_group`] scans together at most.
pub const GROUP: usize = 4;

fn check_scan(rows: &[Line], query: &[i16], out: &[i32]) {
    assert!(!query.is_empty() && query.len().is_multiple_of(LINE), "query not padded to whole lines");
    assert_eq!(rows.len() * LINE, out.len() * query.len(), "rows and outputs disagree");
}

/// Portable f32 dot product. Eight independent sums let the compiler keep them in
/// registers (and vectorize where it may) without reassociating float additions.
pub fn dot_f32_scalar(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of slices of different lengths");
    let mut sums = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// Portable int8 dot product.
pub fn dot_i8_scalar(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum()
}

/// Portable int8 scan; the reference the SIMD scans are tested against.
pub fn scan_i8_scalar(rows: &[Line], query: &[i16], out: &mut [i32]) {
    check_scan(rows, query, out);
    let lines_per_row = query.len() / LINE;
    for (row, score) in rows.chunks_exact(lines_per_row).zip(out.iter_mut()) {
        let codes = row.iter().flat_map(|line| line.0.iter());
        *score = codes.zip(query).map(|(&c, &q)| i32::from(c) * i32::from(q)).sum();
    }
}

// Overflow: a product is at most 127 * 127 and a SIMD lane adds `2 * stride / lanes`
// of them, so the i32 sums cannot overflow below about 130_000 dimensions;
// `VectorIndex::new` caps the dimension far below that.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{LINE, Line};

    #[target_feature(enable = "avx512f")]
    pub fn dot_f32_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load reads 16 floats at an offset at most `n - 16`.
        unsafe {
            while i + 64 <= n {
                for (j, sum) in acc.iter_mut().enumerate() {
                    let off = i + 16 * j;
                    *sum = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(off)), _mm512_loadu_ps(pb.add(off)), *sum);
                }
                i += 64;
            }
            while i + 16 <= n {
                acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc[0]);
                i += 16;
            }
        }
        let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(sum) + super::dot_f32_scalar(&a[i..n], &b[i..n])
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load reads 8 floats at an offset at most `n - 8`.
        unsafe {
            while i + 32 <= n {
                for (j, sum) in acc.iter_mut().enumerate() {
                    let off = i + 8 * j;
                    *sum = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(off)), _mm256_loadu_ps(pb.add(off)), *sum);
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
                i += 8;
            }
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
        let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
        let one = _mm_add_ss(quarter, _mm_movehdup_ps(quarter));
        _mm_cvtss_f32(one) + super::dot_f32_scalar(&a[i..n], &b[i..n])
    }

    /// 32 codes a step, sign-extended to i16 and summed pairwise to i32 (`vpmaddwd`).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub fn dot_i8_avx512(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = _mm512_setzero_si512();
        let mut i = 0;
        // SAFETY: every load reads 32 codes at an offset at most `n - 32`.
        unsafe {
            while i + 32 <= n {
                let x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(pa.add(i).cast()));
                let y = _mm512_cvtepi8_epi16(_mm256_loadu_si256(pb.add(i).cast()));
                acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x, y));
                i += 32;
            }
        }
        _mm512_reduce_add_epi32(acc) + super::dot_i8_scalar(&a[i..n], &b[i..n])
    }

    #[target_feature(enable = "avx2")]
    pub fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        // SAFETY: every load reads 16 codes at an offset at most `n - 16`.
        unsafe {
            while i + 16 <= n {
                let x = _mm256_cvtepi8_epi16(_mm_loadu_si128(pa.add(i).cast()));
                let y = _mm256_cvtepi8_epi16(_mm_loadu_si128(pb.add(i).cast()));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x, y));
                i += 16;
            }
        }
        let half = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
        let quarter = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
        let one = _mm_add_epi32(quarter, _mm_shuffle_epi32::<0b01>(quarter));
        _mm_cvtsi128_si32(one) + super::dot_i8_scalar(&a[i..n], &b[i..n])
    }

    /// Per line: two steps of 32 codes sign-extended to i16, multiplied with the query
    /// and summed pairwise to i32 (`vpmaddwd`). Without VNNI this is still far below
    /// what memory delivers, so the loop stays this simple.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub fn scan_i8_avx512(rows: &[Line], query: &[i16], out: &mut [i32]) {
        let lines_per_row = query.len() / LINE;
        let q = query.as_ptr();
        for (row, score) in rows.chunks_exact(lines_per_row).zip(out.iter_mut()) {
            let (mut lo, mut hi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for (l, line) in row.iter().enumerate() {
                let codes = line.0.as_ptr();
                // SAFETY: a line is 64 codes and the query has 64 i16 per line.
                unsafe {
                    let c0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(codes.cast()));
                    let c1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(codes.add(32).cast()));
                    let q0 = _mm512_loadu_si512(q.add(l * LINE).cast());
                    let q1 = _mm512_loadu_si512(q.add(l * LINE + 32).cast());
                    lo = _mm512_add_epi32(lo, _mm512_madd_epi16(c0, q0));
                    hi = _mm512_add_epi32(hi, _mm512_madd_epi16(c1, q1));
                }
            }
            *score = _mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi));
        }
    }

    /// [`scan_i8_avx512`] for `Q` queries at once: each line of a row is loaded and
    /// widened once for all of them, and their sums are independent chains.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub fn scan_i8_group_avx512<const Q: usize>(rows: &[Line], queries: [&[i16]; Q], mut outs: [&mut [i32]; Q]) {
        let lines_per_row = queries[0].len() / LINE;
        let q = queries.map(|query| query.as_ptr());
        for (r, row) in rows.chunks_exact(lines_per_row).enumerate() {
            let mut sums = [_mm512_setzero_si512(); Q];
            for (l, line) in row.iter().enumerate() {
                let codes = line.0.as_ptr();
                // SAFETY: a line is 64 codes and every query has 64 i16 per line.
                unsafe {
                    let c0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(codes.cast()));
                    let c1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(codes.add(32).cast()));
                    for (sum, q) in sums.iter_mut().zip(q) {
                        let q0 = _mm512_loadu_si512(q.add(l * LINE).cast());
                        let q1 = _mm512_loadu_si512(q.add(l * LINE + 32).cast());
                        let line_sum = _mm512_add_epi32(_mm512_madd_epi16(c0, q0), _mm512_madd_epi16(c1, q1));
                        *sum = _mm512_add_epi32(*sum, line_sum);
                    }
                }
            }
            for (out, sum) in outs.iter_mut().zip(sums) {
                out[r] = _mm512_reduce_add_epi32(sum);
            }
        }
    }

    #[target_feature(enable = "avx2")]
    pub fn scan_i8_avx2(rows: &[Line], query: &[i16], out: &mut [i32]) {
        let lines_per_row = query.len() / LINE;
        let q = query.as_ptr();
        for (row, score) in rows.chunks_exact(lines_per_row).zip(out.iter_mut()) {
            let mut acc = [_mm256_setzero_si256(); 4];
            for (l, line) in row.iter().enumerate() {
                let codes = line.0.as_ptr();
                for (j, sum) in acc.iter_mut().enumerate() {
                    // SAFETY: a line is 4 steps of 16 codes, matched by 16 query i16 each.
                    unsafe {
                        let c = _mm256_cvtepi8_epi16(_mm_loadu_si128(codes.add(16 * j).cast()));
                        let qv = _mm256_loadu_si256(q.add(l * LINE + 16 * j).cast());
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(c, qv));
                    }
                }
            }
            let sum = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
            let half = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256::<1>(sum));
            let quarter = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
            let one = _mm_add_epi32(quarter, _mm_shuffle_epi32::<0b01>(quarter));
            *score = _mm_cvtsi128_si32(one);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::synthetic::Rng;

    fn simd_levels() -> Vec<Kernels> {
        [Isa::Avx512, Isa::Avx2Fma].into_iter().filter_map(Kernels::of).collect()
    }

    #[test]
    fn simd_dot_matches_scalar_at_every_length() {
        let mut rng = Rng::new(7);
        for len in 0..300 {
            let a: Vec<f32> = (0..len).map(|_| rng.normal()).collect();
            let b: Vec<f32> = (0..len).map(|_| rng.normal()).collect();
            let expected = dot_f32_scalar(&a, &b);
            let magnitude: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            for kernels in simd_levels() {
                let got = kernels.dot_f32(&a, &b);
                assert!(
                    (got - expected).abs() <= 1e-5 * magnitude.max(1.0),
                    "{:?} len {len}: {got} vs {expected}",
                    kernels.isa()
                );
            }
        }
    }

    #[test]
    fn simd_i8_dot_matches_scalar_exactly_at_every_length() {
        let mut rng = Rng::new(13);
        for len in 0..200 {
            let a: Vec<i8> = (0..len).map(|_| (rng.below(255) as i32 - 127) as i8).collect();
            let b: Vec<i8> = (0..len).map(|_| (rng.below(255) as i32 - 127) as i8).collect();
            let expected = dot_i8_scalar(&a, &b);
            for kernels in simd_levels() {
                assert_eq!(kernels.dot_i8_fn()(&a, &b), expected, "{:?} len {len}", kernels.isa());
            }
        }
        let extremes = vec![-127i8; 6144];
        for kernels in simd_levels() {
            assert_eq!(kernels.dot_i8_fn()(&extremes, &extremes), 127 * 127 * 6144, "{:?}", kernels.isa());
        }
    }

    #[test]
    fn group_scan_matches_one_query_scans_exactly_for_any_count() {
        let mut rng = Rng::new(17);
        let (lines_per_row, rows_count) = (6, 41);
        let rows: Vec<Line> = (0..rows_count * lines_per_row)
            .map(|_| Line(std::array::from_fn(|_| (rng.below(255) as i32 - 127) as i8)))
            .collect();
        for count in 1..=2 * GROUP + 1 {
            let queries: Vec<Vec<i16>> =
                (0..count).map(|_| (0..lines_per_row * LINE).map(|_| rng.below(511) as i16 - 255).collect()).collect();
            let query_refs: Vec<&[i16]> = queries.iter().map(Vec::as_slice).collect();
            let expected: Vec<Vec<i32>> = queries
                .iter()
                .map(|query| {
                    let mut out = vec![0; rows_count];
                    scan_i8_scalar(&rows, query, &mut out);
                    out
                })
                .collect();
            for kernels in simd_levels().into_iter().chain([Kernels { isa: Isa::Scalar }]) {
                let mut got = vec![vec![0; rows_count]; count];
                let mut outs: Vec<&mut [i32]> = got.iter_mut().map(Vec::as_mut_slice).collect();
                kernels.scan_i8_group(&rows, &query_refs, &mut outs);
                assert_eq!(got, expected, "{:?}, {count} queries", kernels.isa());
            }
        }
    }

    #[test]
    fn simd_scan_matches_scalar_exactly() {
        let mut rng = Rng::new(11);
        for lines_per_row in 1..4 {
            let rows_count = 37;
            let rows: Vec<Line> = (0..rows_count * lines_per_row)
                .map(|_| Line(std::array::from_fn(|_| (rng.below(255) as i32 - 127) as i8)))
                .collect();
            let query: Vec<i16> = (0..lines_per_row * LINE).map(|_| rng.below(255) as i16 - 127).collect();
            let mut expected = vec![0; rows_count];
            scan_i8_scalar(&rows, &query, &mut expected);
            let naive: Vec<i32> = (0..rows_count)
                .map(|r| {
                    let codes = rows[r * lines_per_row..(r + 1) * lines_per_row].iter().flat_map(|l| l.0);
                    codes.zip(&query).map(|(c, &q)| i32::from(c) * i32::from(q)).sum()
                })
                .collect();
            assert_eq!(expected, naive);
            for kernels in simd_levels() {
                let mut got = vec![0; rows_count];
                kernels.scan_i8(&rows, &query, &mut got);
                assert_eq!(got, expected, "{:?}", kernels.isa());
            }
        }
    }

    #[test]
    fn extreme_codes_do_not_overflow() {
        let lines_per_row = 96; // 6144 dimensions, all at the extremes
        let rows = vec![Line([-127; LINE]); lines_per_row];
        let query = vec![-127i16; lines_per_row * LINE];
        let expected = 127 * 127 * (lines_per_row * LINE) as i32;
        for kernels in simd_levels().into_iter().chain([Kernels { isa: Isa::Scalar }]) {
            let mut got = [0];
            kernels.scan_i8(&rows, &query, &mut got);
            assert_eq!(got[0], expected, "{:?}", kernels.isa());
        }
    }
}
