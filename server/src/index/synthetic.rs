//! Seeded synthetic embeddings for the index's tests and for `index-bench`, so both
//! measure the same kind of data without a `rand` dependency.
//!
//! Real embeddings are not uniform on the sphere: texts on one topic sit in a cone
//! around a direction, and within a topic they vary along far fewer directions than
//! the model has dimensions (estimates for sentence embeddings are tens, not
//! hundreds). [`Clustered`] draws each vector as a random cluster center plus
//! Gaussian noise, normalized. The noise is either isotropic (full-rank: the
//! hardest case for graph indexes, where neighbours within a cluster are as
//! unstructured as random points in `dim` dimensions) or mostly confined to a few
//! directions of its own per cluster ([`Clustered::with_noise_rank`]).

/// SplitMix64: tiny, fast, and good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (bound > 0; the modulo bias is irrelevant here).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }

    /// Uniform in `(0, 1]`.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller; the second value is thrown away for simplicity).
    pub fn normal(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
}

/// A random unit vector, uniform on the sphere.
pub fn unit_vector(rng: &mut Rng, dim: usize) -> Vec<f32> {
    let mut vector: Vec<f32> = (0..dim).map(|_| rng.normal()).collect();
    normalize(&mut vector);
    vector
}

/// Unit vectors scattered around a fixed set of random centers.
#[derive(Debug, Clone)]
pub struct Clustered {
    dim: usize,
    centers: Vec<Vec<f32>>,
    /// Norm of the noise added to a (unit) center before normalizing: at 0.9 a vector
    /// has cosine about 0.75 with its center, and two of one cluster about 0.55.
    spread: f32,
    /// Per cluster, the directions its low-rank noise spans (empty: isotropic noise).
    directions: Vec<Vec<Vec<f32>>>,
    rng: Rng,
}

/// The share of the noise's variance that stays isotropic in the low-rank model, so
/// no two vectors of a cluster are exactly coplanar.
const ISOTROPIC_SHARE: f32 = 0.1;

impl Clustered {
    /// Isotropic noise around `clusters` random centers.
    pub fn new(seed: u64, dim: usize, clusters: usize, spread: f32) -> Clustered {
        Clustered::with_noise_rank(seed, dim, clusters, spread, 0)
    }

    /// Noise mostly (90% of its variance) along `rank` random directions of each
    /// cluster's own; `rank` 0 is isotropic noise.
    pub fn with_noise_rank(seed: u64, dim: usize, clusters: usize, spread: f32, rank: usize) -> Clustered {
        let mut rng = Rng::new(seed);
        let clusters = clusters.max(1);
        let centers = (0..clusters).map(|_| unit_vector(&mut rng, dim)).collect();
        let directions = if rank == 0 {
            Vec::new()
        } else {
            (0..clusters).map(|_| (0..rank).map(|_| unit_vector(&mut rng, dim)).collect()).collect()
        };
        Clustered { dim, centers, spread, directions, rng }
    }

    /// The next vector, appended to `out` (to fill one big row-major block cheaply).
    pub fn push_next(&mut self, out: &mut Vec<f32>) {
        let cluster = self.rng.below(self.centers.len() as u64) as usize;
        let start = out.len();
        out.extend_from_slice(&self.centers[cluster]);
        let row = &mut out[start..];
        // Each part adds noise of expected squared norm `spread^2 * share`.
        let isotropic_share = if self.directions.is_empty() { 1.0 } else { ISOTROPIC_SHARE };
        let sigma = self.spread * (isotropic_share / self.dim as f32).sqrt();
        row.iter_mut().for_each(|value| *value += sigma * self.rng.normal());
        if let Some(directions) = self.directions.get(cluster) {
            let sigma = self.spread * ((1.0 - ISOTROPIC_SHARE) / directions.len() as f32).sqrt();
            for direction in directions {
                let weight = sigma * self.rng.normal();
                row.iter_mut().zip(direction).for_each(|(value, d)| *value += weight * d);
            }
        }
        normalize(row);
    }

    pub fn next_vector(&mut self) -> Vec<f32> {
        let mut vector = Vec::with_capacity(self.dim);
        self.push_next(&mut vector);
        vector
    }

    /// `count` vectors, row-major.
    pub fn rows(&mut self, count: usize) -> Vec<f32> {
        let mut rows = Vec::with_capacity(count * self.dim);
        for _ in 0..count {
            self.push_next(&mut rows);
        }
        rows
    }
}
