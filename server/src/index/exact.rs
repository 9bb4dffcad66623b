//! Exact search: every stored vector is scored, and the result is the true top k.
//!
//! Scanning the f32 vectors is bound by memory bandwidth: 100k x 384 floats are
//! 154 MB, 6.9 ms per scan with AVX-512 on the 2-core dev machine. The scan reads a
//! copy with fewer bytes instead. Measured there at 100k / 1M rows: f16 (F16C) 2.3 /
//! 25 ms, int8 with one scale per row 1.0 / 12.6 ms. Both meet the 5 ms goal at 100k;
//! int8 does with twice the margin, half the memory, and leaves twice the bandwidth to
//! concurrent searches, so int8 it is. Its scores are approximate, so search runs in
//! two steps:
//!
//! 1. Scan the codes, keep the best candidates by approximate score, and rescore
//!    them with the f32 vectors.
//! 2. Every row has a bound on its quantization error (see [`super::quantize`]). If
//!    a row left out could still reach the k-th exact score, rescore every row whose
//!    bound allows it. This makes the result exact rather than probably exact; with
//!    the candidate count below it almost never runs on embedding-like data, but it
//!    does on near-duplicates, which the approximate scores cannot rank.
//!
//! Filters are evaluated lazily, only for rows whose approximate score would enter
//! the candidates, so an expensive metadata filter costs little.
//!
//! Several unfiltered queries can be searched in one scan ([`ExactIndex::search_many`]):
//! each block of codes is read from memory once and from cache for the other queries,
//! and the kernel runs four queries' sums side by side. On the 2-core dev VM (AVX-512),
//! 16 queries at once cost 1.4 ms each at 100k rows against 5.6 ms one by one, and
//! 0.25 against 0.34 ms at 11k rows (`embedwire-bench index --sizes 11000,100000`).

use std::thread;

use super::kernels::{Kernels, Line};
use super::quantize::{self, QueryCode, RowCode};
use super::rows::{Placed, Rows};
use super::top_k::TopK;
use super::{ChunkId, Filter};

/// Candidates rescored in step 1: `k` times this ...
const CANDIDATES_PER_HIT: usize = 16;
/// ... and at least this many. Measured on `index-bench` data with k = 10: with 40
/// candidates step 2 ran for 7% of queries at 100k rows and nearly all at 1M; with
/// 80, for none and 16%; with 160, for none at either. Rescoring 160 rows reads
/// 240 KB, tens of microseconds.
const MIN_CANDIDATES: usize = 128;
/// Below this many rows per thread a split scan loses more to thread start-up than
/// it gains.
const MIN_ROWS_PER_SCAN_THREAD: usize = 16_384;

/// Codes scanned for every query of a [`ExactIndex::search_many`] before the next
/// block: well inside any core's L2 (512 KiB on the smallest here), 341 rows of 384
/// dimensions.
const SCAN_BLOCK_BYTES: usize = 128 << 10;

/// One query of [`ExactIndex::search_many`]: the `k` best hits scoring at least
/// `min_score`.
#[derive(Debug, Clone, Copy)]
pub struct ScanQuery<'a> {
    pub vector: &'a [f32],
    pub k: usize,
    pub min_score: Option<f32>,
}

/// Vectors in f32 for results and in int8 for the scan, in the same row order.
#[derive(Clone)]
pub struct ExactIndex {
    rows: Rows,
    /// The int8 codes, `lines` per row.
    codes: Vec<Line>,
    /// Scale and error bounds of each row's codes.
    row_codes: Vec<RowCode>,
    lines: usize,
    /// The largest `coded_norm` and `residual_norm` of any row inserted so far.
    max_coded_norm: f32,
    max_residual_norm: f32,
    kernels: Kernels,
    /// Threads one search's scan may use (1 = the caller's thread only).
    scan_threads: usize,
}

impl std::fmt::Debug for ExactIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactIndex")
            .field("len", &self.rows.len())
            .field("dim", &self.rows.dim())
            .field("isa", &self.kernels.isa())
            .field("scan_threads", &self.scan_threads)
            .finish_non_exhaustive()
    }
}

