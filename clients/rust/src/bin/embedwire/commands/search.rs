//! `embedwire search "query"`: the best chunks (or documents, with `--group-by
//! document`) as a table (rank, score, document id, chunk, a snippet of its text,
//! matching words [marked] with `--highlight`), or as JSON.

use embedwire_client::{Client, Filter, Fusion, Hit, SearchMode, SearchOptions};
use serde_json::{Value, json};

use crate::cli::{FusionArg, GroupByArg, ModeArg, SearchArgs};
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
        group_by_document: args.group_by.map(|GroupByArg::Document| args.group_size.unwrap_or(1)),
        highlight: args.highlight,
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
    // Grouped, a document's chunks follow one another and share its rank.
    let mut rank = 0;
    for (position, hit) in hits.iter().enumerate() {
        if args.group_by.is_none() || position == 0 || hits[position - 1].document_id != hit.document_id {
            rank += 1;
        }
        let mut row = vec![rank.to_string(), format!("{:.4}", hit.score)];
        if reranked {
            row.push(hit.rerank_score.map(|score| format!("{score:.4}")).unwrap_or_default());
        }
        let text = if args.highlight { marked(hit) } else { hit.text.clone() };
        row.extend([hit.document_id.clone(), hit.chunk.index.to_string(), snippet(&text, SNIPPET_CHARS)]);
        table.push(row);
    }
    print!("{}", table.render());
    Ok(())
}

/// The hit's text with its highlighted words in [brackets].
fn marked(hit: &Hit) -> String {
    let mut text = String::with_capacity(hit.text.len() + 2 * hit.highlights.len());
    let mut spans = hit.highlights.iter().map(|&(from, to)| (from - hit.chunk.start_char, to - hit.chunk.start_char));
    let mut span = spans.next();
    for (at, c) in (0u32..).zip(hit.text.chars()) {
        if span.is_some_and(|(from, _)| from == at) {
            text.push('[');
        }
        text.push(c);
        if let Some((_, to)) = span
            && to == at + 1
        {
            text.push(']');
            span = spans.next();
        }
    }
    text
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
        "highlights": hit.highlights.iter().map(|&(start_char, end_char)| json!({"start_char": start_char, "end_char": end_char})).collect::<Vec<_>>(),
    })
}
