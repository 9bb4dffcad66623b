//! Searches that arrive together are scanned together.
//!
//! The queries of concurrent searches are embedded in one model batch, so they reach
//! the index at the same moment. One pass for all of them reads the codes once and
//! sums four queries side by side ([`crate::index::VectorIndex::search_many`]): at
//! 100k rows 16 queries cost a quarter of their time one by one.
//!
//! No search waits for company: the first to arrive scans at once, on its own thread,
//! as it would alone. Searches arriving while a scan runs queue, and when it ends the
//! thread that ran it takes every queued search in one more pass (flat combining), up
//! to [`MAX_PASSES`] passes, then hands what is left to a task of its own. A lone
//! caller pays one lock and a channel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::oneshot;

use super::view::IndexView;
use crate::error::{Error, Result};
use crate::index::{ChunkId, ScanQuery};

/// Passes a thread runs for others before it hands the queue on: its own search's
/// answer went out in its first pass, but its caller's task waits for the rest.
const MAX_PASSES: usize = 4;

/// An unfiltered search waiting for a scan.
struct Waiting {
    vector: Vec<f32>,
    k: usize,
    min_score: Option<f32>,
    reply: oneshot::Sender<Result<Vec<(ChunkId, f32)>>>,
}

/// The queue of searches and who scans it.
#[derive(Default)]
pub struct ScanTogether {
    waiting: Mutex<Vec<Waiting>>,
    /// True while some thread runs passes.
    scanning: AtomicBool,
}

impl ScanTogether {
    /// The `k` best hits for `vector` scoring at least `min_score`, scanned with the
    /// searches that arrive meanwhile.
    pub async fn search(
        self: &Arc<Self>,
        view: &Arc<RwLock<IndexView>>,
        vector: &[f32],
        k: usize,
        min_score: Option<f32>,
    ) -> Result<Vec<(ChunkId, f32)>> {
        let (reply, answer) = oneshot::channel();
        self.lock().push(Waiting { vector: vector.to_vec(), k, min_score, reply });
        self.run_passes(view);
        answer.await.map_err(|_| Error::Storage("the scan of this search stopped".into()))?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Scans what waits unless another thread does; see the module doc.
    fn run_passes(self: &Arc<Self>, view: &Arc<RwLock<IndexView>>) {
        loop {
            if self.scanning.swap(true, Ordering::AcqRel) {
                // The thread scanning takes this search in its next pass.
                return;
            }
            let mut passes = 0;
            {
                let _scanning = Scanning(&self.scanning);
                while passes < MAX_PASSES {
                    let pass = std::mem::take(&mut *self.lock());
                    if pass.is_empty() {
                        break;
                    }
                    scan(view, pass);
                    passes += 1;
                }
            }
            if self.lock().is_empty() {
                return;
            }
            if passes == MAX_PASSES {
                // This thread ran its share: the rest on a task of their own.
                let (together, view) = (self.clone(), view.clone());
                tokio::task::spawn(async move { together.run_passes(&view) });
                return;
            }
            // A search queued after the last pass found the queue empty, and may
            // have seen this thread scanning and left it to it: take it.
        }
    }
}

/// Clears the scanning flag when the passes end, even by a panic: a flag left set
/// would leave every later search waiting for a scan nobody runs.
struct Scanning<'a>(&'a AtomicBool);

impl Drop for Scanning<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One pass: every search in `pass` answered from one scan.
fn scan(view: &RwLock<IndexView>, pass: Vec<Waiting>) {
    let found = {
        let view = view.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let queries: Vec<ScanQuery<'_>> =
            pass.iter().map(|w| ScanQuery { vector: &w.vector, k: w.k, min_score: w.min_score }).collect();
        view.index.search_many(&queries)
    };
    for (waiting, hits) in pass.into_iter().zip(found) {
        // A caller that left no longer wants its answer.
        let _ = waiting.reply.send(hits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::synthetic::{Rng, unit_vector};
    use crate::index::{IndexKind, IndexParams};

    /// Many searches at once, from a runtime of several threads: each gets its own
    /// answer, equal to a search of its query alone, and none is left waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_searches_each_get_their_own_answer() {
        let (dim, mut rng) = (64, Rng::new(5));
        let mut view = IndexView::new(IndexKind::Exact, dim, IndexParams::default()).unwrap();
        for id in 0..3000 {
            view.index.insert(id, &unit_vector(&mut rng, dim)).unwrap();
        }
        let view = Arc::new(RwLock::new(view));
        let together = Arc::new(ScanTogether::default());
        let queries: Vec<Vec<f32>> = (0..400).map(|_| unit_vector(&mut rng, dim)).collect();
        let searches = queries.iter().enumerate().map(|(i, query)| {
            let (together, view, query) = (together.clone(), view.clone(), query.clone());
            tokio::spawn(async move { together.search(&view, &query, 1 + i % 7, None).await })
        });
        let answers = futures::future::join_all(searches).await;
        let view = view.read().unwrap();
        for ((i, query), answer) in queries.iter().enumerate().zip(answers) {
            let alone = view.index.search(query, 1 + i % 7, None, None).unwrap();
            assert_eq!(answer.unwrap().unwrap(), alone, "query {i}");
        }
        assert!(together.lock().is_empty(), "nothing left queued");
        let wrong = together
            .search(
                &Arc::new(RwLock::new(IndexView::new(IndexKind::Exact, dim, IndexParams::default()).unwrap())),
                &[1.0; 3],
                5,
                None,
            )
            .await;
        assert!(wrong.unwrap_err().to_string().contains("dimensions"), "a bad query fails alone, as an error");
    }
}
