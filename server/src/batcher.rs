//! Dynamic batching: sequences from concurrent requests share model batches.
//!
//! One batcher serves each model: the embedding model (token id sequences in, one
//! vector each out) and the cross-encoder ((query, text) pairs in, one score each
//! out); [`BatchModel::Input`] is what a sequence is for the model at hand.
//!
//! Requests put tokenized sequences on a queue; one model thread takes a window of
//! waiting sequences, sorts it by length (so sequences of similar length share a
//! batch and little is spent on padding), cuts it into batches under a token budget
//! and a size cap, and runs them. Between batches the CPU does nothing else useful,
//! so the thread does not wait for a full batch, except for company it has reason to
//! expect: when the previous batch was larger than what is queued now, or when more
//! interactive sequences were recently queued or running at once than are queued now,
//! it waits for the queue to reach that size again, at most `max_wait` and at most a
//! quarter of the model time the batch it waits for will take. A lone client (batches
//! of one) never waits.
//!
//! Why wait for company: a closed-loop client of N callers (each sends its next call
//! when answered) left to itself splits into cohorts. While one cohort's batch runs,
//! the other cohort's calls queue; the batch ends, the queued cohort starts at once,
//! and the callers just answered come back (search, response, next request: a few ms)
//! to find a batch running, so they form the next cohort. Batches stay at N/2 or N/3,
//! where the model does less per second. Waiting those few ms merges the cohorts into
//! one batch of N. Measured on 2 cores with 16 callers of `POST /v1/search` on 10,000
//! documents, alternating servers: 451-525 against 361-414 requests/s, p95 41-45
//! against 54-65 ms. Under overload (calls refused since the last window) the
//! thread never waits: the admission bound, not the callers, keeps the queue short
//! then, and the company it would wait for is being turned away.
//!
//! A sequence whose caller has gone (cancelled, deadline passed) is dropped when its
//! batch is formed, before it costs model time.
//!
//! A lone caller skips the queue: when nothing waits, no batch runs and no company is
//! expected, a one-text request runs on its own thread
//! ([`TokenBudgetBatcher::submit_or_run_now`]). The queue's two hand-offs (waking the model thread, then waking the caller's) cost
//! about 0.1 ms of a one-sentence call that the model does in 1.3 ms (int8), as
//! measured by `embedwire-bench latency`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::split_choice::{SplitChoice, Way};
use crate::stats::Stats;
use crate::work_ahead::WorkAhead;

/// One tokenized input as it waits for the model.
pub trait BatchInput: Send + Sync + 'static {
    /// Tokens it feeds the model, before padding: what budgets and queue-time
    /// estimates count.
    fn token_count(&self) -> usize;
}

impl BatchInput for Vec<u32> {
    fn token_count(&self) -> usize {
        self.len()
    }
}

/// A model the batcher can drive: tokenized inputs in, `dim` values each out.
pub trait BatchModel: Send + 'static {
    /// What one input is (token ids; a tokenized pair).
    type Input: BatchInput;
    /// The model thread's name, as profilers and `top -H` show it.
    const THREAD_NAME: &'static str = "embedwire-model";
    /// Values out per input (a vector's dimensions; 1 for a score).
    fn dim(&self) -> usize;
    /// Runs `batch`, returning `batch.len() * dim` values, row-major.
    fn run_batch(&mut self, batch: &[&Self::Input]) -> Result<Vec<f32>>;
    /// Whether the model holds memory it could give back while idle (ONNX Runtime's
    /// arena after a large batch): the model thread then calls
    /// [`release_idle_memory`](Self::release_idle_memory) once no work came for
    /// [`IDLE_RELEASE`].
    fn holds_idle_memory(&self) -> bool {
        false
    }
    /// Gives that memory back. A failure only keeps the memory.
    fn release_idle_memory(&mut self) -> Result<()> {
        Ok(())
    }
}

/// How long the model thread waits for work before a model that holds idle memory
/// gives it back. Short: an ingest's pipeline keeps the model busy between its
/// batches, so a pause this long means the large work is over (the next caller, a
/// query, needs a small arena), and a wrong guess costs one large batch the page
/// faults of its buffers. Long enough that a server between two bursts of queries
/// does not shrink and grow for every burst.
pub const IDLE_RELEASE: Duration = Duration::from_millis(50);

/// How batches are formed.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Most sequences in a batch.
    pub max_batch_size: usize,
    /// Most tokens in a batch, padding included: size x longest sequence.
    pub max_batch_tokens: usize,
    /// Longest wait for the queue to refill to the company expected (see the module
    /// comment); a quarter of the expected batch's model time bounds it too.
    pub max_wait: Duration,
    /// Token budget of a bulk batch: smaller than the interactive one, because a
    /// request that arrives while a bulk batch runs waits for all of it.
    pub max_bulk_batch_tokens: usize,
}

/// Which lane a request takes (see `lanes`): interactive (a person waits: a search,
/// a small Embed) or bulk (background ingestion, Embed calls of many texts). Bulk
/// work runs when no interactive work waits, in windows sorted by length like
/// interactive ones, but stops after any batch once interactive work waits; and it
/// gets one batch in every [`INTERACTIVE_BATCHES_PER_BULK`] while interactive work
/// keeps coming. So a large ingest delays a search by at most one batch, is never
/// starved, and runs as padding-free as interactive work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    #[default]
    Interactive,
    Bulk,
}

/// The answer to one submitted request: `count * dim` values in submission order.
pub type BatchReply = oneshot::Receiver<Result<(Vec<f32>, BatchTiming)>>;

/// Where a request's time went, for the timing metadata of its response.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchTiming {
    /// From queueing to the start of its first batch.
    pub queue: Duration,
    /// Model time of the batches that held its inputs (shared with their other inputs).
    pub inference: Duration,
}

/// Owns the model thread; dropping it finishes queued work and stops the thread.
pub struct TokenBudgetBatcher<I: BatchInput = Vec<u32>> {
    queue: Arc<SequenceQueue<I>>,
    work_ahead: Arc<WorkAhead>,
    dim: usize,
    worker: Option<JoinHandle<()>>,
    /// Runs a batch on the calling thread if the model is free; false if it is busy.
    run_if_free: RunIfFree<I>,
}

/// [`TokenBudgetBatcher`]'s way to the model from a caller's thread (the model's type
/// is known only where the batcher starts).
type RunIfFree<I> = Box<dyn Fn(&[QueuedSequence<I>]) -> bool + Send + Sync>;

/// The model, locked by whoever runs a batch: the model thread, or a lone caller.
type SharedModel<M> = Arc<Mutex<M>>;

/// Where the model thread receives the models that run the parts of a split batch,
/// once they are loaded.
pub type LateParts<M> = std::sync::mpsc::Receiver<Vec<M>>;

impl<I: BatchInput> TokenBudgetBatcher<I> {
    /// Starts the model thread for `model`.
    pub fn start<M: BatchModel<Input = I>>(model: M, limits: BatchLimits, stats: Arc<Stats>) -> Result<Self> {
        Self::start_with_parallel_parts(model, Vec::new(), limits, stats)
    }

    /// Starts the model thread for `model`, with `parts` (two or more single-threaded
    /// instances of the same model) to run the parts of a large batch side by side; see
    /// [`MIN_SPLIT_SEQUENCES`]. With fewer than two, every batch runs on `model`.
    pub fn start_with_parallel_parts<M: BatchModel<Input = I>>(
        model: M,
        parts: Vec<M>,
        limits: BatchLimits,
        stats: Arc<Stats>,
    ) -> Result<Self> {
        let (sender, late_parts) = std::sync::mpsc::channel();
        let _ = sender.send(parts);
        Self::start_with_late_parts(model, late_parts, limits, stats)
    }

