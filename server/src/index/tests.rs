//! Both kinds against a naive f32 brute force over the same vectors.

use std::collections::{BTreeMap, HashSet};

use super::synthetic::{Clustered, Rng, normalize, unit_vector};
use super::*;

/// What the index should hold: id -> vector, kept alongside it by the tests.
type Truth = BTreeMap<ChunkId, Vec<f32>>;

fn naive_dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The true top k by sequential f32 dot products.
fn brute_force(
    truth: &Truth,
    query: &[f32],
    k: usize,
    min_score: Option<f32>,
    filter: Option<&Filter>,
) -> Vec<(ChunkId, f32)> {
    let mut all: Vec<(ChunkId, f32)> = truth
        .iter()
        .filter(|(id, _)| filter.is_none_or(|f| f(**id)))
        .map(|(&id, v)| (id, naive_dot(v, query)))
        .filter(|&(_, score)| min_score.is_none_or(|m| score >= m))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// `got` is a correct top k: distinct ids, each with its true score (to 1e-6), and
/// the score sequence equals the brute force one (to 1e-6). Ids may differ from
/// the brute force only among scores that tie within rounding.
fn assert_exact(
    got: &[(ChunkId, f32)],
    truth: &Truth,
    query: &[f32],
    k: usize,
    min_score: Option<f32>,
    filter: Option<&Filter>,
) {
    let expected = brute_force(truth, query, k, min_score, filter);
    assert_eq!(got.len(), expected.len(), "got {got:?}\nexpected {expected:?}");
    let distinct: HashSet<ChunkId> = got.iter().map(|h| h.0).collect();
    assert_eq!(distinct.len(), got.len(), "duplicate ids in {got:?}");
    for (i, (&(id, score), &(_, expected_score))) in got.iter().zip(&expected).enumerate() {
        assert!((score - expected_score).abs() <= 1e-6, "rank {i}: score {score} vs {expected_score}");
        let true_score = naive_dot(&truth[&id], query);
        assert!((score - true_score).abs() <= 1e-6, "id {id}: score {score}, true {true_score}");
        assert!(filter.is_none_or(|f| f(id)), "id {id} fails the filter");
        assert!(i == 0 || got[i - 1].1 >= score, "not sorted: {got:?}");
    }
}

fn exact(dim: usize) -> VectorIndex {
    VectorIndex::new(IndexKind::Exact, dim, IndexParams::default()).unwrap()
}

fn fill(index: &mut VectorIndex, truth: &mut Truth, vectors: impl IntoIterator<Item = Vec<f32>>) {
    for vector in vectors {
        let id = truth.len() as ChunkId * 7 + 3; // ids unrelated to rows
        index.insert(id, &vector).unwrap();
        truth.insert(id, vector);
    }
}

#[test]
fn exact_equals_brute_force_on_uniform_and_clustered_vectors() {
    for (dim, clusters) in [(384, 50), (100, 1_000_000), (7, 3), (1, 1), (385, 20)] {
        let mut index = exact(dim);
        let mut truth = Truth::new();
        let mut data = Clustered::new(dim as u64, dim, clusters, 0.9);
        fill(&mut index, &mut truth, (0..3000).map(|_| data.next_vector()));
        for k in [1, 10, 100] {
            for _ in 0..10 {
                let query = data.next_vector();
                let got = index.search(&query, k, None, None).unwrap();
                assert_exact(&got, &truth, &query, k, None, None);
            }
        }
    }
}

#[test]
fn exact_equals_brute_force_on_near_duplicates() {
    // Groups of vectors closer to each other than the int8 error bound, and exact
    // duplicates under different ids: the case where the approximate scan cannot
    // rank and the second, bounded rescoring step has to.
    let dim = 384;
    let mut rng = Rng::new(5);
    let centers: Vec<Vec<f32>> = (0..20).map(|_| unit_vector(&mut rng, dim)).collect();
    let mut vectors = Vec::new();
    for i in 0..4000 {
        let mut v: Vec<f32> = centers[i % centers.len()].iter().map(|c| c + 0.002 * rng.normal()).collect();
        normalize(&mut v);
        vectors.push(v);
    }
    vectors.extend(vectors[..200].to_vec());
    let mut index = exact(dim);
    let mut truth = Truth::new();
    fill(&mut index, &mut truth, vectors);
    for (i, center) in centers.iter().enumerate() {
        let mut query: Vec<f32> = center.iter().map(|c| c + 0.001 * rng.normal()).collect();
        normalize(&mut query);
        let k = [1, 10, 50][i % 3];
        let got = index.search(&query, k, None, None).unwrap();
        assert_exact(&got, &truth, &query, k, None, None);
        let odd = |id: ChunkId| id % 2 == 1;
        let got = index.search(&query, k, Some(0.99), Some(&odd)).unwrap();
        assert_exact(&got, &truth, &query, k, Some(0.99), Some(&odd));
    }
}

#[test]
fn filters_min_score_and_large_k() {
    let dim = 64;
    let mut index = exact(dim);
    let mut truth = Truth::new();
    let mut data = Clustered::new(9, dim, 10, 0.9);
    fill(&mut index, &mut truth, (0..5000).map(|_| data.next_vector()));
    let query = data.next_vector();

    let rare = |id: ChunkId| id.is_multiple_of(13);
    let got = index.search(&query, 5, None, Some(&rare)).unwrap();
    assert_exact(&got, &truth, &query, 5, None, Some(&rare));
    // Filters run lazily: only on rows whose estimate would enter the candidates.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let counting = |_: ChunkId| {
        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    };
    let got = index.search(&query, 5, None, Some(&counting)).unwrap();
    assert_exact(&got, &truth, &query, 5, None, None);
    assert!(calls.into_inner() < 1250, "the filter ran on most rows");
    let none = |_: ChunkId| false;
    assert!(index.search(&query, 5, None, Some(&none)).unwrap().is_empty());

    for min_score in [-1.0, 0.0, 0.5, 0.9, 2.0] {
        let got = index.search(&query, 20, Some(min_score), None).unwrap();
        assert_exact(&got, &truth, &query, 20, Some(min_score), None);
    }
    let all = index.search(&query, 10_000, None, None).unwrap();
    assert_eq!(all.len(), 5000);
    assert_exact(&all, &truth, &query, 10_000, None, None);
    assert!(index.search(&query, 0, None, None).unwrap().is_empty());
    assert!(exact(dim).search(&query, 3, None, None).unwrap().is_empty());
}

