//! Weaviate's replica errors, said in words a user can act on.
//!
//! Weaviate resolves a consistency level per shard against the replicas it can reach
//! right now (`cluster/router/types/replicaset.go` in v1.35: QUORUM is n/2 + 1 of the
//! n replicas it finds). With replication factor 2 and one node down, a shard with a
//! replica on that node resolves QUORUM to 1 and the others to 2, and any call that
//! spans shards fails with `inconsistent consistency levels: shard A resolved to 2,
//! shard B resolved to 1`. That text names neither the replicas missing nor what to
//! do, and it names one of the degraded shards at random (Go map order), which would
//! read as a new error on every try. [`ReplicaErrors`] turns it into "shard B: 1 of 2
//! replicas reachable; consistency QUORUM needs 2", naming every shard seen degraded
//! lately in a stable order.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::convert::level_name;
use crate::config::Consistency;

/// How long a shard seen short of replicas is still named in explanations.
const REMEMBER_DEGRADED: Duration = Duration::from_secs(30);

/// Replicas a level needs out of `n` reachable ones, as Weaviate counts them.
fn needed(level: Consistency, n: usize) -> usize {
    match level {
        Consistency::One => 1,
        Consistency::Quorum => n / 2 + 1,
        Consistency::All => n,
    }
}

/// Explains Weaviate's replica errors, remembering degraded shards for a while.
#[derive(Debug)]
pub struct ReplicaErrors {
    /// The collections' replication factor.
    replication_factor: usize,
    /// Shards seen short of replicas: replicas reachable, when last seen.
    degraded: Mutex<BTreeMap<String, (usize, Instant)>>,
}

impl ReplicaErrors {
    pub fn new(replication_factor: usize) -> Self {
        ReplicaErrors { replication_factor, degraded: Mutex::new(BTreeMap::new()) }
    }

    /// The reason behind a Weaviate error `message` of a call at `level`, or `None`
    /// when it is not a replica error.
    pub fn explain(&self, message: &str, level: Consistency) -> Option<String> {
        let rf = self.replication_factor;
        if let Some((shard, reachable)) = self.short_shard(message, level) {
            let now = Instant::now();
            let mut degraded = self.degraded.lock().unwrap_or_else(|p| p.into_inner());
            degraded.retain(|_, (_, seen)| now.duration_since(*seen) < REMEMBER_DEGRADED);
            degraded.insert(shard, (reachable, now));
            let shards: Vec<String> = degraded
                .iter()
                .map(|(shard, (reachable, _))| format!("shard {shard}: {reachable} of {rf} replicas reachable"))
                .collect();
            return Some(format!(
                "{}; consistency {} needs {} (is a Weaviate node down?)",
                shards.join(", "),
                level_name(level),
                needed(level, rf)
            ));
        }
        if message.contains("cannot achieve consistency level") || message.contains("cannot reach enough replicas") {
            return Some(format!(
                "fewer replicas answered than consistency {} needs ({} of {rf}; is a Weaviate node down?)",
                level_name(level),
                needed(level, rf)
            ));
        }
        None
    }

    /// The degraded shard a replica error names, with the replicas reachable there.
    fn short_shard(&self, message: &str, level: Consistency) -> Option<(String, usize)> {
        // "shard S: impossible to satisfy consistency level (N) > available replicas (M)"
        if let Some(at) = message.find(": impossible to satisfy consistency level") {
            let shard = message[..at].rsplit("shard ").next()?.trim().to_string();
            let available = message[at..].split("available replicas (").nth(1)?.split(')').next()?.parse().ok()?;
            return Some((shard, available));
        }
        // "inconsistent consistency levels: shard A resolved to X, shard B resolved to Y"
        let rest = message.split("inconsistent consistency levels: ").nth(1)?;
        let mut resolved = rest.split(", ").take(2).map(|part| {
            let part = part.trim().strip_prefix("shard ")?;
            let (shard, count) = part.split_once(" resolved to ")?;
            let count: usize = count.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
            Some((shard.to_string(), count))
        });
        let (a, b) = (resolved.next()??, resolved.next()??);
        let (shard, level_count) = if a.1 <= b.1 { a } else { b };
        // The most replicas (fewer than all) that resolve to that count.
        let reachable =
            (1..self.replication_factor).rev().find(|n| needed(level, *n) == level_count).unwrap_or(level_count);
        Some((shard, reachable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weaviate v1.35.2's text, as the server logged it (issue 29).
    fn inconsistent(first: &str, first_count: usize, second: &str, second_count: usize) -> String {
        format!(
            "weaviate store: read_pending failed at 127.0.0.1:50071: explorer: list class: search: object search at \
             index embedwirepending: inconsistent consistency levels: shard {first} resolved to {first_count}, \
             shard {second} resolved to {second_count}"
        )
    }

    #[test]
    fn a_shard_short_of_a_replica_at_rf_2_is_named_with_what_quorum_needs() {
        let errors = ReplicaErrors::new(2);
        let reason = errors.explain(&inconsistent("aaa111", 2, "bbb222", 1), Consistency::Quorum).unwrap();
        assert_eq!(
            reason,
            "shard bbb222: 1 of 2 replicas reachable; consistency QUORUM needs 2 (is a Weaviate node down?)"
        );
    }

    #[test]
    fn degraded_shards_are_named_in_a_stable_order_whichever_weaviate_picks() {
        let errors = ReplicaErrors::new(2);
        errors.explain(&inconsistent("ccc333", 1, "aaa111", 2), Consistency::Quorum).unwrap();
        let both = errors.explain(&inconsistent("aaa111", 2, "bbb222", 1), Consistency::Quorum).unwrap();
        let again = errors.explain(&inconsistent("ccc333", 1, "aaa111", 2), Consistency::Quorum).unwrap();
        assert_eq!(both, again, "the same outage reads the same");
        assert!(both.starts_with("shard bbb222: 1 of 2 replicas reachable, shard ccc333: 1 of 2"), "{both}");
    }

    #[test]
    fn other_errors_are_left_alone() {
        let errors = ReplicaErrors::new(3);
        assert_eq!(errors.explain("weaviate store: search failed at x: class not found", Consistency::Quorum), None);
        let reason = errors
            .explain("put: cannot achieve consistency level \"ALL\": cannot reach enough replicas", Consistency::All)
            .unwrap();
        assert!(reason.contains("consistency ALL") && reason.contains("3 of 3"), "{reason}");
    }
}
