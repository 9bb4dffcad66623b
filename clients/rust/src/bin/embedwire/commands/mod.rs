//! One module per subcommand; each prints its result as text or, with `--json`,
//! as one JSON document (JSON lines for `embed`).

pub mod collections;
pub mod embed;
pub mod health;
pub mod info;
pub mod ingest;
pub mod job;
pub mod rerank;
pub mod search;

use std::io::{BufRead, Write};

use embedwire_client::Job;
use serde_json::{Value, json};

/// A job as JSON, the same shape for `ingest` and `job`.
pub fn job_json(job: &Job) -> Value {
    json!({
        "id": job.id,
        "status": job.status.as_str(),
        "total_documents": job.total_documents,
        "processed_documents": job.processed_documents,
        "failed_documents": job.failed_documents,
        "error": job.error,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "last_error": job.last_error,
        "retrying_since": job.retrying_since,
    })
}

/// A job in one line, for people.
pub fn job_line(job: &Job) -> String {
    let mut line = format!(
        "job {}: {}, {}/{} documents indexed, {} failed",
        job.id, job.status, job.processed_documents, job.total_documents, job.failed_documents
    );
    if let Some(error) = &job.error {
        line.push_str(&format!(" ({error})"));
    }
    if let Some(reason) = &job.last_error {
        let since = job.retrying_since.map(|since| format!(" for {:.0} s", (unix_now() - since).max(0.0)));
        line.push_str(&format!("; retrying{}: {reason}", since.unwrap_or_default()));
    }
    line
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Prints `value` as one line of JSON on stdout.
pub fn print_json(value: &Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// The lines of `reader`, one text each (a line's `\r\n` ending is not part of it).
pub fn read_lines(reader: impl BufRead) -> std::io::Result<Vec<String>> {
    reader.lines().map(|line| line.map(|l| l.strip_suffix('\r').map(str::to_string).unwrap_or(l))).collect()
}
