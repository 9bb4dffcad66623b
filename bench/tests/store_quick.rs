//! Runs `embedwire-bench store --quick` end to end (docstring corpus, real server binaries with
//! the real model, a real 1-node Weaviate started by scripts/cluster.sh, real clients)
//! so the bench cannot rot. It checks that the bench runs, prints every figure for
//! both stores and writes its CSV files; it never judges the figures, since tests do
//! not assert on speed.

mod common;

#[test]
fn quick_run_prints_the_tables_and_writes_csv() {
    let (stdout, results_dir) = common::run_scenario("store");
    for store in ["embedded", "weaviate 1 node"] {
        for figure in [
            "index chunks",
            "ingest (1000 docs/call, to COMPLETED)",
            "search c=16 (top_k 5)",
            "search c=16 p50 / p99",
            "CPU per chunk, embedwire",
            "CPU per chunk, weaviate",
            "CPU per search, embedwire",
            "CPU per search, weaviate",
            "load outside the bench during search",
        ] {
            let row = format!("{store}: {figure}");
            assert!(stdout.contains(&row), "no `{row}` row in:\n{stdout}");
        }
    }
    assert!(stdout.contains("weaviate 1 node: data on disk (all nodes)"), "{stdout}");
    assert!(stdout.contains("targets met"), "{stdout}");

    let summary = std::fs::read_to_string(results_dir.join("store_bench.csv")).unwrap();
    assert!(summary.starts_with("figure,measured,unit,comparison,limit,result\n"), "{summary}");
    let judged = summary.lines().filter(|line| line.ends_with(",PASS") || line.ends_with(",MISS")).count();
    assert_eq!(judged, 2, "the two targets (ingest and search ratios, on the largest cluster) in:\n{summary}");
    assert!(summary.contains("weaviate 1 node: index chunks,"), "{summary}");

    let stores = std::fs::read_to_string(results_dir.join("store_bench_stores.csv")).unwrap();
    let lines: Vec<&str> = stores.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one row per store:\n{stores}");
    let columns = lines[0].split(',').count();
    assert!(lines.iter().all(|line| line.split(',').count() == columns), "{stores}");
    assert!(
        lines[1].starts_with("embedded,0,") && lines[2].starts_with("weaviate 1 node,1,1,1,QUORUM,ONE,200,"),
        "{stores}"
    );
    let _ = std::fs::remove_dir_all(&results_dir);
}