    /// As [`start_with_parallel_parts`](Self::start_with_parallel_parts), with the
    /// parts sent on `late_parts` when they are ready: until then (or if none come)
    /// every batch runs whole on `model`. The server loads them after it serves.
    pub fn start_with_late_parts<M: BatchModel<Input = I>>(
        model: M,
        late_parts: LateParts<M>,
        limits: BatchLimits,
        stats: Arc<Stats>,
    ) -> Result<Self> {
        let queue = Arc::new(SequenceQueue::default());
        let work_ahead = Arc::new(WorkAhead::default());
        let dim = model.dim();
        let model: SharedModel<M> = Arc::new(Mutex::new(model));
        let (worker_queue, worker_work_ahead, worker_model) = (queue.clone(), work_ahead.clone(), model.clone());
        let worker_stats = stats.clone();
        let worker = std::thread::Builder::new()
            .name(M::THREAD_NAME.into())
            .spawn(move || {
                let models = Models { whole: &worker_model, parts: Vec::new(), late_parts: Some(late_parts) };
                run_model_thread(models, &worker_queue, limits, &worker_stats, &worker_work_ahead)
            })
            .map_err(|e| Error::Config(format!("starting the model thread: {e}")))?;
        let caller_work_ahead = work_ahead.clone();
        let run_if_free = Box::new(move |batch: &[QueuedSequence<I>]| match model.try_lock() {
            Ok(mut model) => {
                run_batch(&mut *model, batch, &stats, &caller_work_ahead, &|| ());
                true
            }
            Err(_) => false,
        });
        Ok(TokenBudgetBatcher { queue, work_ahead, dim, worker: Some(worker), run_if_free })
    }

    /// Queues the sequences of one request. The reply comes when all are embedded,
    /// or an error when one failed; dropping the reply cancels what has not run yet.
    pub fn submit(&self, sequences: Vec<I>, priority: Priority) -> BatchReply {
        let (receiver, queued) = self.prepare(sequences, priority);
        if !queued.is_empty() {
            self.queue.push(priority, queued.into_iter());
        }
        receiver
    }

    /// [`submit`](Self::submit), except that when nothing is queued and no batch runs,
    /// the sequences run as one batch now, on the calling thread (which blocks for
    /// the model time: call it where blocking is allowed), and the reply is ready on
    /// return. Meant for a lone caller's small interactive request.
    pub fn submit_or_run_now(&self, sequences: Vec<I>, priority: Priority) -> BatchReply {
        let (receiver, queued) = self.prepare(sequences, priority);
        if queued.is_empty() || (self.queue.is_alone() && (self.run_if_free)(&queued)) {
            return receiver;
        }
        self.queue.push(priority, queued.into_iter());
        receiver
    }

    /// The reply of a new request and its sequences ready to queue (none when it has none:
    /// then the reply is already answered), its interactive tokens counted as work ahead.
    fn prepare(&self, sequences: Vec<I>, priority: Priority) -> (BatchReply, Vec<QueuedSequence<I>>) {
        let (reply, receiver) = oneshot::channel();
        if sequences.is_empty() {
            let _ = reply.send(Ok((Vec::new(), BatchTiming::default())));
            return (receiver, Vec::new());
        }
        let job = Arc::new(Job {
            state: Mutex::new(JobState {
                values: vec![0.0; sequences.len() * self.dim],
                remaining: sequences.len(),
                reply: Some(reply),
                first_batch_started: None,
                inference: Duration::ZERO,
            }),
            submitted: Instant::now(),
        });
        let interactive = priority == Priority::Interactive;
        if interactive {
            self.work_ahead.add(sequences.iter().map(|input| input.token_count() as u64).sum());
        }
        let queued = sequences
            .into_iter()
            .enumerate()
            .map(|(row, input)| QueuedSequence { job: job.clone(), row, input, interactive })
            .collect();
        (receiver, queued)
    }

    /// Sequences waiting for the model now.
    pub fn queue_depth(&self) -> usize {
        self.queue.len()
    }

    /// Interactive work queued or running, and the model's recent speed.
    pub fn work_ahead(&self) -> &WorkAhead {
        &self.work_ahead
    }
}

impl<I: BatchInput> Drop for TokenBudgetBatcher<I> {
    fn drop(&mut self) {
        self.queue.close();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// One request's output being filled in by the model thread.
struct Job {
    state: Mutex<JobState>,
    /// When the request was queued, for the queue-wait histogram.
    submitted: Instant,
}

struct JobState {
    /// Rows filled so far, `count * dim`.
    values: Vec<f32>,
    /// Sequences not embedded yet.
    remaining: usize,
    /// Taken when the job is answered; None afterwards.
    reply: Option<oneshot::Sender<Result<(Vec<f32>, BatchTiming)>>>,
    /// When the first batch holding one of its inputs started.
    first_batch_started: Option<Instant>,
    /// Model time of the batches that held its inputs so far.
    inference: Duration,
}

impl Job {
    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True when nobody waits for the answer any more: the caller dropped the reply,
    /// or another sequence of the job already failed it.
    fn is_abandoned(&self) -> bool {
        self.lock().reply.as_ref().is_none_or(|reply| reply.is_closed())
    }

    fn fill_row(&self, row: usize, vector: &[f32]) {
        let mut state = self.lock();
        let dim = vector.len();
        state.values[row * dim..(row + 1) * dim].copy_from_slice(vector);
        state.remaining -= 1;
        if state.remaining == 0
            && let Some(reply) = state.reply.take()
        {
            let values = std::mem::take(&mut state.values);
            let queue =
                state.first_batch_started.map_or(Duration::ZERO, |t| t.saturating_duration_since(self.submitted));
            let _ = reply.send(Ok((values, BatchTiming { queue, inference: state.inference })));
        }
    }

    /// Records a batch holding some of its inputs: when it started and how long it ran.
    fn count_batch(&self, started: Instant, took: Duration) {
        let mut state = self.lock();
        state.first_batch_started.get_or_insert(started);
        state.inference += took;
    }

    fn fail(&self, error: &Error) {
        if let Some(reply) = self.lock().reply.take() {
            let _ = reply.send(Err(Error::Model(error.to_string())));
        }
    }
}

struct QueuedSequence<I> {
    job: Arc<Job>,
    /// The sequence's row in its job's output.
    row: usize,
    input: I,
    /// Counted in the work ahead (interactive priority).
    interactive: bool,
}

/// Interactive tokens among `sequences`.
fn interactive_tokens<'a, I: BatchInput>(sequences: impl IntoIterator<Item = &'a QueuedSequence<I>>) -> u64 {
    sequences.into_iter().filter(|s| s.interactive).map(|s| s.input.token_count() as u64).sum()
}

struct SequenceQueue<I> {
    state: Mutex<QueueState<I>>,
    changed: Condvar,
}

impl<I> Default for SequenceQueue<I> {
    fn default() -> Self {
        SequenceQueue { state: Mutex::new(QueueState::default()), changed: Condvar::new() }
    }
}

struct QueueState<I> {
    interactive: VecDeque<QueuedSequence<I>>,
    bulk: VecDeque<QueuedSequence<I>>,
    closed: bool,
    /// Interactive sequences the model thread took and has not run yet (its window).
    interactive_in_window: usize,
    /// The most interactive sequences seen queued or in the window at once, when
    /// one was queued, since a wait for that many last came up short: the company a
    /// batch can expect (see the module comment).
    company: usize,
}

impl<I> Default for QueueState<I> {
    fn default() -> Self {
        QueueState {
            interactive: VecDeque::new(),
            bulk: VecDeque::new(),
            closed: false,
            interactive_in_window: 0,
            company: 0,
        }
    }
}

/// A wait for the queue to fill never costs more than this fraction of the model time
/// of the batch it waits for: at worst, the company does not come and the model idles
/// for a quarter of a batch.
const FILL_WAIT_DIVISOR: u32 = 4;

impl<I> QueueState<I> {
    fn waiting(&self) -> usize {
        self.interactive.len() + self.bulk.len()
    }

