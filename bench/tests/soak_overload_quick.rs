//! Runs `embedwire-bench soak --quick` and `embedwire-bench overload --quick` end to
//! end (docstring corpus, real server binary with the real model, real clients) so the
//! scenarios cannot rot. It checks that each runs, prints its figures and writes well-formed
//! CSV; it never judges the figures, since tests do not assert on speed.

mod common;

use std::path::Path;
use std::sync::Mutex;

use clap::Parser;
use common::run_scenario;
use embedwire_server::ServerConfig;

/// One bench at a time: each loads the model and saturates the machine, and two at
/// once on a small machine would only make both slow.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The lines of a CSV file, after checking that every line has as many fields as
/// the header (no field of these files is quoted with a comma inside, except the
/// summary's figure names, which `fields` handles).
fn csv_lines(path: &Path, header: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(header), "{}:\n{text}", path.display());
    let width = header.split(',').count();
    let rows: Vec<Vec<String>> = lines.map(fields).collect();
    for row in &rows {
        assert_eq!(row.len(), width, "{}: {row:?} in:\n{text}", path.display());
    }
    rows
}

/// A CSV line's fields, quoted fields unquoted.
fn fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// Checks the summary CSV: numbers where numbers go, `judged` rows with a result.
fn check_summary(path: &Path, judged: usize) -> Vec<Vec<String>> {
    let rows = csv_lines(path, "figure,measured,unit,comparison,limit,result");
    for row in &rows {
        assert!(row[1].parse::<f64>().is_ok() || row[1] == "inf", "measured value of {row:?}");
    }
    let results: Vec<&Vec<String>> = rows.iter().filter(|row| !row[5].is_empty()).collect();
    assert_eq!(results.len(), judged, "judged rows in {}: {rows:?}", path.display());
    for row in results {
        assert!(row[5] == "PASS" || row[5] == "MISS", "{row:?}");
        assert!(row[3] == "<=" && row[4].parse::<f64>().is_ok(), "{row:?}");
    }
    rows
}

#[test]
fn soak_quick_run_prints_the_table_and_writes_csv() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (stdout, dir) = run_scenario("soak");
    for figure in [
        "max mix rate",
        "soak rate (open loop)",
        "Embed calls",
        "Search calls",
        "Ingest calls",
        "ingest jobs completed",
        "errors besides RESOURCE_EXHAUSTED",
        "RSS growth, window 2 -> 3",
        "Embed p99 drift",
        "Search p99 drift",
        "targets met",
    ] {
        assert!(stdout.contains(figure), "no `{figure}` row in:\n{stdout}");
    }

    let rows = check_summary(&dir.join("soak_bench.csv"), 4);
    let calls = |figure: &str| rows.iter().find(|row| row[0] == figure).map(|row| row[1].parse::<f64>().unwrap());
    let total: f64 = ["Embed calls", "Search calls", "Ingest calls"].iter().map(|f| calls(f).unwrap()).sum();
    assert!(total > 0.0, "the soak made no calls: {rows:?}");

    let header = "window,start_s,warmup,rss_mean_mib,rss_max_mib,server_cores,bench_cores,other_cores,\
                  embed_ok,embed_rejected,embed_errors,embed_p50_ms,embed_p99_ms,\
                  search_ok,search_rejected,search_errors,search_p50_ms,search_p99_ms,\
                  ingest_ok,ingest_rejected,ingest_errors,ingest_p50_ms,ingest_p99_ms";
    let windows = csv_lines(&dir.join("soak_bench_windows.csv"), header);
    assert_eq!(windows.len(), 3, "--quick: three windows of 2 s: {windows:?}");
    assert_eq!(windows.iter().map(|w| w[2].as_str()).collect::<Vec<_>>(), ["1", "0", "0"], "one warm-up window");
    for window in &windows {
        assert!(window[3].parse::<f64>().unwrap() > 1.0, "the server's RSS was sampled: {window:?}");
        assert!(window[5].parse::<f64>().unwrap() > 0.0, "the server's CPU was sampled: {window:?}");
        assert!(window.iter().all(|field| field.parse::<f64>().is_ok()), "{window:?}");
    }
    // Calls counted in the windows add up to the summary's.
    let counted: f64 =
        windows.iter().flat_map(|w| [8, 9, 10, 13, 14, 15, 18, 19, 20].map(|i| w[i].parse::<f64>().unwrap())).sum();
    assert_eq!(counted, total);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn overload_quick_run_prints_the_table_and_writes_csv() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (stdout, dir) = run_scenario("overload");
    // The server derives its default bound from the model's speed ("auto").
    assert_eq!(ServerConfig::parse_from(["embedwire-server"]).max_queue_ms, None);
    for figure in [
        "unloaded p99 = p99 latency".to_string(),
        "max Embed throughput".to_string(),
        "rejection latency, queue bound auto (default)".to_string(),
        "accepted latency, queue bound auto (default)".to_string(),
        "rejection latency, queue bound 20 ms".to_string(),
        "accepted latency, queue bound 20 ms".to_string(),
        "goodput, queue bound 20 ms".to_string(),
        "--max-queue-ms bounds meeting both overload targets".to_string(),
    ] {
        assert!(stdout.contains(&figure), "no `{figure}` in:\n{stdout}");
    }

    // Two bounds, two targets each.
    check_summary(&dir.join("overload_bench.csv"), 4);
    let header = "queue_bound_ms,default,max_per_s,unloaded_p50_ms,unloaded_p99_ms,offered_per_s,sent,accepted,rejected,errors,\
                  rejected_p50_ms,rejected_p99_ms,accepted_p50_ms,accepted_p99_ms,goodput_per_s,lag_p99_ms,held_back,\
                  server_cores";
    let runs = csv_lines(&dir.join("overload_bench_runs.csv"), header);
    let bounds: Vec<(&str, &str)> = runs.iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
    assert_eq!(bounds, [("auto", "1"), ("20", "0")]);
    for run in &runs {
        let number = |i: usize| run[i].parse::<f64>().unwrap_or_else(|_| panic!("field {i} of {run:?}"));
        // Every call sent is accounted for: accepted, rejected or failed.
        assert_eq!(number(6), number(7) + number(8) + number(9), "{run:?}");
        // The overload is offered at 3x the maximum measured before it (both
        // printed to 0.1 calls/s).
        assert!(number(2) > 0.0 && (number(5) - 3.0 * number(2)).abs() <= 0.25, "{run:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
