//! `Client::rerank` and `embedwire rerank` against a real server (the default model,
//! no cross-encoder: the server scores by cosine, so the answer can be checked
//! against the client's own Embed vectors).

use crate::common;

use common::{TempDir, address, cli, client, start, stdout_of};
use embedwire_client::{Code, RerankOptions, Truncation};
use serde_json::Value;

const ONNX: &[&str] = &["--backend", "onnx"];
const QUERY: &str = "How do I bake bread at home?";
const TEXTS: [&str; 4] = [
    "The stock market fell sharply on Tuesday.",
    "Knead the dough, let it rise, then bake the loaf for 30 minutes.",
    "Cats sleep for most of the day.",
    "Preheat the oven; bread bakes best on a hot stone.",
];

#[tokio::test]
async fn the_library_and_the_cli_rerank_by_the_servers_scorer() {
    let server = start(ONNX).await;
    let client = client(&[&server]).await;
    let info = client.info().await.unwrap();
    assert_eq!(info.rerank_scorer, "bi-encoder:sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(info.limits.max_rerank_texts, 1000);

    let reranked = client.rerank(QUERY, TEXTS, &RerankOptions::default()).await.unwrap();
    assert_eq!(reranked.scorer, info.rerank_scorer);
    assert_eq!(reranked.ranks.len(), 4);
    let best_two: Vec<usize> = reranked.ranks[..2].iter().map(|r| r.index).collect();
    assert!(best_two.contains(&1) && best_two.contains(&3), "the baking texts first: {:?}", reranked.ranks);
    assert!(reranked.ranks.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(reranked.tokens > 20 && !reranked.server_time.is_zero());
    let mut inputs = vec![QUERY];
    inputs.extend(TEXTS);
    let vectors = client.embed(inputs).await.unwrap();
    for rank in &reranked.ranks {
        let cosine: f32 = vectors.row(0).iter().zip(vectors.row(rank.index + 1)).map(|(a, b)| a * b).sum();
        assert!((rank.score - cosine).abs() < 1e-5, "text {}: {} vs {cosine}", rank.index, rank.score);
    }
    let options =
        RerankOptions { top_n: Some(1), return_text: true, truncation: Truncation::Left, ..Default::default() };
    let top = client.rerank(QUERY, TEXTS, &options).await.unwrap();
    assert_eq!(top.ranks.len(), 1);
    assert_eq!(top.ranks[0].index, reranked.ranks[0].index);
    assert_eq!(top.ranks[0].text.as_deref(), Some(TEXTS[top.ranks[0].index]));
    let refused = client.rerank(QUERY, ["fine", ""], &RerankOptions::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.to_string().contains("texts[1]: is empty"), "{refused}");

    // The CLI: a file (blank lines skipped) and stdin give the same ranks as the library.
    let server_flag = address(&server);
    let dir = TempDir::new("cli-rerank");
    let file = dir.file("texts.txt");
    std::fs::write(&file, format!("{}\n\n{}\n", TEXTS.join("\n"), "")).unwrap();
    let from_file =
        stdout_of(&cli(&["--server", &server_flag, "rerank", "-q", QUERY, file.to_str().unwrap()], None).await);
    let lines: Vec<&str> = from_file.lines().collect();
    assert!(lines[0].starts_with("RANK") && lines[0].contains("SCORE"), "{from_file}");
    let first_line = reranked.ranks[0].index + 1;
    assert!(lines[1].split_whitespace().nth(2) == Some(first_line.to_string().as_str()), "{from_file}");
    assert!(from_file.ends_with("scored by bi-encoder:sentence-transformers/all-MiniLM-L6-v2\n"), "{from_file}");
    let stdin = TEXTS.join("\n");
    let args = ["--server", &server_flag, "--json", "rerank", "--query", QUERY, "--top-n", "2", "-"];
    let json: Value = serde_json::from_str(&stdout_of(&cli(&args, Some(&stdin)).await)).unwrap();
    let indices: Vec<u64> = json["ranks"].as_array().unwrap().iter().map(|r| r["index"].as_u64().unwrap()).collect();
    let expected: Vec<u64> = reranked.ranks[..2].iter().map(|r| r.index as u64).collect();
    assert_eq!(indices, expected);
    assert_eq!(json["ranks"][0]["text"], TEXTS[expected[0] as usize]);

    // Errors: the server's refusal (exit 4) and an empty input (exit 1).
    let long = (0..2000).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let input = format!("short\n{long}");
    let output = cli(&["--server", &server_flag, "rerank", "-q", QUERY, "--no-truncate", "-"], Some(&input)).await;
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: INVALID_ARGUMENT: texts[1]: "), "{output:?}");
    let output = cli(&["--server", &server_flag, "rerank", "-q", QUERY, "-"], Some("\n\n")).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no texts to rerank"), "{output:?}");
    server.stop().await.unwrap();
}
