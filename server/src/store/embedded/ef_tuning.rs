//! `--hnsw-target-recall`: the embedded store picks HNSW's search width (ef) by the
//! recall@10 it measures on its own vectors ([`crate::index::recall`]): at start, and
//! again whenever the index has grown or shrunk by a quarter since the last pick, in a
//! thread of its own. Searches go on meanwhile at the width in force; the scan that
//! finds the true neighbours takes the read lock a block of rows at a time, so writers
//! are not held up for long.

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use super::view::IndexView;
use crate::index::VectorIndex;
use crate::index::recall::{EfPick, pick_ef};
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
}

#[derive(Debug, Default)]
struct PickState {
    /// A pick is running.
    running: bool,
    /// Vectors at the last pick, and the recall it measured.
    last: Option<(usize, f64)>,
}

impl EfTuner {
    pub fn new(target: f64) -> Arc<Self> {
        Arc::new(EfTuner { target, state: Mutex::new(PickState::default()) })
    }

    /// Starts a pick in the background if the index (now `vectors` long) changed size
    /// enough since the last one and none is running.
    pub fn maybe_pick(self: &Arc<Self>, view: &Arc<RwLock<IndexView>>, vectors: usize) {
        {
            let mut state = self.state.lock().expect("lock");
            let due = match state.last {
                None => vectors >= MIN_VECTORS,
                Some((at, _)) => {
                    let (now, then) = (vectors as f64, at as f64);
                    vectors >= MIN_VECTORS && (now >= then * REPICK_FACTOR || now * REPICK_FACTOR <= then)
                }
            };
            if state.running || !due {
                return;
            }
            state.running = true;
        }
        let (tuner, view) = (self.clone(), view.clone());
        let spawned = std::thread::Builder::new().name("hnsw-ef".into()).spawn(move || {
            let picked = pick(&view, tuner.target);
            let mut state = tuner.state.lock().expect("lock");
            state.running = false;
            let Some(EfPick { ef, recall, vectors }) = picked else { return };
            state.last = Some((vectors, recall));
            write(&view).index.set_ef_search(ef);
            if recall >= tuner.target {
                tracing::info!(
                    ef,
                    recall,
                    vectors,
                    target = tuner.target,
                    "hnsw search width picked by measured recall"
                );
            } else {
                tracing::warn!(
                    ef,
                    recall,
                    vectors,
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
            estimated_recall: last.map(|(_, recall)| recall),
            measured_at_vectors: last.map_or(0, |(vectors, _)| vectors as u64),
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
fn pick(view: &RwLock<IndexView>, target: f64) -> Option<EfPick> {
    pick_ef(&|work: &mut dyn FnMut(&VectorIndex)| work(&read(view).index), target)
}
