//! Runs `bench/run.sh --quick` end to end (every benchmark program for a few
//! seconds against the real server binary, the Python baseline and ghz, then the
//! report script) so that none of it can rot. It checks that every step ran and
//! that the report has its tables and plots; it never judges the figures, since
//! tests do not assert on speed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn quick_run_writes_every_result_and_the_report() {
    let results = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-run-quick-{}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("run.sh");
    // The bench programs are fresh (cargo test built them next to this test); the
    // server is built the way the other quick tests build it, so that run.sh's own
    // build, whose feature set differs, never rebuilds the workspace mid-test.
    let release_dir = Path::new(env!("CARGO_BIN_EXE_embedwire-bench")).parent().unwrap();
    let server = embedwire_bench::server_binary::build_into(release_dir).expect("building embedwire-server");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--quick")
        .env("BENCH_RESULTS_DIR", &results)
        .env("BENCH_NO_BUILD", "1")
        .env("BENCH_SERVER_BIN", &server)
        .output()
        .expect("running bench/run.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench/run.sh --quick failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // Every step ran and exited 0.
    let info = read(&results.join("run_info.csv"));
    for step in ["embed-bench", "wire-bench", "ghz-suite", "gateway-bench", "index-bench", "rerank-bench"] {
        let line = info
            .lines()
            .find(|line| line.starts_with(&format!("{step},")))
            .unwrap_or_else(|| panic!("no {step} in {info}"));
        assert!(line.ends_with(",0"), "{step} failed: {line}");
    }

    // wire-bench: all nine encodings, the two targets judged.
    let wire = read(&results.join("wire/wire_bench.csv"));
    assert_eq!(wire.lines().count(), 10, "{wire}");
    for variant in [
        "grpc_float32,",
        "grpc_ubinary,",
        "grpc_float32_list,",
        "http_json_float,",
        "http_json_base64,",
        "http_octet_stream,",
    ] {
        assert!(wire.contains(&format!("\n{variant}")), "no {variant} in {wire}");
    }
    let judged = |csv: &str| csv.lines().filter(|l| l.ends_with(",PASS") || l.ends_with(",MISS")).count();
    assert_eq!(judged(&read(&results.join("wire/wire_summary.csv"))), 2);

    // ghz-suite: one JSON summary per backend, config and concurrency, and the CSV.
    let ghz = read(&results.join("ghz/ghz_summary.csv"));
    assert_eq!(ghz.lines().count(), 1 + 2 * 5 * 2, "{ghz}");
    let summary = read(&results.join("ghz/pseudo/embed-256_c16.json"));
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert!(summary["count"].as_u64().unwrap() > 0 && summary.get("details").is_none(), "{summary}");

    // gateway-bench: both gateways, the four targets, per-request and RSS CSVs.
    assert_eq!(judged(&read(&results.join("gateway/gateway_summary.csv"))), 4);
    for gateway in ["embedwire", "baseline"] {
        let requests = read(&results.join(format!("gateway/requests_{gateway}.csv")));
        assert!(requests.starts_with("worker,start_ms,latency_ms,ok\n") && requests.lines().count() > 10, "{requests}");
        assert!(read(&results.join(format!("gateway/rss_{gateway}.csv"))).lines().count() > 3);
    }

    // rerank-bench: both scorers swept, the one target judged.
    let sweep = read(&results.join("rerank/rerank_bench_sweep.csv"));
    assert!(sweep.contains("\ncross-encoder,1,") && sweep.contains("\nbi-encoder,1,"), "{sweep}");
    assert_eq!(judged(&read(&results.join("rerank/rerank_bench_summary.csv"))), 1);

    // The report: every section, and its plots written.
    let report = read(&results.join("REPORT.md"));
    for section in [
        "## Targets",
        "## Embed throughput",
        "## JSON against binary",
        "### One 256-text embed call",
        "## The /v1 contract",
        "## gRPC under ghz",
        "## Vector index",
        "## Rerank",
    ] {
        assert!(report.contains(section), "no `{section}` in:\n{report}");
    }
    assert!(!report.contains("did not run"), "a section is missing:\n{report}");
    for plot in [
        "wire_bytes_per_embedding.png",
        "wire_throughput_latency.png",
        "gateway_throughput_vs_concurrency.png",
        "gateway_latency_percentiles.png",
        "gateway_rss_over_time.png",
        "ghz_throughput_vs_concurrency.png",
        "rerank_pairs_vs_concurrency.png",
    ] {
        let size = std::fs::metadata(results.join("plots").join(plot)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 1000, "{plot} missing or empty");
        assert!(report.contains(plot), "{plot} not in the report");
    }
    let _ = std::fs::remove_dir_all(&results);
}
