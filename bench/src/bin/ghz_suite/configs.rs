//! The ghz configs checked in under `bench/ghz/`: one JSON file per call shape, with
//! real query sentences of the docstring corpus as data (the Embed and EmbedStream
//! configs all cycle through the same 256 sentences, in calls of 1, 32 or 256, so
//! their texts/s compare; ghz sends the messages of an array in turn), runnable by hand
//! (`ghz --config bench/ghz/embed-256.json -c 16 -z 5s 127.0.0.1:50051` from the
//! workspace root). `ghz-suite --write-configs` regenerates them; the suite adds
//! the host, concurrency and duration on the command line, which ghz lets override
//! the file.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};

/// Query sentences rotated through by the Search config.
const SEARCH_QUERIES: usize = 64;
/// EmbedStream: messages per stream, texts per message (256 texts per stream).
const STREAM_MESSAGES: usize = 8;
const STREAM_TEXTS: usize = 32;

/// One checked-in config, as the suite uses it.
#[derive(Debug, Clone)]
pub struct SuiteFile {
    /// The file stem, e.g. `embed-256`.
    pub stem: String,
    pub path: PathBuf,
    pub call: String,
    /// Texts embedded per ghz request (a whole stream for EmbedStream).
    pub texts_per_call: usize,
    /// Needs a populated index.
    pub is_search: bool,
}

fn base(name: &str, call: &str, proto: &str, data: Value) -> Value {
    json!({
        "name": name,
        "call": call,
        "proto": proto,
        "import-paths": ["proto"],
        "insecure": true,
        // The data is sent as is: templating 256 texts per call would load ghz, not
        // the server.
        "disable-template-functions": true,
        "disable-template-data": true,
        // 64 calls of 256 texts on the real model take longer than ghz's default
        // 20 s deadline to drain; the suite measures throughput, not deadlines.
        "timeout": "300s",
        "data": data,
    })
}

/// The configs' contents from `queries` (at least 256 sentences).
pub fn contents(queries: &[String]) -> anyhow::Result<Vec<(&'static str, Value)>> {
    anyhow::ensure!(queries.len() >= 256, "{} query sentences, 256 needed", queries.len());
    let embed = |name, texts: usize| {
        let calls: Vec<Value> = queries[..256].chunks(texts).map(|chunk| json!({"inputs": chunk})).collect();
        let data = if calls.len() == 1 { calls[0].clone() } else { json!(calls) };
        base(name, "embedwire.v1.EmbedService/Embed", "proto/embedwire/v1/embed.proto", data)
    };
    let stream: Vec<Value> = (0..STREAM_MESSAGES)
        .map(|m| {
            let texts = &queries[m * STREAM_TEXTS..(m + 1) * STREAM_TEXTS];
            json!({"request_id": m.to_string(), "request": {"inputs": texts}})
        })
        .collect();
    let searches: Vec<Value> = (0..SEARCH_QUERIES)
        .map(|i| json!({"queries": [{"text": queries[i * queries.len() / SEARCH_QUERIES]}], "top_k": 5}))
        .collect();
    Ok(vec![
        ("embed-1", embed("embed-1", 1)),
        ("embed-32", embed("embed-32", 32)),
        ("embed-256", embed("embed-256", 256)),
        (
            "embed-stream",
            base(
                "embed-stream",
                "embedwire.v1.EmbedService/EmbedStream",
                "proto/embedwire/v1/embed.proto",
                json!(stream),
            ),
        ),
        (
            "search",
            base("search", "embedwire.v1.SearchService/Search", "proto/embedwire/v1/search.proto", json!(searches)),
        ),
    ])
}

/// Writes the configs into `dir`.
pub fn write_all(dir: &Path, queries: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for (stem, value) in contents(queries)? {
        let path = dir.join(format!("{stem}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&value)? + "\n")?;
        written.push(path);
    }
    Ok(written)
}

/// Texts a config's data embeds per request.
fn texts_per_call(call: &str, data: &Value) -> usize {
    let inputs = |v: &Value| v.get("inputs").and_then(Value::as_array).map_or(0, Vec::len);
    match data {
        _ if call.ends_with("/Search") => 1,
        Value::Array(messages) if call.ends_with("/EmbedStream") => {
            messages.iter().map(|m| m.get("request").map_or(0, inputs)).sum()
        }
        Value::Array(calls) => calls.first().map_or(0, inputs),
        other => inputs(other),
    }
}

/// The configs in `dir` (sorted by name), only those in `only` when it is not empty.
pub fn read_all(dir: &Path, only: &[String]) -> anyhow::Result<Vec<SuiteFile>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
        if path.extension().is_none_or(|e| e != "json") || (!only.is_empty() && !only.contains(&stem)) {
            continue;
        }
        let value: Value =
            serde_json::from_slice(&std::fs::read(&path)?).with_context(|| format!("parsing {}", path.display()))?;
        let call =
            value.get("call").and_then(Value::as_str).with_context(|| format!("{} has no call", path.display()))?;
        let texts = texts_per_call(call, value.get("data").unwrap_or(&Value::Null));
        files.push(SuiteFile {
            stem,
            path: path.clone(),
            call: call.to_string(),
            texts_per_call: texts,
            is_search: call.ends_with("/Search"),
        });
    }
    files.sort_by(|a, b| a.stem.cmp(&b.stem));
    anyhow::ensure!(!files.is_empty(), "no ghz configs in {} (run ghz-suite --write-configs)", dir.display());
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_count_their_texts() {
        let queries: Vec<String> = (0..300).map(|i| format!("query number {i}")).collect();
        let dir = std::env::temp_dir().join(format!("ghz-configs-{}", std::process::id()));
        write_all(&dir, &queries).unwrap();
        let files = read_all(&dir, &[]).unwrap();
        let texts: Vec<(&str, usize, bool)> =
            files.iter().map(|f| (f.stem.as_str(), f.texts_per_call, f.is_search)).collect();
        assert_eq!(
            texts,
            [
                ("embed-1", 1, false),
                ("embed-256", 256, false),
                ("embed-32", 32, false),
                ("embed-stream", 256, false),
                ("search", 1, true)
            ]
        );
        assert_eq!(read_all(&dir, &["search".into()]).unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
