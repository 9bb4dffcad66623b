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

#[test]
fn tokenize_scenario_compares_tokenize_with_embed() {
    let results_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tokenize-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_embedwire-bench"))
        .args(["tokenize", "--quick", "--concurrency", "1,2", "--results-dir"])
        .arg(&results_dir)
        .output()
        .expect("running embedwire-bench tokenize");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "tokenize failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let table = std::fs::read_to_string(results_dir.join("tokenize.csv")).unwrap();
    assert!(table.starts_with("rpc,concurrency,calls_per_s,p50_ms,p99_ms,calls\nembed,1,"), "{table}");
    assert!(table.contains("\ntokenize,1,") && table.contains("\ntokenize,2,"), "{table}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results_dir.join("tokenize.json")).unwrap()).unwrap();
    let judged = summary["figures"].as_array().unwrap().iter().filter(|f| !f["result"].is_null()).count();
    assert_eq!(judged, 1, "{summary}");
    assert!(summary["environment"]["cores"].as_u64().unwrap() >= 1, "{summary}");
    let _ = std::fs::remove_dir_all(&results_dir);
}
