//! `embedwire rerank --query Q FILE|-`: candidate texts (one per line) ordered by
//! relevance to the query, as a table (rank, score, the text's line, a snippet) or
//! as JSON.

use std::fs::File;

use anyhow::Context;
use embedwire_client::{Client, RerankOptions, Reranked, Truncation};
use serde_json::{Value, json};

use crate::cli::RerankArgs;
use crate::commands::{print_json, read_lines};
use crate::table::{Table, snippet};

/// Characters of text shown per row.
const SNIPPET_CHARS: usize = 70;

pub async fn run(client: &Client, args: RerankArgs, json_output: bool) -> anyhow::Result<()> {
    let texts = read_texts(&args)?;
    let options = RerankOptions {
        top_n: args.top_n,
        raw_scores: args.raw_scores,
        return_text: false,
        truncate: args.no_truncate.then_some(false),
        truncation: if args.truncate_left { Truncation::Left } else { Truncation::Right },
        max_tokens_per_text: None,
    };
    let reranked = client.rerank(&args.query, texts.iter().cloned(), &options).await?;
    if json_output {
        return print_json(&reranked_json(&reranked, &texts));
    }
    let mut table = Table::new(&["RANK", "SCORE", "LINE", "TEXT"]);
    for (rank, item) in reranked.ranks.iter().enumerate() {
        table.push(vec![
            (rank + 1).to_string(),
            format!("{:.4}", item.score),
            (item.index + 1).to_string(),
            snippet(&texts[item.index], SNIPPET_CHARS),
        ]);
    }
    print!("{}", table.render());
    println!("scored by {}", reranked.scorer);
    Ok(())
}

/// The texts of FILE, or of stdin for `-`; empty lines are skipped (a text must not
/// be empty), and LINE numbers count only the texts sent.
fn read_texts(args: &RerankArgs) -> anyhow::Result<Vec<String>> {
    let lines = if args.file.as_os_str() == "-" {
        read_lines(std::io::stdin().lock()).context("reading stdin")?
    } else {
        let file = File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
        read_lines(std::io::BufReader::new(file)).with_context(|| format!("reading {}", args.file.display()))?
    };
    let texts: Vec<String> = lines.into_iter().filter(|line| !line.trim().is_empty()).collect();
    anyhow::ensure!(!texts.is_empty(), "no texts to rerank in {}", args.file.display());
    Ok(texts)
}

fn reranked_json(reranked: &Reranked, texts: &[String]) -> Value {
    json!({
        "scorer": reranked.scorer,
        "model": reranked.model,
        "tokens": reranked.tokens,
        "ranks": reranked.ranks.iter().enumerate().map(|(rank, item)| json!({
            "rank": rank + 1,
            "index": item.index,
            "score": item.score,
            "text": texts[item.index],
        })).collect::<Vec<_>>(),
    })
}