impl ExactIndex {
    pub fn new(dim: usize, scan_threads: usize) -> ExactIndex {
        ExactIndex {
            rows: Rows::new(dim),
            codes: Vec::new(),
            row_codes: Vec::new(),
            lines: quantize::lines_per_row(dim),
            max_coded_norm: 0.0,
            max_residual_norm: 0.0,
            kernels: Kernels::best(),
            scan_threads: scan_threads.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn get(&self, id: ChunkId) -> Option<&[f32]> {
        self.rows.get(id)
    }

    pub fn reserve(&mut self, additional: usize) {
        self.rows.reserve(additional);
        self.codes.reserve(additional * self.lines);
        self.row_codes.reserve(additional);
    }

    pub fn insert(&mut self, id: ChunkId, vector: &[f32]) {
        let row = match self.rows.insert(id, vector) {
            Placed::Replaced(row) => row,
            Placed::Appended(row) => {
                self.codes.resize(self.codes.len() + self.lines, Line::ZERO);
                self.row_codes.push(RowCode { scale: 0.0, coded_norm: 0.0, residual_norm: 0.0 });
                row
            }
        };
        let lines = &mut self.codes[row * self.lines..(row + 1) * self.lines];
        let row_code = quantize::encode_row(vector, lines);
        self.max_coded_norm = self.max_coded_norm.max(row_code.coded_norm);
        self.max_residual_norm = self.max_residual_norm.max(row_code.residual_norm);
        self.row_codes[row] = row_code;
    }

    pub fn remove(&mut self, id: ChunkId) -> bool {
        let Some(removed) = self.rows.remove(id) else { return false };
        // Mirror `Rows::remove`: the last row's codes move into the hole.
        let last = self.row_codes.len() - 1;
        if removed.moved_last {
            self.codes.copy_within(last * self.lines..(last + 1) * self.lines, removed.row * self.lines);
        }
        self.codes.truncate(last * self.lines);
        self.row_codes.swap_remove(removed.row);
        true
    }

    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        min_score: Option<f32>,
        filter: Option<&Filter>,
    ) -> Vec<(ChunkId, f32)> {
        let n = self.rows.len();
        if k == 0 || n == 0 {
            return Vec::new();
        }
        let code = QueryCode::new(query, self.lines);
        let mut dots = vec![0i32; n];
        self.scan(&[&code.codes], &mut [&mut dots]);
        self.select(&ScanQuery { vector: query, k, min_score }, filter, &code, &dots)
    }

    /// [`ExactIndex::search`] for several unfiltered queries at once, in their order.
    /// The scan reads the codes once for all of them, a block that stays in cache at a
    /// time, where one search after the other would stream every code from memory
    /// again for each query (what bounds a large index's scan), and the kernel sums
    /// four queries side by side.
    pub fn search_many(&self, queries: &[ScanQuery<'_>]) -> Vec<Vec<(ChunkId, f32)>> {
        let n = self.rows.len();
        if n == 0 {
            return queries.iter().map(|_| Vec::new()).collect();
        }
        let codes: Vec<QueryCode> = queries.iter().map(|q| QueryCode::new(q.vector, self.lines)).collect();
        let mut dots: Vec<Vec<i32>> = queries.iter().map(|_| vec![0i32; n]).collect();
        let query_codes: Vec<&[i16]> = codes.iter().map(|code| code.codes.as_slice()).collect();
        let mut outs: Vec<&mut [i32]> = dots.iter_mut().map(Vec::as_mut_slice).collect();
        self.scan(&query_codes, &mut outs);
        queries
            .iter()
            .zip(&codes)
            .zip(&dots)
            .map(|((query, code), dots)| if query.k == 0 { Vec::new() } else { self.select(query, None, code, dots) })
            .collect()
    }

    /// Steps 1 and 2 (see the module doc) on the scan's integer dot products `dots`.
    fn select(
        &self,
        query: &ScanQuery<'_>,
        filter: Option<&Filter>,
        code: &QueryCode,
        dots: &[i32],
    ) -> Vec<(ChunkId, f32)> {
        let (k, n) = (query.k, self.rows.len());
        let slack = quantize::rounding_slack(self.rows.dim());
        let approx = |row: usize| dots[row] as f32 * self.row_codes[row].scale * code.scale;
        // The most a row's exact score can be.
        let upper = |row: usize| approx(row) + quantize::error_bound(&self.row_codes[row], code, slack);
        let accepts = |row: usize| filter.is_none_or(|filter| filter(self.rows.id(row)));
        let exact = |row: usize| self.kernels.dot_f32(self.rows.vector(row), query.vector);
        let floor = query.min_score.unwrap_or(f32::NEG_INFINITY);

        // Step 1: the best candidates by approximate score, then their exact scores.
        let mut candidates = TopK::<u32>::new(k.saturating_mul(CANDIDATES_PER_HIT).max(MIN_CANDIDATES));
        let mut admission = f32::NEG_INFINITY;
        for row in 0..n {
            let estimate = approx(row);
            // The hot loop: nearly every row stops here, one compare after the scan.
            if estimate < admission {
                continue;
            }
            if upper(row) < floor || !accepts(row) {
                continue;
            }
            candidates.push(estimate, row as u32);
            admission = candidates.worst_score().unwrap_or(f32::NEG_INFINITY);
        }
        // Every row left out (and passing floor and filter) estimated at most
        // `admission`: rejected rows below it at the time, evicted ones below what
        // replaced them, and it only rises.
        let left_out = candidates.is_full().then_some(admission);
        let mut top = TopK::<ChunkId>::new(k);
        for (row, _) in candidates.into_sorted() {
            let row = row as usize;
            let score = exact(row);
            if score >= floor {
                top.push(score, self.rows.id(row));
            }
        }

        // Step 2, only when step 1 cannot vouch for its answer: could a row left out
        // reach the k-th exact score (or, short of k hits, the floor)?
        let cutoff = top.worst_score().unwrap_or(f32::NEG_INFINITY).max(floor);
        let bound = self.largest_error_bound(code, slack);
        if left_out.is_some_and(|estimate| estimate + bound >= cutoff) {
            top = TopK::new(k);
            for row in 0..n {
                if upper(row) >= cutoff && accepts(row) {
                    let score = exact(row);
                    if score >= floor {
                        top.push(score, self.rows.id(row));
                    }
                }
            }
        }
        top.into_sorted()
    }

    /// An error bound that holds for every row: from the largest norms any row has had
    /// (kept as running maxima, which removals leave valid if a little loose).
    fn largest_error_bound(&self, code: &QueryCode, slack: f32) -> f32 {
        let worst = RowCode { scale: 0.0, coded_norm: self.max_coded_norm, residual_norm: self.max_residual_norm };
        quantize::error_bound(&worst, code, slack)
    }

    /// Integer dot products of every row's codes with each query's: `dots[q]` gets
    /// query `q`'s. Split across `scan_threads` threads by rows when there are enough
    /// rows to pay for them.
    fn scan(&self, queries: &[&[i16]], dots: &mut [&mut [i32]]) {
        let n = self.rows.len();
        let threads = self.scan_threads.min(n / MIN_ROWS_PER_SCAN_THREAD).max(1);
        let rows_per_thread = n.div_ceil(threads);
        // Each thread's share of every query's products.
        let mut shares: Vec<Vec<&mut [i32]>> = (0..threads).map(|_| Vec::with_capacity(queries.len())).collect();
        for query_dots in dots.iter_mut() {
            for (share, part) in shares.iter_mut().zip(query_dots.chunks_mut(rows_per_thread)) {
                share.push(part);
            }
        }
        let mut parts = self.codes.chunks(rows_per_thread * self.lines).zip(shares);
        let (own_codes, mut own_dots) = parts.next().expect("at least one row");
        if threads == 1 {
            return self.scan_blocks(own_codes, queries, &mut own_dots);
        }
        thread::scope(|scope| {
            for (codes, mut dots) in parts {
                scope.spawn(move || self.scan_blocks(codes, queries, &mut dots));
            }
            // The searching thread scans a share too rather than wait idle.
            self.scan_blocks(own_codes, queries, &mut own_dots);
        });
    }

    /// Every query over `codes`, one block of rows at a time: the block is read from
    /// memory for the first query and from cache for the others.
    fn scan_blocks(&self, codes: &[Line], queries: &[&[i16]], dots: &mut [&mut [i32]]) {
        let rows = codes.len() / self.lines;
        let block_rows = (SCAN_BLOCK_BYTES / (self.lines * std::mem::size_of::<Line>())).max(1);
        for start in (0..rows).step_by(block_rows) {
            let end = (start + block_rows).min(rows);
            let block = &codes[start * self.lines..end * self.lines];
            let mut outs: Vec<&mut [i32]> = dots.iter_mut().map(|query_dots| &mut query_dots[start..end]).collect();
            self.kernels.scan_i8_group(block, queries, &mut outs);
        }
    }
}
