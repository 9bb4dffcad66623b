//! Seeded synthetic embeddings for the index's tests and for `index-bench`, so both
//! measure the same kind of data without a `rand` dependency.
//!
//! Real embeddings are not uniform on the sphere: texts on one topic sit in a cone
//! around a direction. [`Clustered`] draws each vector as a random cluster center plus
//! isotropic Gaussian noise, normalized. The noise is full-dimensional, which is
//! harder for HNSW than real embeddings with their lower intrinsic dimension, so its
//! recall here is, if anything, pessimistic.

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
    rng: Rng,
}

impl Clustered {
    pub fn new(seed: u64, dim: usize, clusters: usize, spread: f32) -> Clustered {
        let mut rng = Rng::new(seed);
        let centers = (0..clusters.max(1)).map(|_| unit_vector(&mut rng, dim)).collect();
        Clustered { dim, centers, spread, rng }
    }

    /// The next vector, appended to `out` (to fill one big row-major block cheaply).
    pub fn push_next(&mut self, out: &mut Vec<f32>) {
        let center = self.rng.below(self.centers.len() as u64) as usize;
        let start = out.len();
        let sigma = self.spread / (self.dim as f32).sqrt();
        for i in 0..self.dim {
            out.push(self.centers[center][i] + sigma * self.rng.normal());
        }
        normalize(&mut out[start..]);
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
