//! `embedwire ingest FILE.jsonl`: streams the file's documents to the server as
//! one IngestStream job, with a progress bar on a terminal.
//!
//! The file is read twice: a first pass checks every line (so a typo on line
//! 90 000 stops the command before anything is stored) and counts the documents
//! for the progress bar; the second pass streams them from a reader thread, never
//! holding more than a small buffer in memory.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};

use anyhow::Context;
use embedwire_client::{Client, Document};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::cli::IngestArgs;
use crate::commands::{job_json, job_line, print_json};

/// Documents parsed ahead of the network.
const READ_AHEAD: usize = 1024;

pub async fn run(client: &Client, args: IngestArgs, json_output: bool) -> anyhow::Result<()> {
    let total = check_file(&args.file)?;
    anyhow::ensure!(total > 0, "{} has no documents", args.file.display());

    let sent = progress_bar(total as u64, "sent");
    let documents = read_in_background(args.file.clone(), sent.clone());
    let receipt = client.ingest_stream(documents).await;
    sent.finish_and_clear();
    let receipt = receipt?;

    let job = if args.wait {
        let indexed = progress_bar(u64::from(receipt.received_documents), "indexed");
        let job = client
            .wait_job(&receipt.job.id, |job| {
                indexed.set_length(u64::from(job.total_documents));
                indexed.set_position(u64::from(job.processed_documents + job.failed_documents));
            })
            .await;
        indexed.finish_and_clear();
        job?
    } else {
        receipt.job
    };

    if json_output {
        print_json(&json!({ "received_documents": receipt.received_documents, "job": job_json(&job) }))
    } else {
        println!("stored {} documents", receipt.received_documents);
        println!("{}", job_line(&job));
        Ok(())
    }
}

/// A bar on stderr when it is a terminal; hidden otherwise, so logs and pipes
/// stay clean.
fn progress_bar(length: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length);
    let template = format!("{{bar:40}} {{pos}}/{{len}} documents {what} ({{per_sec}}, eta {{eta}})");
    bar.set_style(ProgressStyle::with_template(&template).expect("a valid template"));
    bar
}

/// Counts the documents of `path`, failing with `FILE:LINE: reason` at the first
/// bad line.
fn check_file(path: &Path) -> anyhow::Result<usize> {
    let mut count = 0;
    for_each_document(path, |_| {
        count += 1;
        true
    })?;
    Ok(count)
}

/// The documents of `path`, parsed on a thread and handed over through a bounded
/// channel; `sent` advances as the transport takes them.
fn read_in_background(path: PathBuf, sent: ProgressBar) -> impl futures::Stream<Item = Document> + Send + 'static {
    let (sender, receiver) = tokio::sync::mpsc::channel(READ_AHEAD);
    std::thread::spawn(move || {
        // The file was checked a moment ago; should it change meanwhile, the
        // stream ends at the first line that no longer parses.
        let _ = for_each_document(&path, |document| sender.blocking_send(document).is_ok());
    });
    futures::stream::unfold(receiver, move |mut receiver| {
        let sent = sent.clone();
        async move {
            let document = receiver.recv().await?;
            sent.inc(1);
            Some((document, receiver))
        }
    })
}

/// Calls `each` with every document of the JSONL file (blank lines skipped) until
/// it returns false.
fn for_each_document(path: &Path, mut each: impl FnMut(Document) -> bool) -> anyhow::Result<()> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let document =
            parse_document(&line).map_err(|reason| anyhow::anyhow!("{}:{}: {reason}", path.display(), index + 1))?;
        if !each(document) {
            break;
        }
    }
    Ok(())
}

/// One `{"id": ..., "text": ..., "metadata": {...}}` line. `text` is required;
/// numbers and booleans are accepted where strings are expected, as their JSON
/// text; other fields are ignored.
fn parse_document(line: &str) -> Result<Document, String> {
    let value: Value = serde_json::from_str(line).map_err(|error| format!("not JSON: {error}"))?;
    let Value::Object(mut object) = value else { return Err("expected a JSON object".to_string()) };
    let text = match object.remove("text") {
        Some(Value::String(text)) => text,
        Some(_) => return Err("`text` must be a string".to_string()),
        None => return Err("no `text` field".to_string()),
    };
    let id = match object.remove("id") {
        None | Some(Value::Null) => String::new(),
        Some(value) => scalar(value).ok_or("`id` must be a string or a number")?,
    };
    let mut document = Document::new(text).with_id(id);
    match object.remove("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(metadata)) => {
            for (key, value) in metadata {
                let value =
                    scalar(value).ok_or_else(|| format!("metadata `{key}` must be a string, number or boolean"))?;
                document = document.with_metadata(key, value);
            }
        }
        Some(_) => return Err("`metadata` must be an object".to_string()),
    }
    Ok(document)
}

/// A string as is; a number or boolean as its JSON text.
fn scalar(value: Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_documents_and_names_what_is_wrong() {
        let document = parse_document(r#"{"id": 7, "text": "hi", "metadata": {"lang": "en", "year": 2024}}"#).unwrap();
        assert_eq!(document.id, "7");
        assert_eq!(document.text, "hi");
        assert_eq!(document.metadata["year"], "2024");
        assert_eq!(parse_document(r#"{"text": "x"}"#).unwrap().id, "");
        assert_eq!(parse_document(r#"{"txt": "x"}"#).unwrap_err(), "no `text` field");
        assert!(parse_document(r#"{"text": "x", "metadata": {"k": [1]}}"#).unwrap_err().contains("metadata `k`"));
        assert!(parse_document("[1]").unwrap_err().contains("object"));
        assert!(parse_document("{").unwrap_err().starts_with("not JSON"));
    }
}
