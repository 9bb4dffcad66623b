//! Settling jobs beside the indexing pipeline.
//!
//! A job with nothing left to index is settled (its store recounts it) and finished.
//! With Weaviate a settle waits until the vectors just written are in every replica's
//! graph (`store::weaviate::indexing`), about half a second under steady writes. Done
//! inline, that wait held each server to about one small job a second while the model
//! idled: 300 jobs of 8 documents took 118 s to drain on two servers. So the runner
//! hands settles to tasks of their own and goes on with the next job.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::{Id, JoinSet};
use tokio::time::Instant;

use crate::error::{Error, Result};

/// Settles running at once: enough to cover a settle's wait at the rate one server
/// indexes small jobs, few enough that a backlog's settles do not crowd the store.
const SETTLES_IN_FLIGHT: usize = 8;

/// A job whose settle did not end it (a search missed documents still pending, say)
/// is not settled again before this: it would otherwise be settled in a tight loop.
const SETTLE_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// The runner's settles in flight, and the jobs resting after one that did not end them.
#[derive(Default)]
pub struct Settles {
    tasks: JoinSet<Result<bool>>,
    jobs: HashMap<Id, String>,
    resting: HashMap<String, Instant>,
}

impl Settles {
    /// Whether the runner should leave `job_id` alone now: being settled, or resting.
    pub fn busy(&self, job_id: &str, now: Instant) -> bool {
        self.jobs.values().any(|id| id == job_id) || self.resting.get(job_id).is_some_and(|until| *until > now)
    }

    pub fn full(&self) -> bool {
        self.jobs.len() >= SETTLES_IN_FLIGHT
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs `settle` (true when it ended the job) on a task of its own.
    pub fn start(&mut self, job_id: &str, settle: impl Future<Output = Result<bool>> + Send + 'static) {
        self.resting.remove(job_id);
        let task = self.tasks.spawn(settle);
        self.jobs.insert(task.id(), job_id.to_string());
    }

    /// The next settle to end, waiting for it; None when none runs.
    pub async fn next(&mut self) -> Option<(String, Result<bool>)> {
        let joined = self.tasks.join_next_with_id().await?;
        Some(self.ended(joined))
    }

    /// A settle that has ended, if any, without waiting.
    pub fn try_next(&mut self) -> Option<(String, Result<bool>)> {
        let joined = self.tasks.try_join_next_with_id()?;
        Some(self.ended(joined))
    }

    /// When the first resting job may be settled again.
    pub fn next_ready(&self, now: Instant) -> Option<Instant> {
        self.resting.values().copied().filter(|until| *until > now).min()
    }

    fn ended(
        &mut self,
        joined: std::result::Result<(Id, Result<bool>), tokio::task::JoinError>,
    ) -> (String, Result<bool>) {
        let (id, outcome) = match joined {
            Ok((id, outcome)) => (id, outcome),
            Err(error) => (error.id(), Err(Error::Storage(format!("settling the job failed: {error}")))),
        };
        let job_id = self.jobs.remove(&id).unwrap_or_default();
        if !matches!(outcome, Ok(true)) {
            let now = Instant::now();
            self.resting.retain(|_, until| *until > now);
            self.resting.insert(job_id.clone(), now + SETTLE_AGAIN_AFTER);
        }
        (job_id, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_is_left_alone_while_settling_and_rests_after_a_settle_that_did_not_end_it() {
        let mut settles = Settles::default();
        let (release, released) = tokio::sync::oneshot::channel::<bool>();
        settles.start("a", async move { Ok(released.await.unwrap_or(false)) });
        settles.start("b", async { Ok(true) });
        let now = Instant::now();
        assert!(settles.busy("a", now) && settles.busy("b", now) && !settles.busy("c", now));

        let (job, ended) = settles.next().await.expect("b ends first");
        assert_eq!((job.as_str(), ended.ok()), ("b", Some(true)));
        assert!(!settles.busy("b", Instant::now()), "an ended job is free at once");
        assert!(settles.next_ready(Instant::now()).is_none());

        release.send(false).expect("a waits");
        let (job, ended) = settles.next().await.expect("a ends");
        assert_eq!((job.as_str(), ended.ok()), ("a", Some(false)));
        let now = Instant::now();
        assert!(settles.busy("a", now), "not ended: it rests");
        assert!(!settles.busy("a", now + SETTLE_AGAIN_AFTER));
        assert!(settles.next_ready(now).is_some_and(|at| at > now));
        assert!(settles.is_empty() && settles.try_next().is_none());
    }

    #[tokio::test]
    async fn a_failed_or_panicked_settle_is_an_error_of_its_job() {
        let mut settles = Settles::default();
        settles.start("broken", async { panic!("settle bug") });
        let (job, ended) = settles.next().await.expect("ends");
        assert_eq!(job, "broken");
        assert!(matches!(ended, Err(Error::Storage(_))));
    }

    #[test]
    fn full_at_the_bound() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let _entered = runtime.enter();
        let mut settles = Settles::default();
        for i in 0..SETTLES_IN_FLIGHT {
            assert!(!settles.full());
            settles.start(&i.to_string(), std::future::pending());
        }
        assert!(settles.full());
    }
}
