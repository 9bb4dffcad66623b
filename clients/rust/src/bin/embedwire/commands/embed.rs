//! `embedwire embed`: texts in (arguments, a file, or stdin, one per line),
//! vectors out (JSON lines on stdout, or a `.npy` / raw float32 file).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;
use embedwire_client::{BulkOptions, Client, EmbedOptions, Embeddings, WireDtype};
use serde_json::json;

use crate::cli::{DtypeArg, EmbedArgs};
use crate::commands::{print_json, read_lines};
use crate::vectors_out;

pub async fn run(client: &Client, args: EmbedArgs, json_output: bool) -> anyhow::Result<()> {
    let texts = read_texts(&args)?;
    let options = EmbedOptions {
        normalize: args.no_normalize.then_some(false),
        dimensions: args.dimensions,
        truncate: None,
        dtype: match args.dtype {
            DtypeArg::Float32 => WireDtype::Float32,
            DtypeArg::Float16 => WireDtype::Float16,
            DtypeArg::Int8 => WireDtype::Int8,
        },
    };
    let bulk = BulkOptions { batch_size: args.batch_size, max_concurrent_requests: args.concurrency };
    let embeddings = client.embed_many(&texts, bulk, &options).await?;

    let (path, format) = match (&args.npy, &args.raw) {
        (Some(path), _) => (path, FileFormat::Npy),
        (None, Some(path)) => (path, FileFormat::Raw),
        (None, None) => {
            let mut out = BufWriter::new(std::io::stdout().lock());
            vectors_out::write_jsonl(&mut out, &embeddings)?;
            out.flush()?;
            return Ok(());
        }
    };
    write_file(path, format, &embeddings)?;
    if json_output {
        print_json(&json!({
            "file": path.display().to_string(),
            "format": format.name(),
            "count": embeddings.len(),
            "dim": embeddings.dim(),
            "dtype": "float32",
        }))
    } else {
        println!(
            "wrote {} x {} float32 vectors to {} ({})",
            embeddings.len(),
            embeddings.dim(),
            path.display(),
            format.name()
        );
        Ok(())
    }
}

/// The texts, from the arguments, the file, or stdin; one text per line for the
/// latter two (a line's `\r\n` ending is not part of the text).
fn read_texts(args: &EmbedArgs) -> anyhow::Result<Vec<String>> {
    let texts = if !args.texts.is_empty() {
        args.texts.clone()
    } else if let Some(path) = &args.file {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        read_lines(std::io::BufReader::new(file)).with_context(|| format!("reading {}", path.display()))?
    } else {
        read_lines(std::io::stdin().lock()).context("reading stdin")?
    };
    anyhow::ensure!(!texts.is_empty(), "no texts to embed (give them as arguments, with --file, or on stdin)");
    Ok(texts)
}

/// The file formats for vectors.
#[derive(Clone, Copy)]
enum FileFormat {
    Npy,
    Raw,
}

impl FileFormat {
    fn name(self) -> &'static str {
        match self {
            FileFormat::Npy => "npy",
            FileFormat::Raw => "raw",
        }
    }
}

fn write_file(path: &Path, format: FileFormat, embeddings: &Embeddings) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = BufWriter::new(file);
    match format {
        FileFormat::Npy => vectors_out::write_npy(&mut out, embeddings),
        FileFormat::Raw => vectors_out::write_raw(&mut out, embeddings),
    }
    .and_then(|()| out.flush())
    .with_context(|| format!("writing {}", path.display()))
}
