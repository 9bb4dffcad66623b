//! `embedwire search "query"`: the best chunks as a table (rank, score, document
//! id, chunk, a snippet of its text), or as JSON.

use embedwire_client::{Client, Filter, Fusion, Hit, SearchMode, SearchOptions};
use serde_json::{Value, json};

use crate::cli::{FusionArg, ModeArg, SearchArgs};
use crate::commands::print_json;
use crate::table::{Table, snippet};

/// Characters of chunk text shown per row.
const SNIPPET_CHARS: usize = 60;

pub async fn run(client: &Client, args: SearchArgs, json_output: bool) -> anyhow::Result<()> {
    let filter = (!args.filters.is_empty())
        .then(|| args.filters.iter().fold(Filter::new(), |filter, (key, value)| filter.must_equal(key, value)));
    let options = SearchOptions {
        top_k: Some(args.top_k),
        score_threshold: args.threshold,
        filter,
        rerank: args.rerank,
        mode: match args.mode {
            ModeArg::Vector => SearchMode::Vector,
            ModeArg::Keyword => SearchMode::Keyword,
            ModeArg::Hybrid => SearchMode::Hybrid,
        },
        alpha: args.alpha,
        fusion: args.fusion.map(|fusion| match fusion {
            FusionArg::Rrf => Fusion::ReciprocalRank,
            FusionArg::RelativeScore => Fusion::RelativeScore,
        }),
        ..SearchOptions::default()
    };
    let hits = client.search(args.query.as_str(), &options).await?;
    if json_output {
        return print_json(&Value::Array(hits.iter().enumerate().map(|(rank, hit)| hit_json(rank + 1, hit)).collect()));
    }
    if hits.is_empty() {
        println!("no hits");
        return Ok(());
    }
    let reranked = hits.iter().any(|hit| hit.rerank_score.is_some());
    let mut header = vec!["RANK", "SCORE"];
    if reranked {
        header.push("RERANK");
    }
    header.extend(["ID", "CHUNK", "TEXT"]);
    let mut table = Table::new(&header);
    for (rank, hit) in hits.iter().enumerate() {
        let mut row = vec![(rank + 1).to_string(), format!("{:.4}", hit.score)];
        if reranked {
            row.push(hit.rerank_score.map(|score| format!("{score:.4}")).unwrap_or_default());
        }
        row.extend([hit.document_id.clone(), hit.chunk.index.to_string(), snippet(&hit.text, SNIPPET_CHARS)]);
        table.push(row);
    }
    print!("{}", table.render());
    Ok(())
}

fn hit_json(rank: usize, hit: &Hit) -> Value {
    json!({
        "rank": rank,
        "document_id": hit.document_id,
        "chunk": { "index": hit.chunk.index, "start_char": hit.chunk.start_char, "end_char": hit.chunk.end_char },
        "score": hit.score,
        "vector_score": hit.vector_score,
        "keyword_score": hit.keyword_score,
        "rerank_score": hit.rerank_score,
        "text": hit.text,
        "metadata": hit.metadata,
    })
}
