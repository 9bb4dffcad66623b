//! Runs `embed-bench --quick` end to end (in-process model, real server binary, real
//! clients) so the bench cannot rot. It checks that the bench runs and writes its
//! CSV files; it never judges the figures, since tests do not assert on speed.

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;
use embedwire_server::ServerConfig;

#[test]
fn quick_run_prints_the_table_and_writes_csv() {
    let defaults = ServerConfig::parse_from(["embedwire-server"]);
    let (model_dir, ort_library) = (defaults.model_dir(), defaults.ort_library());
    assert!(
        model_dir.is_dir() && ort_library.is_file(),
        "no model at {} or no ONNX Runtime at {} (run `make setup`)",
        model_dir.display(),
        ort_library.display()
    );
    let results_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("embed-bench-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_embedwire-bench"))
        .args(["embed", "--quick", "--results-dir"])
        .arg(&results_dir)
        .output()
        .expect("running embedwire-bench embed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "embed-bench failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    for figure in ["throughput (32 clients)", "latency c=1 p50", "RSS idle", "RSS after throughput", "cold start"] {
        assert!(stdout.contains(figure), "no `{figure}` row in:\n{stdout}");
    }

    let measurements = std::fs::read_to_string(results_dir.join("embed_bench.csv")).unwrap();
    assert!(measurements.starts_with("figure,parameter,value,unit\n"));
    assert!(measurements.contains("in_process,batch=1,"));
    let summary = std::fs::read_to_string(results_dir.join("embed_bench_summary.csv")).unwrap();
    assert_eq!(summary.lines().filter(|l| l.ends_with(",PASS") || l.ends_with(",MISS")).count(), 5, "{summary}");
    let _ = std::fs::remove_dir_all(&results_dir);
}