    /// How many sequences the next window waits for, and for how long at most: the
    /// previous batch's size or the company interactive work can expect, whichever
    /// is larger.
    fn fill_goal(&self, last: LastBatch, limits: BatchLimits) -> (usize, Duration) {
        let company = if self.interactive.is_empty() { 0 } else { self.company.min(limits.max_batch_size) };
        let target = last.size.max(company);
        let per_sequence = last.took / last.size.max(1) as u32;
        let wait = limits.max_wait.min(per_sequence * target as u32 / FILL_WAIT_DIVISOR);
        (target, wait)
    }
}

/// The batch the model thread ran last: what the next one's wait to fill goes by.
#[derive(Debug, Clone, Copy)]
struct LastBatch {
    size: usize,
    took: Duration,
}

impl<I: BatchInput> SequenceQueue<I> {
    fn lock(&self) -> MutexGuard<'_, QueueState<I>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sequences waiting, both priorities.
    fn len(&self) -> usize {
        let state = self.lock();
        state.interactive.len() + state.bulk.len()
    }

    fn push(&self, priority: Priority, sequences: impl Iterator<Item = QueuedSequence<I>>) {
        let mut state = self.lock();
        match priority {
            Priority::Interactive => {
                state.interactive.extend(sequences);
                let together = state.interactive.len() + state.interactive_in_window;
                state.company = state.company.max(together);
            }
            Priority::Bulk => state.bulk.extend(sequences),
        }
        drop(state);
        self.changed.notify_one();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for sequences to run; false if none came (and the queue
    /// is still open).
    fn wait_for_work(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |state| state.waiting() == 0 && !state.closed)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.waiting() > 0 || state.closed
    }

    /// Blocks until sequences are waiting, then takes up to `max_sequences` of one
    /// lane, oldest first: interactive ones, or bulk ones when none wait or
    /// `bulk_due`. Waits a little more while fewer wait than the goal after `last`
    /// ([`QueueState::fill_goal`]). None when the queue is closed and empty.
    fn take_window(
        &self,
        max_sequences: usize,
        last: LastBatch,
        bulk_due: bool,
        limits: BatchLimits,
    ) -> Option<Window<I>> {
        let mut state = self.lock();
        while state.waiting() == 0 {
            if state.closed {
                return None;
            }
            state = self.changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let (fill_target, max_wait) = state.fill_goal(last, limits);
        let deadline = Instant::now() + max_wait;
        while state.waiting() < fill_target && !state.closed {
            let now = Instant::now();
            if now >= deadline {
                // The company did not come (callers left, or think between calls):
                // expect no more than came, until more are seen together again.
                state.company = state.interactive.len();
                break;
            }
            state = self.changed.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        let (lane, priority) = if !state.interactive.is_empty() && !(bulk_due && !state.bulk.is_empty()) {
            (&mut state.interactive, Priority::Interactive)
        } else {
            (&mut state.bulk, Priority::Bulk)
        };
        let take = lane.len().min(max_sequences);
        let sequences = lane.drain(..take).collect();
        if priority == Priority::Interactive {
            state.interactive_in_window = take;
        }
        Some(Window { sequences, priority })
    }

    /// Counts the interactive sequences of the model thread's window not run yet.
    fn set_interactive_in_window(&self, count: usize) {
        self.lock().interactive_in_window = count;
    }

    /// True when nothing waits and recent traffic had no interactive sequences
    /// together: a new one may run alone at once. Otherwise it queues (for company).
    fn is_alone(&self) -> bool {
        let state = self.lock();
        state.waiting() == 0 && state.company <= 1
    }

    /// True when interactive work waits: a bulk window stops between its batches
    /// then, so interactive calls wait for at most one bulk batch.
    fn interactive_waiting(&self) -> bool {
        !self.lock().interactive.is_empty()
    }

    /// Puts bulk sequences a window did not run back at the front of their lane.
    fn return_bulk(&self, sequences: Vec<QueuedSequence<I>>) {
        let mut state = self.lock();
        for sequence in sequences.into_iter().rev() {
            state.bulk.push_front(sequence);
        }
    }
}

/// Sequences taken off the queue together, all of one lane.
struct Window<I> {
    sequences: Vec<QueuedSequence<I>>,
    priority: Priority,
}

/// While interactive work keeps the queue busy, bulk work still gets one batch after
/// this many interactive ones: slowed by overload, not starved. Small enough that a
/// bulk caller keeps a fifth of the model; large enough that interactive calls wait
/// for a bulk batch rarely.
pub const INTERACTIVE_BATCHES_PER_BULK: usize = 4;

/// Windows hold a few batches' worth of sequences, enough to group by length without
/// keeping new arrivals waiting behind a long backlog.
const BATCHES_PER_WINDOW: usize = 4;

/// Batches of at least this many sequences can be split into as many parts as there
/// are parallel part models, run side by side, one thread each; whether they are is
/// measured batch by batch ([`SplitChoice`]). On a machine whose cores
/// something else also wants (the request handlers, a load generator, another
/// process), a batch run by one session on all cores waits at every matrix product
/// for its slowest thread, and a descheduled thread stalls them all; parts on their own
/// threads do not wait for one another. Measured with one busy process beside the
/// model on 2 cores: 87-105 texts/s one batch on two threads, 126-129 two halves on
/// one thread each; alike, 190-215, on idle cores. Smaller batches stay whole: their
/// parts would be too small to be worth a thread, and a lone short text runs faster
/// on two threads (4 vs 7 ms).
pub const MIN_SPLIT_SEQUENCES: usize = 8;

/// A split batch is cut into up to this many chunks per part model, which the models'
/// threads take as they finish (see `run_split`).
const CHUNKS_PER_MODEL: usize = 2;

/// A batch is cut into more chunks than part models only while each holds this many
/// sequences: smaller runs do less per token (short matrix products).
const MIN_CHUNK_SEQUENCES: usize = 4;

/// The model thread's models: the one that runs whole batches, and the single-threaded
/// ones that run the parts of a split batch (none: batches are never split).
struct Models<'a, M> {
    whole: &'a SharedModel<M>,
    parts: Vec<M>,
    /// Where the parts come from while they are still loading.
    late_parts: Option<LateParts<M>>,
}

impl<M> Models<'_, M> {
    /// The part models, taking them first if they arrived since the last look (without
    /// waiting): none while they load.
    fn loaded_parts(&mut self) -> &mut [M] {
        if let Some(late_parts) = &self.late_parts {
            match late_parts.try_recv() {
                Ok(parts) => {
                    self.parts = parts;
                    self.late_parts = None;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => self.late_parts = None,
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
        }
        &mut self.parts
    }
}

fn run_model_thread<M: BatchModel>(
    mut models: Models<'_, M>,
    queue: &SequenceQueue<M::Input>,
    limits: BatchLimits,
    stats: &Stats,
    work_ahead: &WorkAhead,
) {
    let mut last = LastBatch { size: 1, took: Duration::ZERO };
    let mut interactive_batches_since_bulk = 0;
    let mut split_choice = SplitChoice::default();
    let window_size = limits.max_batch_size * BATCHES_PER_WINDOW;
    let mut refusals_seen = Stats::get(&stats.interactive_refusals);
    loop {
        release_when_idle(&mut models, queue, stats);
        let bulk_due = interactive_batches_since_bulk >= INTERACTIVE_BATCHES_PER_BULK;
        let window_limits = limits_under_load(limits, stats, &mut refusals_seen);
        let Some(window) = queue.take_window(window_size, last, bulk_due, window_limits) else { break };
        stats.queue_depth.store(queue.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let mut live = drop_abandoned(window.sequences, stats, work_ahead);
        live.sort_by_key(|s| s.input.token_count());
        // Bulk batches have their own, smaller, token budget: interactive work that
        // arrives meanwhile waits for the batch running.
        let budget = match window.priority {
            Priority::Interactive => limits,
            Priority::Bulk => BatchLimits { max_batch_tokens: limits.max_bulk_batch_tokens, ..limits },
        };
        let batches = split_under_budget(live, budget);
        let mut not_run: usize = batches.iter().map(Vec::len).sum();
        let mut batches = batches.into_iter();
        while let Some(batch) = batches.next() {
            not_run -= batch.len();
            // Callers may have left while earlier batches of this window ran.
            let batch = drop_abandoned(batch, stats, work_ahead);
            let interactive = window.priority == Priority::Interactive;
            if batch.is_empty() {
                if interactive {
                    queue.set_interactive_in_window(not_run);
                }
                continue;
            }
            // Held while the parts run too: a lone caller's batch must not join them.
            let mut model = models.whole.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            // Before any answer goes out (a caller answered may be back at once): the
            // window then holds only what it has not run.
            let ran = || {
                if interactive {
                    queue.set_interactive_in_window(not_run);
                }
            };
            let took = if batch.len() >= MIN_SPLIT_SEQUENCES && models.loaded_parts().len() >= 2 {
                let way = split_choice.next();
                let took = match way {
                    Way::Parts => run_split(&mut models.parts, &batch, stats, work_ahead, &ran),
                    Way::Whole => run_batch(&mut *model, &batch, stats, work_ahead, &ran),
                };
                split_choice.observe(way, padded_tokens(&batch), took);
                took
            } else {
                run_batch(&mut *model, &batch, stats, work_ahead, &ran)
            };
            drop(model);
            last = LastBatch { size: batch.len(), took };
            match window.priority {
                Priority::Interactive => interactive_batches_since_bulk += 1,
                Priority::Bulk => {
                    interactive_batches_since_bulk = 0;
                    // A bulk window is sorted as a whole (little padding), but
                    // yields to interactive work after each batch.
                    if queue.interactive_waiting() {
                        queue.return_bulk(batches.by_ref().flatten().collect());
                    }
                }
            }
        }
    }
}

/// `limits`, without the wait for company while calls are being refused (any since
/// the last window): the admission bound, not the callers, then decides how full the
/// queue gets, so company the batcher would wait for is being turned away and the
/// wait only idles the model (up to `--max-batch-wait-us` a window). At 3 x capacity
/// on 2 cores, alternating pairs of `embedwire-bench overload`: 294-321 against
/// 280-289 calls/s served during the burst, within this VM's noise but never worse.
fn limits_under_load(limits: BatchLimits, stats: &Stats, refusals_seen: &mut u64) -> BatchLimits {
    let refusals = Stats::get(&stats.interactive_refusals);
    let overloaded = refusals != *refusals_seen;
    *refusals_seen = refusals;
    if overloaded { BatchLimits { max_wait: Duration::ZERO, ..limits } } else { limits }
}

/// Gives the models' idle memory back, if they hold some, once no work came for
/// [`IDLE_RELEASE`].
fn release_when_idle<M: BatchModel>(models: &mut Models<'_, M>, queue: &SequenceQueue<M::Input>, stats: &Stats) {
    let lock = || models.whole.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let holding = lock().holds_idle_memory() || models.parts.iter().any(|part| part.holds_idle_memory());
    if !holding || queue.wait_for_work(IDLE_RELEASE) {
        return;
    }
    let mut released = lock().release_idle_memory();
    for part in models.parts.iter_mut().filter(|part| part.holds_idle_memory()) {
        released = released.and(part.release_idle_memory());
    }
    match released {
        Ok(()) => {
            // What the model freed sits in malloc's heaps until it is trimmed.
            crate::allocator::return_free_pages();
            Stats::add(&stats.idle_memory_releases, 1);
            tracing::debug!("the idle model gave its memory back");
        }
        Err(error) => tracing::warn!(%error, "the idle model could not give its memory back"),
    }
}

/// Keeps the sequences someone still waits for, counting the others as dropped.
fn drop_abandoned<I: BatchInput>(
    sequences: Vec<QueuedSequence<I>>,
    stats: &Stats,
    work_ahead: &WorkAhead,
) -> Vec<QueuedSequence<I>> {
    let before = sequences.len();
    let (live, dropped): (Vec<QueuedSequence<I>>, Vec<QueuedSequence<I>>) =
        sequences.into_iter().partition(|s| !s.job.is_abandoned());
    work_ahead.remove(interactive_tokens(&dropped));
    Stats::add(&stats.dropped_sequences, (before - live.len()) as u64);
    live
}

/// Cuts length-sorted sequences into consecutive batches: each at most
/// max_batch_size long and at most max_batch_tokens once padded to its longest.
fn split_under_budget<I: BatchInput>(
    sorted: Vec<QueuedSequence<I>>,
    limits: BatchLimits,
) -> Vec<Vec<QueuedSequence<I>>> {
    let mut batches: Vec<Vec<QueuedSequence<I>>> = Vec::new();
    let mut current: Vec<QueuedSequence<I>> = Vec::new();
    for sequence in sorted {
        // Sorted ascending, so the newcomer is the longest: it sets the padding.
        let padded_tokens = (current.len() + 1) * sequence.input.token_count();
        if !current.is_empty() && (current.len() == limits.max_batch_size || padded_tokens > limits.max_batch_tokens) {
            batches.push(std::mem::take(&mut current));
        }
        current.push(sequence);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Runs one batch, takes it off the work ahead, calls `before_answers`, and answers
/// its jobs; returns the model's time.
fn run_batch<M: BatchModel>(
    model: &mut M,
    batch: &[QueuedSequence<M::Input>],
    stats: &Stats,
    work_ahead: &WorkAhead,
    before_answers: &dyn Fn(),
) -> Duration {
    let ran = execute(model, batch);
    record_batch(batch, padded_tokens(batch), ran.started, ran.took, stats);
    // Before any answer goes out, so a caller that got one sees the work gone.
    work_ahead.observe_batch(padded_tokens(batch), ran.took);
    work_ahead.remove(interactive_tokens(batch));
    before_answers();
    count_time(batch, ran.started, ran.took);
    answer(batch, ran.result, model.dim());
    ran.took
}

/// Runs a batch as chunks shared out among the models in `parts`, side by side, each
/// on its own thread (the first on this one), calls `before_answers`, then answers
/// them all. The work ahead learns the speed of the whole: all the chunks' tokens in
/// the time they took together, returned.
///
/// Chunks, not one fixed part per model: each thread takes the next chunk when it
/// finishes one (the longest first), so a thread that lost its core to a request
/// handler runs fewer of them, and the batch ends when the last chunk does instead of
/// when the slowest of fixed halves does (see [`chunk_count`]). Measured on 2 cores,
/// alternating runs of `embedwire-bench overload --concurrency 64` (2026-12-04): 64
/// one-sentence gRPC callers got 389 texts/s against 288-302 with fixed halves, and the
/// open loop at 3 x capacity served 360-365 calls/s against 324-330.
fn run_split<M: BatchModel>(
    parts: &mut [M],
    batch: &[QueuedSequence<M::Input>],
    stats: &Stats,
    work_ahead: &WorkAhead,
    before_answers: &dyn Fn(),
) -> Duration {
    let lengths: Vec<usize> = batch.iter().map(|s| s.input.token_count()).collect();
    let chunks = chunk_ranges(&lengths, parts.len());
    Stats::add(&stats.split_batches, 1);
    let started = Instant::now();
    let ran = run_shared_chunks(parts, chunks.len(), |model, chunk| execute(model, &batch[chunks[chunk].clone()]));
    let took = started.elapsed();
    let padded = chunks.iter().map(|chunk| padded_tokens(&batch[chunk.clone()])).sum();
    record_batch(batch, padded, started, took, stats);
    work_ahead.observe_batch(padded_tokens(batch), took);
    work_ahead.remove(interactive_tokens(batch));
    before_answers();
    // A request with inputs in several chunks waited for them side by side, once.
    count_time(batch, started, took);
    let dim = parts[0].dim();
    for (chunk, ran) in chunks.into_iter().zip(ran) {
        let result =
            ran.map_or_else(|| Err(Error::Model("the thread of a batch chunk panicked".into())), |ran| ran.result);
        answer(&batch[chunk], result, dim);
    }
    took
}

/// How a split batch of sequences of these token `lengths` (sorted ascending) is cut
/// for `models` part models: consecutive chunks, as many as [`chunk_count`] says, of
/// balanced padded size. Public for the bench's in-process ceiling of the split way.
pub fn chunk_ranges(lengths: &[usize], models: usize) -> Vec<std::ops::Range<usize>> {
    balanced_parts(lengths, chunk_count(lengths.len(), models))
}

/// Runs chunks `0..chunks` on `models`, one thread each (the first on this one, the
/// others on threads of their own); each thread takes the next chunk, the last first,
/// when it finishes one. Returns each chunk's result in chunk order: None for a chunk
/// whose thread panicked. A thread that cannot start takes no chunk: the others run
/// them all. Public for the bench's in-process ceiling of the split way.
pub fn run_shared_chunks<M: BatchModel, R: Send>(
    models: &mut [M],
    chunks: usize,
    run: impl Fn(&mut M, usize) -> R + Sync,
) -> Vec<Option<R>> {
    let taken = AtomicUsize::new(0);
    // Chunks are cut consecutive in length order, so from the last is longest first.
    let next_chunk = || {
        let taken = taken.fetch_add(1, Ordering::Relaxed);
        (taken < chunks).then(|| chunks - 1 - taken)
    };
    let run_chunks = |model: &mut M| {
        let mut ran = Vec::new();
        while let Some(chunk) = next_chunk() {
            ran.push((chunk, run(model, chunk)));
        }
        ran
    };
    let mut results: Vec<Option<R>> = (0..chunks).map(|_| None).collect();
    std::thread::scope(|scope| {
        let Some((first_model, other_models)) = models.split_first_mut() else { return };
        let others: Vec<_> = other_models
            .iter_mut()
            .filter_map(|model| {
                std::thread::Builder::new()
                    .name(format!("{}-part", M::THREAD_NAME))
                    .spawn_scoped(scope, || run_chunks(model))
                    .inspect_err(|error| tracing::warn!(%error, "starting a thread for batch chunks"))
                    .ok()
            })
            .collect();
        let mut done = run_chunks(first_model);
        for other in others {
            // A panicked thread's chunks stay None.
            done.extend(other.join().unwrap_or_default());
        }
        for (chunk, result) in done {
            results[chunk] = Some(result);
        }
    });
    results
}

/// The chunks a split batch of `sequences` is cut into for `models` models:
/// [`CHUNKS_PER_MODEL`] each when each still holds [`MIN_CHUNK_SEQUENCES`], fewer when
/// not, and one per model at least.
fn chunk_count(sequences: usize, models: usize) -> usize {
    (sequences / MIN_CHUNK_SEQUENCES).clamp(models, models * CHUNKS_PER_MODEL)
}

/// Cuts sequences of these token `lengths`, sorted ascending, into `count` consecutive
/// parts (fewer if there are fewer sequences) whose largest padded size is as small as
/// it can be: the parts take about as long.
fn balanced_parts(lengths: &[usize], count: usize) -> Vec<std::ops::Range<usize>> {
    // Greedy cuts under a bound on each part's padded tokens; the least bound that
    // needs at most `count` parts, found by bisection.
    let cuts = |bound: usize| {
        let mut parts = Vec::with_capacity(count);
        parts.push(0..0);
        for (i, &length) in lengths.iter().enumerate() {
            let current = parts.last_mut().expect("one part at least");
            if current.start == current.end || (i + 1 - current.start) * length <= bound {
                current.end = i + 1;
            } else {
                parts.push(i..i + 1);
            }
        }
        parts
    };
    let (mut low, mut high) = (0, lengths.iter().max().copied().unwrap_or(0) * lengths.len());
    while low < high {
        let middle = (low + high) / 2;
        if cuts(middle).len() <= count { high = middle } else { low = middle + 1 }
    }
    cuts(high)
}

/// Size x longest sequence: what a batch costs the model, padding included.
fn padded_tokens<I: BatchInput>(batch: &[QueuedSequence<I>]) -> usize {
    batch.iter().map(|s| s.input.token_count()).max().unwrap_or(0) * batch.len()
}

/// What running one batch gave, and when and how long it ran.
struct Ran {
    result: Result<Vec<f32>>,
    started: Instant,
    took: Duration,
}

/// Runs one batch, or one chunk of a split batch, on `model`.
fn execute<M: BatchModel>(model: &mut M, batch: &[QueuedSequence<M::Input>]) -> Ran {
    let inputs: Vec<&M::Input> = batch.iter().map(|s| &s.input).collect();
    let started = Instant::now();
    let result = model.run_batch(&inputs);
    Ran { result, started, took: started.elapsed() }
}

/// Counts a batch as the batcher formed it, whole or split, once: its size, the
/// padded tokens its runs took (`padded`: less than the whole's for a split batch,
/// whose chunks pad each to its own longest), and the time from its start to its
/// last run's end, so that `embedwire_inference_seconds` per padded token compares
/// the two ways.
fn record_batch<I: BatchInput>(
    batch: &[QueuedSequence<I>],
    padded: usize,
    started: Instant,
    took: Duration,
    stats: &Stats,
) {
    Stats::add(&stats.batches, 1);
    Stats::add(&stats.sequences, batch.len() as u64);
    Stats::add(&stats.padded_tokens, padded as u64);
    Stats::add(&stats.real_tokens, batch.iter().map(|s| s.input.token_count() as u64).sum());
    stats.batch_size.observe(batch.len() as f64);
    stats.batch_tokens.observe(padded as f64);
    for sequence in batch {
        stats.queue_wait_seconds.observe(started.saturating_duration_since(sequence.job.submitted).as_secs_f64());
    }
    stats.inference_seconds.observe(took.as_secs_f64());
}

/// Counts a batch that started at `started` and took `took` in the timing of the
/// requests it held: once each, however many of their inputs it held.
fn count_time<I: BatchInput>(batch: &[QueuedSequence<I>], started: Instant, took: Duration) {
    let mut counted: Vec<*const Job> = Vec::new();
    for sequence in batch {
        let job = Arc::as_ptr(&sequence.job);
        if !counted.contains(&job) {
            counted.push(job);
            sequence.job.count_batch(started, took);
        }
    }
}

/// Answers the jobs of a batch that ran (their time already counted): fills their
/// rows, or fails them.
fn answer<I: BatchInput>(batch: &[QueuedSequence<I>], result: Result<Vec<f32>>, dim: usize) {
    match result {
        Ok(values) if values.len() == batch.len() * dim => {
            for (sequence, vector) in batch.iter().zip(values.chunks_exact(dim)) {
                sequence.job.fill_row(sequence.row, vector);
            }
        }
        Ok(values) => {
            let error = Error::Model(format!("model returned {} values for {} rows", values.len(), batch.len()));
            batch.iter().for_each(|s| s.job.fail(&error));
        }
        Err(error) => {
            tracing::error!(%error, batch = batch.len(), "model batch failed");
            batch.iter().for_each(|s| s.job.fail(&error));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in model for the batching logic alone (the real model is covered by
    /// the integration tests): each vector is [sequence length, first id], and it
    /// records the batches it saw.
    struct RecordingModel {
        batches: Arc<Mutex<Vec<Vec<usize>>>>,
    }

    impl BatchModel for RecordingModel {
        type Input = Vec<u32>;

        fn dim(&self) -> usize {
            2
        }

        fn run_batch(&mut self, batch: &[&Vec<u32>]) -> Result<Vec<f32>> {
            self.batches.lock().unwrap().push(batch.iter().map(|s| s.len()).collect());
            Ok(batch.iter().flat_map(|s| [s.len() as f32, s[0] as f32]).collect())
        }
    }

    fn limits(max_batch_size: usize, max_batch_tokens: usize) -> BatchLimits {
        BatchLimits {
            max_batch_size,
            max_batch_tokens,
            max_wait: Duration::ZERO,
            max_bulk_batch_tokens: max_batch_tokens,
        }
    }

    fn sequence(length: usize, first: u32) -> Vec<u32> {
        let mut ids = vec![7; length];
        ids[0] = first;
        ids
    }

    fn lengths(batch: &[QueuedSequence<Vec<u32>>]) -> Vec<usize> {
        batch.iter().map(|s| s.input.token_count()).collect()
    }

    fn queued(lengths: &[usize]) -> Vec<QueuedSequence<Vec<u32>>> {
        let job = Arc::new(Job {
            state: Mutex::new(JobState {
                values: vec![],
                remaining: 0,
                reply: None,
                first_batch_started: None,
                inference: Duration::ZERO,
            }),
            submitted: Instant::now(),
        });
        lengths
            .iter()
            .map(|&len| QueuedSequence { job: job.clone(), row: 0, input: vec![1; len], interactive: true })
            .collect()
    }

    #[test]
    fn split_respects_size_and_padded_token_budget() {
        let sorted = queued(&[2, 2, 3, 3, 3, 10]);
        let sizes: Vec<Vec<usize>> = split_under_budget(sorted, limits(3, 9))
            .iter()
            .map(|batch| batch.iter().map(|s| s.input.len()).collect())
            .collect();
        // [2,2,3] pads to 9 tokens; [3,3] next; 10 alone even though it is over budget.
        assert_eq!(sizes, vec![vec![2, 2, 3], vec![3, 3], vec![10]]);
    }

    fn waiting_limits(max_wait: Duration) -> BatchLimits {
        BatchLimits { max_wait, ..limits(16, 4096) }
    }

    #[test]
    fn calls_refused_since_the_last_window_end_the_wait_for_company() {
        let (stats, limits) = (Stats::default(), waiting_limits(Duration::from_millis(10)));
        let mut seen = 0;
        assert_eq!(limits_under_load(limits, &stats, &mut seen).max_wait, Duration::from_millis(10));
        Stats::add(&stats.interactive_refusals, 3);
        assert_eq!(limits_under_load(limits, &stats, &mut seen).max_wait, Duration::ZERO, "refusals: no wait");
        let after = limits_under_load(limits, &stats, &mut seen);
        assert_eq!(after.max_wait, Duration::from_millis(10), "none refused since the last window: waits again");
    }

    #[test]
    fn the_fill_goal_is_the_larger_of_the_last_batch_and_the_company_seen() {
        let queue = SequenceQueue::default();
        queue.push(Priority::Interactive, queued(&[4; 8]).into_iter());
        let first = queue.take_window(64, LastBatch { size: 1, took: Duration::ZERO }, false, limits(16, 4096));
        assert_eq!(first.expect("open").sequences.len(), 8);
        // Eight in the model's window while eight more queue: sixteen came together.
        queue.push(Priority::Interactive, queued(&[4; 8]).into_iter());
        let mut state = queue.lock();
        assert_eq!((state.interactive_in_window, state.company), (8, 16));
        let last = LastBatch { size: 8, took: Duration::from_millis(16) };
        // 2 ms a sequence: a quarter of sixteen sequences' time, under max_wait.
        let goal = state.fill_goal(last, waiting_limits(Duration::from_millis(10)));
        assert_eq!(goal, (16, Duration::from_millis(8)));
        // max_wait bounds it too, and the company never exceeds a full batch.
        state.company = 100;
        assert_eq!(state.fill_goal(last, waiting_limits(Duration::from_millis(3))), (16, Duration::from_millis(3)));
        // A lone client (batches of one, nobody else seen) waits for nothing.
        state.company = 1;
        let alone = LastBatch { size: 1, took: Duration::from_millis(5) };
        assert_eq!(state.fill_goal(alone, waiting_limits(Duration::from_millis(10))).0, 1);
        // Bulk work alone waits only for the last batch's size.
        state.company = 16;
        state.interactive.clear();
        assert_eq!(state.fill_goal(last, waiting_limits(Duration::from_millis(10))).0, 8);
    }

    #[test]
    fn company_that_does_not_come_is_forgotten_after_one_wait() {
        let queue = SequenceQueue::default();
        queue.lock().company = 16;
        assert!(!queue.is_alone(), "a lone request queues rather than running at once");
        queue.push(Priority::Interactive, queued(&[4]).into_iter());
        let last = LastBatch { size: 16, took: Duration::from_millis(32) };
        let started = Instant::now();
        let window = queue.take_window(64, last, false, waiting_limits(Duration::from_millis(5))).expect("open");
        let waited = started.elapsed();
        assert_eq!(window.sequences.len(), 1);
        assert!(waited >= Duration::from_millis(5), "waited {waited:?} for the company");
        assert_eq!(queue.lock().company, 1);
        assert!(queue.is_alone(), "the next lone request may run at once");
        // With the company forgotten, the next lone request waits for nobody.
        queue.set_interactive_in_window(0);
        queue.push(Priority::Interactive, queued(&[4]).into_iter());
        let started = Instant::now();
        let alone = LastBatch { size: 1, took: Duration::from_millis(4) };
        queue.take_window(64, alone, false, waiting_limits(Duration::from_secs(5))).expect("open");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_wait_for_company_ends_when_it_comes() {
        let queue = Arc::new(SequenceQueue::default());
        queue.lock().company = 4;
        queue.push(Priority::Interactive, queued(&[4]).into_iter());
        let late = queue.clone();
        let arrivals = std::thread::spawn(move || {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(2));
                late.push(Priority::Interactive, queued(&[4]).into_iter());
            }
        });
        let last = LastBatch { size: 4, took: Duration::from_secs(8) };
        let started = Instant::now();
        let window = queue.take_window(64, last, false, waiting_limits(Duration::from_secs(2))).expect("open");
        arrivals.join().unwrap();
        assert_eq!(window.sequences.len(), 4, "the batch waited for its company");
        assert!(started.elapsed() < Duration::from_secs(1), "and no longer: {:?}", started.elapsed());
        assert_eq!(queue.lock().company, 4);
    }

    #[test]
    fn parts_are_consecutive_and_balance_padded_tokens() {
        // Eight of 4 tokens and two of 16: halves by count would be 4 x 4 = 16 and
        // 6 x 16 = 96 padded tokens; the balanced cut gives the long ones a part.
        let batch = queued(&[4, 4, 4, 4, 4, 4, 4, 4, 16, 16]);
        assert_eq!(balanced_parts(&lengths(&batch), 2), vec![0..8, 8..10]);
        let even = queued(&[5; 9]);
        let parts = balanced_parts(&lengths(&even), 2);
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![5, 4]);
        assert_eq!(balanced_parts(&lengths(&even), 3).len(), 3);
        assert_eq!(balanced_parts(&lengths(&queued(&[3])), 2), vec![0..1], "never an empty part");
    }

    /// Records the batches it ran, tagged with which instance ran them.
    struct TaggedModel {
        tag: usize,
        batches: Arc<Mutex<Vec<(usize, usize)>>>,
        /// How long each run takes.
        delay: Duration,
    }

    impl BatchModel for TaggedModel {
        type Input = Vec<u32>;

        fn dim(&self) -> usize {
            1
        }

        fn run_batch(&mut self, batch: &[&Vec<u32>]) -> Result<Vec<f32>> {
            std::thread::sleep(self.delay);
            self.batches.lock().unwrap().push((self.tag, batch.len()));
            Ok(batch.iter().map(|s| s[0] as f32).collect())
        }
    }

    #[tokio::test]
    async fn large_batches_run_as_parts_on_the_part_models_and_small_ones_whole() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let model = |tag| TaggedModel { tag, batches: batches.clone(), delay: Duration::ZERO };
        let batcher = TokenBudgetBatcher::start_with_parallel_parts(
            model(0),
            vec![model(1), model(2)],
            limits(64, 10_000),
            Arc::new(Stats::default()),
        )
        .unwrap();
        let count = MIN_SPLIT_SEQUENCES * 2;
        let reply = batcher.submit((0..count).map(|i| sequence(3, i as u32)).collect(), Priority::Interactive);
        let (values, _) = reply.await.unwrap().unwrap();
        assert_eq!(values, (0..count).map(|i| i as f32).collect::<Vec<_>>(), "rows in submission order");
        let small = batcher.submit(vec![sequence(3, 1), sequence(3, 2)], Priority::Interactive);
        assert_eq!(small.await.unwrap().unwrap().0, vec![1.0, 2.0]);
        let mut ran = batches.lock().unwrap().clone();
        assert_eq!(ran.pop(), Some((0, 2)), "a small batch runs whole");
        assert!(ran.iter().all(|&(tag, _)| tag != 0), "the large one on the part models: {ran:?}");
        assert_eq!(
            ran.iter().map(|&(_, size)| size).collect::<Vec<_>>(),
            vec![count / 4; 4],
            "as four chunks, two per part model"
        );
    }

    #[test]
    fn a_split_batch_has_two_chunks_per_model_while_each_holds_enough() {
        assert_eq!(chunk_count(MIN_CHUNK_SEQUENCES, 2), 2, "one per model at least");
        assert_eq!(chunk_count(3 * MIN_CHUNK_SEQUENCES, 2), 3);
        assert_eq!(chunk_count(64, 2), 2 * CHUNKS_PER_MODEL);
    }

    #[tokio::test]
    async fn a_slow_part_model_runs_fewer_chunks_and_every_row_is_answered() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let model = |tag, delay| TaggedModel { tag, batches: batches.clone(), delay };
        // The model thread's part model is slow, like one whose core a handler took.
        let batcher = TokenBudgetBatcher::start_with_parallel_parts(
            model(0, Duration::ZERO),
            vec![model(1, Duration::from_millis(300)), model(2, Duration::from_millis(20))],
            limits(64, 10_000),
            Arc::new(Stats::default()),
        )
        .unwrap();
        let count = 2 * CHUNKS_PER_MODEL * MIN_CHUNK_SEQUENCES;
        let reply = batcher.submit((0..count).map(|i| sequence(3, i as u32)).collect(), Priority::Interactive);
        let (values, _) = reply.await.unwrap().unwrap();
        assert_eq!(values, (0..count).map(|i| i as f32).collect::<Vec<_>>(), "rows in submission order");
        let ran = batches.lock().unwrap().clone();
        let by = |tag| ran.iter().filter(|&&(t, _)| t == tag).count();
        assert_eq!(ran.len(), 2 * CHUNKS_PER_MODEL, "{ran:?}");
        assert_eq!(by(1), 1, "the slow model takes one chunk while the fast one runs the rest: {ran:?}");
    }

    #[tokio::test]
    async fn batches_run_whole_until_the_part_models_arrive() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let model = |tag| TaggedModel { tag, batches: batches.clone(), delay: Duration::ZERO };
        let (send_parts, late_parts) = std::sync::mpsc::channel();
        let batcher = TokenBudgetBatcher::start_with_late_parts(
            model(0),
            late_parts,
            limits(64, 10_000),
            Arc::new(Stats::default()),
        )
        .unwrap();
        let count = MIN_SPLIT_SEQUENCES * 2;
        let large = || (0..count).map(|i| sequence(3, i as u32)).collect::<Vec<_>>();
        batcher.submit(large(), Priority::Interactive).await.unwrap().unwrap();
        assert_eq!(batches.lock().unwrap().clone(), vec![(0, count)], "no parts yet: the large batch runs whole");
        send_parts.send(vec![model(1), model(2)]).unwrap();
        let (values, _) = batcher.submit(large(), Priority::Interactive).await.unwrap().unwrap();
        assert_eq!(values, (0..count).map(|i| i as f32).collect::<Vec<_>>(), "rows in submission order");
        let ran = batches.lock().unwrap().split_off(1);
        assert!(ran.iter().all(|&(tag, _)| tag != 0), "once they came, on the part models: {ran:?}");
        assert_eq!(
            ran.iter().map(|&(_, size)| size).collect::<Vec<_>>(),
            vec![count / 4; 4],
            "as four chunks, two per part model"
        );
    }

    #[tokio::test]
    async fn rows_come_back_in_submission_order_across_sorted_batches() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let model = RecordingModel { batches: batches.clone() };
        let batcher = TokenBudgetBatcher::start(model, limits(2, 100), Arc::new(Stats::default())).unwrap();
        let lengths = [5, 1, 4, 2, 3];
        let reply = batcher.submit(
            lengths.iter().enumerate().map(|(i, &len)| sequence(len, i as u32 + 10)).collect(),
            Priority::Interactive,
        );
        let (values, timing) = reply.await.unwrap().unwrap();
        assert!(timing.inference > Duration::ZERO || values.is_empty());
        let expected: Vec<f32> =
            lengths.iter().enumerate().flat_map(|(i, &len)| [len as f32, i as f32 + 10.0]).collect();
        assert_eq!(values, expected);
        for batch in batches.lock().unwrap().iter() {
            assert!(batch.len() <= 2);
            assert!(batch.windows(2).all(|w| w[0] <= w[1]), "length-sorted batch {batch:?}");
        }
    }

    /// Holds idle memory after a sequence of 8 tokens or more, and records when it
    /// was asked to give it back.
    struct ArenaModel {
        holds: bool,
        releases: Arc<Mutex<Vec<Instant>>>,
        inner: RecordingModel,
    }

    impl BatchModel for ArenaModel {
        type Input = Vec<u32>;

        fn dim(&self) -> usize {
            2
        }

        fn run_batch(&mut self, batch: &[&Vec<u32>]) -> Result<Vec<f32>> {
            self.holds |= batch.iter().any(|s| s.len() >= 8);
            self.inner.run_batch(batch)
        }

        fn holds_idle_memory(&self) -> bool {
            self.holds
        }

        fn release_idle_memory(&mut self) -> Result<()> {
            self.holds = false;
            self.releases.lock().unwrap().push(Instant::now());
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_idle_model_gives_its_memory_back_once_after_a_large_batch() {
        let releases = Arc::new(Mutex::new(Vec::new()));
        let inner = RecordingModel { batches: Arc::new(Mutex::new(Vec::new())) };
        let model = ArenaModel { holds: false, releases: releases.clone(), inner };
        let stats = Arc::new(Stats::default());
        let batcher = TokenBudgetBatcher::start(model, limits(4, 100), stats.clone()).unwrap();
        batcher.submit(vec![sequence(3, 1)], Priority::Interactive).await.unwrap().unwrap();
        tokio::time::sleep(IDLE_RELEASE * 3).await;
        assert!(releases.lock().unwrap().is_empty(), "a small batch leaves nothing to give back");

        let submitted = Instant::now();
        batcher.submit(vec![sequence(9, 1), sequence(3, 2)], Priority::Bulk).await.unwrap().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while releases.lock().unwrap().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(IDLE_RELEASE * 3).await;
        let releases = releases.lock().unwrap().clone();
        assert_eq!(releases.len(), 1, "given back once, then the model holds nothing");
        assert!(releases[0] >= submitted + IDLE_RELEASE, "only after the model idled");
        assert_eq!(Stats::get(&stats.idle_memory_releases), 1, "counted for /metrics");
    }

    /// Blocks in its first batch until released, so a test can queue work behind it.
    struct GatedModel {
        entered: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
        inner: RecordingModel,
    }

    impl BatchModel for GatedModel {
        type Input = Vec<u32>;

        fn dim(&self) -> usize {
            2
        }

        fn run_batch(&mut self, batch: &[&Vec<u32>]) -> Result<Vec<f32>> {
            if self.entered.send(()).is_ok() {
                let _ = self.release.recv();
            }
            self.inner.run_batch(batch)
        }
    }

    #[tokio::test]
    async fn abandoned_requests_are_dropped_before_the_model() {
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let stats = Arc::new(Stats::default());
        let model = GatedModel {
            entered: entered_tx,
            release: release_rx,
            inner: RecordingModel { batches: Arc::new(Mutex::new(Vec::new())) },
        };
        let batcher = TokenBudgetBatcher::start(model, limits(4, 100), stats.clone()).unwrap();
        let blocker = batcher.submit(vec![sequence(1, 0)], Priority::Interactive);
        entered.recv().unwrap(); // the model thread is busy with the blocker
        drop(entered);
        let abandoned = batcher.submit(vec![sequence(3, 1), sequence(3, 2)], Priority::Interactive);
        drop(abandoned); // the caller goes away while its work waits
        let kept = batcher.submit(vec![sequence(2, 3)], Priority::Interactive);
        release.send(()).unwrap();
        assert_eq!(blocker.await.unwrap().unwrap().0, vec![1.0, 0.0]);
        assert_eq!(kept.await.unwrap().unwrap().0, vec![2.0, 3.0]);
        assert_eq!(Stats::get(&stats.dropped_sequences), 2);
        assert_eq!(Stats::get(&stats.sequences), 2);
        assert_eq!(batcher.work_ahead().tokens(), 0, "embedded and dropped tokens both leave the work ahead");
    }

    #[test]
    fn a_request_runs_at_once_on_its_thread_when_the_model_is_free_and_queues_when_busy() {
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let stats = Arc::new(Stats::default());
        let batches = Arc::new(Mutex::new(Vec::new()));
        let model =
            GatedModel { entered: entered_tx, release: release_rx, inner: RecordingModel { batches: batches.clone() } };
        let batcher = TokenBudgetBatcher::start(model, limits(4, 100), stats.clone()).unwrap();
        // Free: it runs on this thread (the gate's first pass lets it through once released).
        release.send(()).unwrap();
        let mut now = batcher.submit_or_run_now(vec![sequence(3, 7)], Priority::Interactive);
        let (values, timing) = now.try_recv().expect("answered before submit_or_run_now returned").unwrap();
        assert_eq!((values, Stats::get(&stats.batches)), (vec![3.0, 7.0], 1));
        assert!(timing.inference > Duration::ZERO);
        entered.recv().unwrap();
        // Busy: the model thread holds the model in a gated batch, so the next request queues behind it.
        let blocker = batcher.submit(vec![sequence(1, 0)], Priority::Interactive);
        entered.recv().unwrap();
        drop(entered);
        let mut queued = batcher.submit_or_run_now(vec![sequence(2, 8)], Priority::Interactive);
        assert!(queued.try_recv().is_err(), "a busy model must not run a second batch at once");
        release.send(()).unwrap();
        assert_eq!(futures::executor::block_on(blocker).unwrap().unwrap().0, vec![1.0, 0.0]);
        assert_eq!(futures::executor::block_on(queued).unwrap().unwrap().0, vec![2.0, 8.0]);
        assert_eq!(batcher.work_ahead().tokens(), 0, "work done either way leaves the work ahead");
        assert_eq!(batches.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn bulk_work_gets_a_batch_in_every_few_while_interactive_work_keeps_coming() {
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let batches = Arc::new(Mutex::new(Vec::new()));
        let model =
            GatedModel { entered: entered_tx, release: release_rx, inner: RecordingModel { batches: batches.clone() } };
        // One sequence a batch, so the order of batches is the order of sequences.
        let batcher = TokenBudgetBatcher::start(model, limits(1, 100), Arc::new(Stats::default())).unwrap();
        let blocker = batcher.submit(vec![sequence(1, 0)], Priority::Interactive);
        entered.recv().unwrap();
        drop(entered);
        // Bulk sequences have length 9, interactive ones length 2.
        let bulk = batcher.submit(vec![sequence(9, 100), sequence(9, 101)], Priority::Bulk);
        let interactive: Vec<BatchReply> =
            (0..12).map(|i| batcher.submit(vec![sequence(2, i + 1)], Priority::Interactive)).collect();
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        for reply in interactive {
            reply.await.unwrap().unwrap();
        }
        bulk.await.unwrap().unwrap();
        let order: Vec<usize> = batches.lock().unwrap().iter().map(|batch| batch[0]).collect();
        // The blocker and four interactive batches, then bulk; four more, then bulk.
        let bulk_at: Vec<usize> = order.iter().enumerate().filter(|&(_, &len)| len == 9).map(|(i, _)| i).collect();
        assert_eq!(bulk_at, vec![5, 10], "batch lengths in order: {order:?}");
    }
}
