//! The server's own counters (`GET /metrics`, on the gRPC port), read before and after a run: what the server did
//! during it (batches, the model's busy time, refusals), not only what its clients saw.

use std::{collections::HashMap, net::SocketAddr};

use crate::{http_client::HttpConnection, wire_count::ByteCounters};

/// The unlabelled samples of one read of /metrics: counters, gauges, histograms' `_sum` and `_count` (not the buckets).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot(HashMap<String, f64>);

impl MetricsSnapshot {
    pub async fn read(address: SocketAddr) -> anyhow::Result<Self> {
        let mut connection = HttpConnection::open(address, ByteCounters::new()).await?;
        let response = connection.get("/metrics").await?;
        response.ensure_success()?;
        Ok(Self::parse(&String::from_utf8_lossy(&response.body)))
    }

    /// The samples of a Prometheus text page.
    pub fn parse(text: &str) -> Self {
        let samples = text.lines().filter(|line| !line.starts_with('#')).filter_map(|line| {
            let (name, value) = line.split_once(' ').filter(|(name, _)| !name.contains('{'))?;
            Some((name.to_string(), value.trim().parse().ok()?))
        });
        MetricsSnapshot(samples.collect())
    }

    /// A sample's value; 0 when the page did not have it.
    pub fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    /// How much a counter grew since `earlier`.
    pub fn since(&self, earlier: &MetricsSnapshot, name: &str) -> f64 {
        self.get(name) - earlier.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_and_histogram_sums_and_skips_labels() {
        let page = "# TYPE embedwire_rerank_batches_total counter\n\
                    embedwire_rerank_batches_total 12\n\
                    embedwire_rerank_inference_seconds_sum 1.5\n\
                    embedwire_rerank_inference_seconds_bucket{le=\"0.1\"} 3\n";
        let before = MetricsSnapshot::parse(page);
        assert_eq!(before.get("embedwire_rerank_inference_seconds_sum"), 1.5);
        assert_eq!(before.get("embedwire_rerank_inference_seconds_bucket"), 0.0);
        let after = MetricsSnapshot::parse("embedwire_rerank_batches_total 20\n");
        assert_eq!(after.since(&before, "embedwire_rerank_batches_total"), 8.0);
    }
}
