//! Runs `embedwire-bench rerank --quick` end to end (the full-size cross-encoder in-process,
//! real server binaries with and without it, real gRPC clients, docstring texts) so
//! the bench cannot rot. It checks that the bench runs, prints every figure and
//! writes its files; it never judges the figures, since tests do not assert on speed.

mod common;

#[test]
fn quick_run_prints_the_tables_and_writes_csv() {
    let (stdout, results_dir) = common::run_scenario("rerank");
    for figure in [
        "in-process ceiling (best batch)",
        "tokenize one call (20 pairs)",
        "in-process batch-20 call p50",
        "cross-encoder pairs/s (best c)",
        "cross-encoder pairs/s (lowest c)",
        "cross-encoder c=1 p50 / p99 (1 x 20 call)",
        "cross-encoder refused (RESOURCE_EXHAUSTED)",
        "bi-encoder pairs/s (best c)",
        "bi-encoder c=1 p50 / p99 (1 x 20 call)",
        "targets met",
    ] {
        assert!(stdout.contains(figure), "no `{figure}` row in:\n{stdout}");
    }

    let summary = std::fs::read_to_string(results_dir.join("rerank_bench_summary.csv")).unwrap();
    assert!(summary.starts_with("figure,measured,unit,comparison,limit,result\n"), "{summary}");
    let judged = summary.lines().filter(|line| line.ends_with(",PASS") || line.ends_with(",MISS")).count();
    assert_eq!(judged, 1, "the one target (best pairs/s against the ceiling) in:\n{summary}");

    // --quick sweeps concurrency 1 and 4 for each scorer, every point with answers.
    let sweep = std::fs::read_to_string(results_dir.join("rerank_bench_sweep.csv")).unwrap();
    let rows: Vec<Vec<&str>> = sweep.lines().skip(1).map(|line| line.split(',').collect()).collect();
    let header_width = sweep.lines().next().unwrap().split(',').count();
    let points: Vec<(&str, &str)> = rows.iter().map(|row| (row[0], row[1])).collect();
    assert_eq!(points, [("cross-encoder", "1"), ("cross-encoder", "4"), ("bi-encoder", "1"), ("bi-encoder", "4")]);
    for row in &rows {
        assert_eq!(row.len(), header_width, "{row:?}");
        assert!(row[3].parse::<usize>().unwrap() > 0, "no answered call: {row:?}");
        assert!(row[2..].iter().all(|field| field.parse::<f64>().is_ok()), "{row:?}");
    }

    let in_process = std::fs::read_to_string(results_dir.join("rerank_bench_in_process.csv")).unwrap();
    let sizes: Vec<&str> = in_process.lines().skip(1).map(|line| line.split(',').next().unwrap()).collect();
    assert_eq!(sizes, ["1", "20"], "{in_process}");
    let markdown = std::fs::read_to_string(results_dir.join("rerank_bench.md")).unwrap();
    assert!(markdown.contains("## Server sweep") && markdown.contains("| cross-encoder | 4 |"), "{markdown}");
    let _ = std::fs::remove_dir_all(&results_dir);
}
