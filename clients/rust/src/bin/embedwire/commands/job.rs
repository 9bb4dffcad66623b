//! `embedwire job ID`: where an ingestion job stands, or (`--wait`) its progress
//! until it finishes.

use embedwire_client::Client;

use crate::cli::JobArgs;
use crate::commands::{job_json, job_line, print_json};

pub async fn run(client: &Client, args: JobArgs, json_output: bool) -> anyhow::Result<()> {
    let job = if args.wait {
        client
            .wait_job(&args.id, |job| {
                if !json_output && !job.status.is_finished() {
                    println!("{}", job_line(job));
                }
            })
            .await?
    } else {
        client.get_job(&args.id).await?
    };
    if json_output {
        return print_json(&job_json(&job));
    }
    println!("{}", job_line(&job));
    Ok(())
}