#[test]
fn remove_replace_and_reinsert() {
    for kind in [IndexKind::Exact, IndexKind::Hnsw] {
        let dim = 32;
        let mut index = VectorIndex::new(kind, dim, IndexParams::default()).unwrap();
        let mut truth = Truth::new();
        let mut data = Clustered::new(2, dim, 5, 0.9);
        fill(&mut index, &mut truth, (0..300).map(|_| data.next_vector()));
        let ids: Vec<ChunkId> = truth.keys().copied().collect();

        // Remove every third id, including the first and the last row.
        for &id in ids.iter().step_by(3).chain([ids[ids.len() - 1]].iter()) {
            assert!(index.remove(id), "{kind:?} {id}");
            assert!(!index.remove(id));
            truth.remove(&id);
            assert!(index.get(id).is_none());
        }
        assert_eq!(index.len(), truth.len());
        for (id, vector) in &truth {
            assert_eq!(index.get(*id), Some(vector.as_slice()), "{kind:?} {id}");
        }
        // A removed vector is its own best match; it must not come back.
        let removed = ids[3];
        let query = data.next_vector();
        for probe in [query.clone(), index.get(ids[1]).unwrap().to_vec()] {
            let got = index.search(&probe, 300, None, None).unwrap();
            assert!(got.iter().all(|(id, _)| truth.contains_key(id)), "{kind:?}: a removed id came back");
            if kind == IndexKind::Exact {
                assert_exact(&got, &truth, &probe, 300, None, None);
            }
        }

        // Re-insert a removed id and replace a live one with new vectors.
        let (fresh, replacement) = (data.next_vector(), data.next_vector());
        index.insert(removed, &fresh).unwrap();
        index.insert(ids[1], &replacement).unwrap();
        truth.insert(removed, fresh.clone());
        truth.insert(ids[1], replacement.clone());
        assert_eq!(index.len(), truth.len());
        assert_eq!(index.get(removed), Some(fresh.as_slice()));
        assert_eq!(index.get(ids[1]), Some(replacement.as_slice()));
        for probe in [&fresh, &replacement] {
            let got = index.search(probe, 1, None, None).unwrap();
            let expected = if std::ptr::eq(probe, &fresh) { removed } else { ids[1] };
            assert_eq!(got[0].0, expected, "{kind:?}");
            assert!((got[0].1 - naive_dot(probe, probe)).abs() <= 1e-6);
        }
        if kind == IndexKind::Exact {
            let got = index.search(&query, 50, None, None).unwrap();
            assert_exact(&got, &truth, &query, 50, None, None);
        }
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut index = exact(4);
    assert!(matches!(index.insert(1, &[1.0, 0.0, 0.0]), Err(Error::InvalidArgument(m)) if m.starts_with("vector:")));
    assert!(index.insert(1, &[f32::NAN, 0.0, 0.0, 0.0]).is_err());
    assert!(index.extend(&[(1, &[1.0, 0.0, 0.0, 0.0]), (2, &[1.0])]).is_err());
    assert!(index.is_empty(), "a failed extend stored something");
    assert!(index.search(&[1.0, 0.0], 1, None, None).is_err());
    assert!(index.search(&[1.0, 0.0, 0.0, 0.0], 1, Some(f32::NAN), None).is_err());
    for (kind, dim, params) in [
        (IndexKind::Exact, 0, IndexParams::default()),
        (IndexKind::Exact, MAX_DIM + 1, IndexParams::default()),
        (IndexKind::Hnsw, 8, IndexParams { m: 0, ..IndexParams::default() }),
        (IndexKind::Hnsw, 8, IndexParams { m: 256, ..IndexParams::default() }),
        (IndexKind::Hnsw, 8, IndexParams { ef_search: 0, ..IndexParams::default() }),
    ] {
        assert!(matches!(VectorIndex::new(kind, dim, params), Err(Error::Config(_))), "{kind:?} {dim} {params:?}");
    }
}

#[test]
fn split_scan_equals_single_thread_scan() {
    let dim = 48;
    let mut data = Clustered::new(4, dim, 100, 0.9);
    let params = IndexParams { scan_threads: 2, ..IndexParams::default() };
    let mut split = VectorIndex::new(IndexKind::Exact, dim, params).unwrap();
    let mut truth = Truth::new();
    fill(&mut split, &mut truth, (0..40_000).map(|_| data.next_vector()));
    for _ in 0..5 {
        let query = data.next_vector();
        let got = split.search(&query, 10, None, None).unwrap();
        assert_exact(&got, &truth, &query, 10, None, None);
    }
}

/// Recall@10 of HNSW against exact search.
fn recall_at_10(hnsw: &VectorIndex, exact: &VectorIndex, queries: &[Vec<f32>], filter: Option<&Filter>) -> f64 {
    let mut found = 0;
    for query in queries {
        let truth: HashSet<ChunkId> = exact.search(query, 10, None, filter).unwrap().iter().map(|h| h.0).collect();
        let got = hnsw.search(query, 10, None, filter).unwrap();
        assert!(got.iter().all(|(id, _)| filter.is_none_or(|f| f(*id))));
        found += got.iter().filter(|(id, _)| truth.contains(id)).count();
    }
    found as f64 / (10 * queries.len()) as f64
}

#[test]
fn hnsw_recall_filters_and_removals() {
    let dim = 384;
    let mut data = Clustered::new(8, dim, 100, 0.9);
    let vectors: Vec<(ChunkId, Vec<f32>)> = (0..5000).map(|i| (i * 2 + 1, data.next_vector())).collect();
    let batch: Vec<(ChunkId, &[f32])> = vectors.iter().map(|(id, v)| (*id, v.as_slice())).collect();
    let mut hnsw = VectorIndex::new(IndexKind::Hnsw, dim, IndexParams::default()).unwrap();
    let mut exact = exact(dim);
    hnsw.extend(&batch).unwrap();
    exact.extend(&batch).unwrap();
    assert_eq!(hnsw.len(), 5000);
    let queries: Vec<Vec<f32>> = (0..100).map(|_| data.next_vector()).collect();

    let recall = recall_at_10(&hnsw, &exact, &queries, None);
    assert!(recall >= 0.95, "recall@10 {recall}");
    let half = |id: ChunkId| id % 4 == 1;
    let filtered = recall_at_10(&hnsw, &exact, &queries, Some(&half));
    assert!(filtered >= 0.9, "filtered recall@10 {filtered}");

    // Remove the current top hits of every query: none may come back, and recall
    // over what is left must hold.
    for query in &queries {
        for (id, _) in exact.search(query, 5, None, None).unwrap() {
            hnsw.remove(id);
            exact.remove(id);
        }
    }
    assert_eq!(hnsw.len(), exact.len());
    assert_eq!(hnsw.tombstones(), 5000 - hnsw.len());
    let recall = recall_at_10(&hnsw, &exact, &queries, None);
    assert!(recall >= 0.95, "recall@10 after removals {recall}");
    for query in &queries {
        let hits = hnsw.search(query, 10, Some(0.3), None).unwrap();
        assert!(hits.iter().all(|(id, score)| exact.get(*id).is_some() && *score >= 0.3));
        assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}

/// The graph has a fixed number of search contexts and fails a search that finds none
/// free: more searchers than that at once must wait their turn, never fail. Each search
/// holds its context (inside its filter) until 16 searches are inside at once.
#[test]
fn more_concurrent_hnsw_searches_than_contexts_all_succeed() {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    thread_local!(static INSIDE: Cell<bool> = const { Cell::new(false) });
    let dim = 64;
    let mut data = Clustered::new(3, dim, 20, 0.9);
    let vectors: Vec<(ChunkId, Vec<f32>)> = (0..3_000).map(|i| (i, data.next_vector())).collect();
    let batch: Vec<(ChunkId, &[f32])> = vectors.iter().map(|(id, v)| (*id, v.as_slice())).collect();
    let mut hnsw = VectorIndex::new(IndexKind::Hnsw, dim, IndexParams::default()).unwrap();
    hnsw.extend(&batch).unwrap();
    let query = data.next_vector();
    let inside = AtomicUsize::new(0);
    let crowded = |_: ChunkId| {
        if !INSIDE.get() {
            INSIDE.set(true);
            inside.fetch_add(1, Ordering::SeqCst);
            let started = Instant::now();
            while inside.load(Ordering::SeqCst) < 16 && started.elapsed() < Duration::from_secs(2) {
                std::thread::yield_now();
            }
        }
        true
    };
    let (hnsw, query, crowded) = (&hnsw, &query, &crowded);
    std::thread::scope(|scope| {
        let searchers: Vec<_> = (0..48)
            .map(|_| scope.spawn(move || hnsw.search(query, 10, None, Some(crowded)).map(|hits| hits.len())))
            .collect();
        for searcher in searchers {
            assert_eq!(searcher.join().unwrap().unwrap(), 10);
        }
    });
    assert_eq!(inside.load(Ordering::SeqCst), 48);
}

#[test]
fn searches_scanned_together_equal_each_alone() {
    let dim = 384;
    let mut rng = Rng::new(23);
    // Two threads' worth of rows for the split scan, and a near-duplicate pair that
    // needs step 2.
    for rows in [0usize, 3, 700, 40_000] {
        let mut index =
            VectorIndex::new(IndexKind::Exact, dim, IndexParams { scan_threads: 2, ..IndexParams::default() }).unwrap();
        for id in 0..rows as u64 {
            index.insert(id, &unit_vector(&mut rng, dim)).unwrap();
        }
        let queries: Vec<Vec<f32>> = (0..7).map(|_| unit_vector(&mut rng, dim)).collect();
        let mut asked: Vec<ScanQuery<'_>> = queries
            .iter()
            .enumerate()
            .map(|(i, q)| ScanQuery { vector: q, k: [5, 1, 0, 50][i % 4], min_score: (i == 3).then_some(0.1) })
            .collect();
        let short = vec![0.5f32; dim - 1];
        asked.insert(2, ScanQuery { vector: &short, k: 5, min_score: None });
        let together = index.search_many(&asked);
        assert_eq!(together.len(), asked.len());
        for (query, found) in asked.iter().zip(together) {
            let alone = index.search(query.vector, query.k, query.min_score, None);
            match (alone, found) {
                (Ok(alone), Ok(found)) => assert_eq!(found, alone, "{rows} rows, k {}", query.k),
                (Err(_), Err(error)) => assert!(error.to_string().contains("dimensions"), "{error}"),
                (alone, found) => panic!("alone {alone:?}, together {found:?}"),
            }
        }
    }
}
