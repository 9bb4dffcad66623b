//! The `embedwire` binary against a real server (pseudo backend): every command's
//! output, the `--json` forms, and the error messages and exit codes.

use crate::common;

use common::{PSEUDO, TempDir, address, cli, client, dead_address, start, stdout_of};
use serde_json::Value;

fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| panic!("not JSON ({error}): {text}"))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[tokio::test]
async fn embed_writes_jsonl_npy_and_raw() {
    let server = start(PSEUDO).await;
    let server_flag = address(&server);
    let expected = client(&[&server]).await.embed(["alpha", "beta gamma", "délta"]).await.unwrap();

    // JSON lines from arguments, stdin and a file are the same vectors, bit for bit.
    let from_args = stdout_of(&cli(&["--server", &server_flag, "embed", "alpha", "beta gamma", "délta"], None).await);
    let from_stdin = stdout_of(&cli(&["--server", &server_flag, "embed"], Some("alpha\nbeta gamma\r\ndélta\n")).await);
    let dir = TempDir::new("cli-embed");
    let texts = dir.file("texts.txt");
    std::fs::write(&texts, "alpha\nbeta gamma\ndélta\n").unwrap();
    let from_file =
        stdout_of(&cli(&["--server", &server_flag, "embed", "--file", texts.to_str().unwrap()], None).await);
    assert_eq!(from_args, from_stdin);
    assert_eq!(from_args, from_file);
    let lines: Vec<Value> = from_args.lines().map(parse_json).collect();
    assert_eq!(lines.len(), 3);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["index"], i);
        let values: Vec<f32> =
            line["embedding"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(values, expected.row(i), "row {i}");
    }

    // .npy: numpy's format 1.0 header, then the values.
    let npy = dir.file("out.npy");
    let said = stdout_of(
        &cli(
            &["--server", &server_flag, "embed", "alpha", "beta gamma", "délta", "--npy", npy.to_str().unwrap()],
            None,
        )
        .await,
    );
    assert!(said.starts_with("wrote 3 x 384 float32 vectors to "), "{said}");
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0, "data starts 64-aligned");
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert_eq!(header.trim_end(), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 384), }");
    assert!(header.ends_with('\n'));
    assert_eq!(f32s(&bytes[10 + header_len..]), expected.as_slice());

    // Raw: the values alone; --json describes the file.
    let raw = dir.file("out.f32");
    let said = stdout_of(
        &cli(
            &[
                "--server",
                &server_flag,
                "--json",
                "embed",
                "alpha",
                "beta gamma",
                "délta",
                "--raw",
                raw.to_str().unwrap(),
            ],
            None,
        )
        .await,
    );
    let described = parse_json(&said);
    assert_eq!((described["count"].as_u64(), described["dim"].as_u64()), (Some(3), Some(384)));
    assert_eq!(described["format"], "raw");
    assert_eq!(f32s(&std::fs::read(&raw).unwrap()), expected.as_slice());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn ingest_then_job_then_search_shows_the_document() {
    let server = start(PSEUDO).await;
    let server_flag = address(&server);
    let dir = TempDir::new("cli-ingest");
    let file = dir.file("docs.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"id": "rust", "text": "Rust is a systems programming language.", "metadata": {"kind": "lang"}}"#,
            "\n",
            r#"{"id": "bread", "text": "Bread is made of flour, water and yeast.", "metadata": {"kind": "food"}}"#,
            "\n\n",
            r#"{"id": "python", "text": "Python is popular for data science.", "metadata": {"kind": "lang"}}"#,
            "\n"
        ),
    )
    .unwrap();

    let receipt = parse_json(&stdout_of(
        &cli(&["--server", &server_flag, "--json", "ingest", file.to_str().unwrap()], None).await,
    ));
    assert_eq!(receipt["received_documents"], 3);
    let job_id = receipt["job"]["id"].as_str().unwrap().to_string();

    let waited = stdout_of(&cli(&["--server", &server_flag, "job", &job_id, "--wait"], None).await);
    assert!(
        waited.trim_end().ends_with(&format!("job {job_id}: COMPLETED, 3/3 documents indexed, 0 failed")),
        "{waited}"
    );
    let job = parse_json(&stdout_of(&cli(&["--server", &server_flag, "--json", "job", &job_id], None).await));
    assert_eq!((job["status"].as_str(), job["processed_documents"].as_u64()), (Some("COMPLETED"), Some(3)));

    let table =
        stdout_of(&cli(&["--server", &server_flag, "search", "Bread is made of flour, water and yeast."], None).await);
    let mut lines = table.lines();
    assert_eq!(lines.next().unwrap().split_whitespace().collect::<Vec<_>>(), ["RANK", "SCORE", "ID", "CHUNK", "TEXT"]);
    let first: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&first[..4], ["1", "1.0000", "bread", "0"], "{table}");
    assert_eq!(first[4..].join(" "), "Bread is made of flour, water and yeast.");
    assert_eq!(table.lines().count(), 4, "header and three hits:\n{table}");

    let filtered = stdout_of(
        &cli(&["--server", &server_flag, "--json", "search", "Bread", "--filter", "kind=lang", "-k", "10"], None).await,
    );
    let hits = parse_json(&filtered);
    let ids: Vec<&str> = hits.as_array().unwrap().iter().map(|hit| hit["document_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"rust") && ids.contains(&"python"), "{filtered}");
    assert_eq!(hits[0]["rank"], 1);

    // Grouped by document, with the query's words [marked].
    let grouped = stdout_of(
        &cli(
            &[
                "--server",
                &server_flag,
                "search",
                "bread yeast",
                "--mode",
                "keyword",
                "--group-by",
                "document",
                "--highlight",
            ],
            None,
        )
        .await,
    );
    let row: Vec<&str> = grouped.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((row[0], row[2]), ("1", "bread"), "{grouped}");
    assert_eq!(row[4..].join(" "), "[Bread] is made of flour, water and [yeast].", "{grouped}");
    assert_eq!(grouped.lines().count(), 2, "one document holds the words:\n{grouped}");

    // Ingest --wait follows the job to its end.
    let waited = stdout_of(&cli(&["--server", &server_flag, "ingest", file.to_str().unwrap(), "--wait"], None).await);
    assert!(waited.starts_with("stored 3 documents\n") && waited.contains(": COMPLETED, 3/3"), "{waited}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn info_and_health() {
    let server = start(PSEUDO).await;
    let server_flag = address(&server);
    let info = stdout_of(&cli(&["--server", &server_flag, "info"], None).await);
    assert!(info.lines().any(|line| line.split_whitespace().collect::<Vec<_>>() == ["dim:", "384"]), "{info}");
    assert!(info.contains("backend:                pseudo"), "{info}");
    let info = parse_json(&stdout_of(&cli(&["--server", &server_flag, "--json", "info"], None).await));
    assert_eq!(info["dim"], 384);
    assert!(info["limits"]["max_inputs_per_request"].as_u64().unwrap() > 0);

    let health = stdout_of(&cli(&["--server", &server_flag, "health"], None).await);
    assert_eq!(health, format!("{}  SERVING\n", server.address));

    // Several servers, one down: each is reported and the exit code says not all serve.
    let dead = dead_address();
    let output = cli(&["--server", &format!("{server_flag},{dead}"), "--json", "health"], None).await;
    assert_eq!(output.status.code(), Some(3));
    let reports = parse_json(&String::from_utf8(output.stdout).unwrap());
    assert_eq!(reports[0]["status"], "SERVING");
    assert_eq!(reports[1]["status"], "UNREACHABLE");
    assert_eq!(reports[1]["error"], format!("cannot reach {dead}: connection refused"));

    // Calls go around the dead server.
    let output = cli(&["--server", &dead, "--server", &server_flag, "embed", "still works"], None).await;
    assert_eq!(stdout_of(&output).lines().count(), 1);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn failures_print_one_line_and_exit_with_their_code() {
    let dead = dead_address();
    let output = cli(&["--server", &dead, "embed", "hello"], None).await;
    assert_eq!(String::from_utf8_lossy(&output.stderr), format!("error: cannot reach {dead}: connection refused\n"));
    assert_eq!(output.status.code(), Some(3), "unavailable");
    assert!(output.stdout.is_empty());

    let server = start(PSEUDO).await;
    let server_flag = address(&server);
    let output = cli(&["--server", &server_flag, "embed", "fine", ""], None).await;
    assert_eq!(String::from_utf8_lossy(&output.stderr), "error: INVALID_ARGUMENT: inputs[1]: is empty\n");
    assert_eq!(output.status.code(), Some(4), "server refused");

    let output = cli(&["--server", &server_flag, "job", "no-such-job"], None).await;
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: NOT_FOUND: "), "{output:?}");
    assert_eq!(output.status.code(), Some(4));

    let dir = TempDir::new("cli-errors");
    let file = dir.file("bad.jsonl");
    std::fs::write(&file, "{\"text\": \"ok\"}\n{\"txt\": \"typo\"}\n").unwrap();
    let output = cli(&["--server", &server_flag, "ingest", file.to_str().unwrap()], None).await;
    assert_eq!(String::from_utf8_lossy(&output.stderr), format!("error: {}:2: no `text` field\n", file.display()));
    assert_eq!(output.status.code(), Some(1));
    let stats = client(&[&server]).await.index_stats().await.unwrap();
    assert_eq!(stats.document_count + stats.pending_documents, 0, "nothing stored from a bad file");

    let output = cli(&["--server", &server_flag, "--ca-file", "/nonexistent/ca.pem", "health"], None).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("error: invalid server address"), "an http:// address with a CA file: {stderr}");
    let output = cli(&["--server", "127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem", "health"], None).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("error: cannot read CA file /nonexistent/ca.pem: "), "{stderr}");
    assert_eq!(output.status.code(), Some(1));

    let output = cli(&["--server", &server_flag, "embed", "--no-such-flag"], None).await;
    assert_eq!(output.status.code(), Some(2), "usage");
    server.stop().await.unwrap();
}
