//! `--hnsw-target-recall`: the embedded store picks HNSW's search width (ef) by the
//! recall@10 it measures ([`crate::index::recall`]): at start, once the index has
//! answered enough queries to measure on them instead of on a sample of its own
//! vectors, and again whenever the index has grown or shrunk by a quarter since the
//! last pick, in a thread of its own. Searches go on meanwhile at the width in force;
//! the scan that finds the true neighbours takes the read lock a block of rows at a
//! time, so writers are not held up for long.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use super::view::IndexView;
use crate::index::VectorIndex;
use crate::index::recall::{EfPick, PROBE_QUERIES, Probe, pick_ef};
use crate::store::HnswSearch;

/// Smallest index worth measuring: below it, the width the index starts with (the
/// index's default, 512, until the first pick) visits most of the graph.
const MIN_VECTORS: usize = 1_000;
/// A new pick once the index has grown (or shrunk) by this factor since the last one.
const REPICK_FACTOR: f64 = 1.25;

/// The picks of one embedded store.
pub struct EfTuner {
    target: f64,
    state: Mutex<PickState>,
    /// The last [`PROBE_QUERIES`] queries searched, oldest first.
    recent: Mutex<VecDeque<Vec<f32>>>,
    /// The last pick measured on recent queries (so searches stop asking for one).
    picked_on_queries: AtomicBool,
}

#[derive(Debug, Default)]
struct PickState {
    /// A pick is running.
    running: bool,
    /// The last pick.
    last: Option<EfPick>,
}

impl EfTuner {
    pub fn new(target: f64) -> Arc<Self> {
        Arc::new(EfTuner {
            target,
            state: Mutex::new(PickState::default()),
            recent: Mutex::new(VecDeque::with_capacity(PROBE_QUERIES)),
            picked_on_queries: AtomicBool::new(false),
        })
    }

    /// Keeps `query` (searched in an index now `vectors` long) for the next pick; the
    /// first time enough are kept, asks for a pick on them.
    pub fn record_query(self: &Arc<Self>, view: &Arc<RwLock<IndexView>>, query: &[f32], vectors: usize) {
        if vectors < MIN_VECTORS {
            // Too small to pick for: no work on every search.
            return;
        }
        let full = {
            let mut recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if recent.len() == PROBE_QUERIES {
                recent.pop_front();
            }
            recent.push_back(query.to_vec());
            recent.len() == PROBE_QUERIES
        };
        if full && !self.picked_on_queries.load(Ordering::Relaxed) {
            self.maybe_pick(view, vectors);
        }
    }

    /// Starts a pick in the background if none is running and the index (now `vectors`
    /// long) changed size enough since the last one, or enough queries were kept to
    /// measure on them for the first time.
    pub fn maybe_pick(self: &Arc<Self>, view: &Arc<RwLock<IndexView>>, vectors: usize) {
        let queries_kept = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len() == PROBE_QUERIES;
        {
            let mut state = self.state.lock().expect("lock");
            let due = match state.last {
                None => vectors >= MIN_VECTORS,
                Some(last) => {
                    let (now, then) = (vectors as f64, last.vectors as f64);
                    let resized = now >= then * REPICK_FACTOR || now * REPICK_FACTOR <= then;
                    vectors >= MIN_VECTORS && (resized || (queries_kept && last.probe == Probe::StoredVectors))
                }
            };
            if state.running || !due {
                return;
            }
            state.running = true;
        }
        let (tuner, view) = (self.clone(), view.clone());
        let spawned = std::thread::Builder::new().name("hnsw-ef".into()).spawn(move || {
            let recent: Vec<Vec<f32>> =
                tuner.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().cloned().collect();
            let picked = pick(&view, tuner.target, recent);
            let mut state = tuner.state.lock().expect("lock");
            state.running = false;
            let Some(pick) = picked else { return };
            state.last = Some(pick);
            tuner.picked_on_queries.store(pick.probe == Probe::RecentQueries, Ordering::Relaxed);
            write(&view).index.set_ef_search(pick.ef);
            let EfPick { ef, recall, vectors, probe } = pick;
            if recall >= tuner.target {
                tracing::info!(
                    ef,
                    recall,
                    vectors,
                    ?probe,
                    target = tuner.target,
                    "hnsw search width picked by measured recall"
                );
            } else {
                tracing::warn!(
                    ef,
                    recall,
                    vectors,
                    ?probe,
                    target = tuner.target,
                    "hnsw: even the widest search misses the target recall (a denser graph needs a larger --hnsw-m \
                     or --hnsw-ef-construction)"
                );
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "hnsw: could not start the search width pick");
            self.state.lock().expect("lock").running = false;
        }
    }

    /// What Info, GetIndexStats and /metrics report.
    pub fn report(&self, ef_search: usize) -> HnswSearch {
        let last = self.state.lock().expect("lock").last;
        HnswSearch {
            ef_search,
            target_recall: Some(self.target),
            estimated_recall: last.map(|pick| pick.recall),
            measured_at_vectors: last.map_or(0, |pick| pick.vectors as u64),
            probe: last.map(|pick| pick.probe),
        }
    }
}

fn read(view: &RwLock<IndexView>) -> RwLockReadGuard<'_, IndexView> {
    view.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write(view: &RwLock<IndexView>) -> std::sync::RwLockWriteGuard<'_, IndexView> {
    view.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// [`pick_ef`] on the view, under its read lock one step at a time.
fn pick(view: &RwLock<IndexView>, target: f64, recent: Vec<Vec<f32>>) -> Option<EfPick> {
    pick_ef(&|work: &mut dyn FnMut(&VectorIndex)| work(&read(view).index), target, recent)
}
