//! Runs `embedwire-bench search --quick` end to end (docstring corpus, real server
//! binary with the real model, real clients) so the scenario cannot rot. It checks
//! that it runs, prints every figure and writes its CSV; it never judges the figures,
//! since tests do not assert on speed.

mod common;

#[test]
fn quick_run_prints_the_table_and_writes_csv() {
    let (stdout, results_dir) = common::run_scenario("search");
    let figures = [
        "corpus documents",
        "Embed corpus (64/call, 4 clients)",
        "Ingest corpus (1000 docs/call, to COMPLETED)",
        "index after ingest: chunks",
        "Search c=16 (top_k 5)",
        "Search c=16 p50 / p95 / p99",
        "Embed c=16 (1 text)",
        "Search c=1 idle p50 / p95 / p99",
        "Search c=1 during ingest",
        "second ingest (100 docs) under search",
        "targets met",
    ];
    for figure in figures {
        assert!(stdout.contains(figure), "no `{figure}` row in:\n{stdout}");
    }

    let csv = std::fs::read_to_string(results_dir.join("search_bench.csv")).unwrap();
    assert!(csv.starts_with("figure,measured,unit,comparison,limit,result\n"), "{csv}");
    let judged = csv.lines().filter(|line| line.ends_with(",PASS") || line.ends_with(",MISS")).count();
    assert_eq!(judged, 2, "the two targets (ingest and search ratios) in:\n{csv}");
    for detail in ["index documents,1000.000,", "search_during_ingest_c1 p99,", "cpu ingest server,"] {
        assert!(csv.contains(detail), "no `{detail}` in:\n{csv}");
    }
    let _ = std::fs::remove_dir_all(&results_dir);
}
