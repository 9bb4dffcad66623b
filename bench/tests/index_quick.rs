//! Runs `embedwire-bench index --quick` end to end so the scenario cannot rot. It
//! checks that it runs, prints every figure and writes its CSV; it never judges the
//! figures, since tests do not assert on speed.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn quick_run_prints_the_table_and_writes_csv() {
    let results_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("index-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_embedwire-bench"))
        .args(["index", "--quick", "--results-dir"])
        .arg(&results_dir)
        .output()
        .expect("running embedwire-bench index");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "index failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let figures = [
        "exact p50 (scan x1)",
        "exact p95 (scan x1)",
        "exact q/s, 2 searchers (scan x1)",
        "exact p50 (scan x2)",
        "hnsw build",
        "hnsw recall@10",
        "hnsw p50",
        "hnsw q/s, 2 searchers",
        "targets met",
    ];
    for figure in figures {
        assert!(stdout.contains(figure), "no `{figure}` row in:\n{stdout}");
    }

    let csv = std::fs::read_to_string(results_dir.join("index_bench.csv")).unwrap();
    assert!(csv.starts_with("figure,size,value,unit,target,result\n"), "{csv}");
    assert!(csv.contains("\nexact p50 (scan x1),5000,"), "{csv}");
    assert!(csv.contains("\n\"exact q/s, 2 searchers (scan x1)\",5000,"), "figures with commas are quoted: {csv}");
    assert!(
        csv.lines()
            .any(|line| line.starts_with("hnsw recall@10") && (line.ends_with(",PASS") || line.ends_with(",MISS"))),
        "{csv}"
    );
    let _ = std::fs::remove_dir_all(&results_dir);
}
