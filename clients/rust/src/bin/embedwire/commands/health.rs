//! `embedwire health`: each server's health status. Exits non-zero unless every
//! server is SERVING, so scripts can wait on it.

use embedwire_client::{Client, HealthStatus};
use serde_json::{Value, json};

use crate::commands::print_json;

/// True when every server is serving.
pub async fn run(client: &Client, json_output: bool) -> anyhow::Result<bool> {
    let reports = client.health().await;
    let all_serving = reports.iter().all(|report| matches!(report.status, Ok(HealthStatus::Serving)));
    if json_output {
        let servers = reports
            .iter()
            .map(|report| match &report.status {
                Ok(status) => json!({ "address": report.address, "status": status.as_str() }),
                Err(error) => json!({ "address": report.address, "status": "UNREACHABLE", "error": error.to_string() }),
            })
            .collect();
        print_json(&Value::Array(servers))?;
    } else {
        for report in &reports {
            match &report.status {
                Ok(status) => println!("{}  {}", report.address, status.as_str()),
                Err(error) => println!("{}  {error}", report.address),
            }
        }
    }
    Ok(all_serving)
}
