//! Admission control: a bound on inputs in flight. A request that would pass it is
//! refused at once with RESOURCE_EXHAUSTED instead of queueing without end, so
//! overload shows up as fast errors the client can retry, not as growing latency.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// The retry hint of a refusal for inputs in flight: the limiter knows no model
/// speed, and a client coming back after about a batch finds room as soon as
/// some work drains.
const IN_FLIGHT_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Counts admitted inputs against a fixed budget.
#[derive(Debug, Clone)]
pub struct InFlightLimiter {
    permits: Arc<Semaphore>,
    limit: usize,
}

/// Holds a request's share of the budget until it is dropped.
#[derive(Debug)]
pub struct Admission {
    _permit: OwnedSemaphorePermit,
}

impl InFlightLimiter {
    /// A limiter admitting at most `limit` inputs at once.
    pub fn new(limit: usize) -> Self {
        InFlightLimiter { permits: Arc::new(Semaphore::new(limit)), limit }
    }

    /// Admits `inputs` inputs now or fails with RESOURCE_EXHAUSTED.
    pub fn try_admit(&self, inputs: usize) -> Result<Admission> {
        let overloaded = || Error::Overloaded {
            reason: format!(
                "server overloaded: {inputs} more inputs would pass the limit of {} in flight \
                 (--max-in-flight-inputs); retry after the hinted delay",
                self.limit
            ),
            retry_after: IN_FLIGHT_RETRY_AFTER,
        };
        let count = u32::try_from(inputs).map_err(|_| overloaded())?;
        self.permits
            .clone()
            .try_acquire_many_owned(count)
            .map(|permit| Admission { _permit: permit })
            .map_err(|_| overloaded())
    }

    /// Inputs in flight now.
    pub fn in_flight(&self) -> usize {
        self.limit - self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_frees_on_drop() {
        let limiter = InFlightLimiter::new(3);
        let first = limiter.try_admit(2).unwrap();
        assert!(matches!(limiter.try_admit(2), Err(Error::Overloaded { .. })));
        assert_eq!(limiter.in_flight(), 2);
        drop(first);
        assert!(limiter.try_admit(3).is_ok());
    }
}
