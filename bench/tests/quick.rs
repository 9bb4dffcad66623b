//! Every scenario of embedwire-bench run `--quick` end to end (the real model, server, baseline, ghz, Weaviate,
//! clients) so none can rot: those of `make bench` through `bench/run.sh --quick` and the report script, the others one
//! by one. They check the figures printed and the files written, never the figures' values (no speed asserts).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use clap::Parser;
use embedwire_server::ServerConfig;

/// One run at a time: each saturates the machine, and two would only make both slow.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A quick run's stdout and results directory (removed when the test passes).
struct Run {
    stdout: String,
    dir: PathBuf,
}

impl Run {
    /// Runs `command(DIR)`, DIR fresh under the target's temporary directory; fails with its output, or with a pointer
    /// to `make setup` when the model or the venv is missing. The docstrings and the cross-encoder come from the cache
    /// (`~/.cache/embedwire/bench`), shared with real runs and other clones: made afresh, they took 25 s of CPU in the
    /// first scenarios of a clean clone's `make test`, two of which made them at once.
    fn of(name: &str, command: impl FnOnce(&Path) -> Command) -> Run {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let defaults = ServerConfig::parse_from(["embedwire-server"]);
        let (model_dir, python) = (defaults.model_dir(), defaults.cache_dir().join("venv/bin/python"));
        let set_up = model_dir.is_dir() && python.is_file() && defaults.ort_library().is_file();
        assert!(set_up, "no model at {}, ONNX Runtime or venv (run `make setup`)", model_dir.display());
        // A run of its own: tests of one scenario (chaos per store) must not share, or the next one's fresh start
        // deletes the results the previous one is still reading.
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let output = command(&dir).output().unwrap_or_else(|e| panic!("running {name}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{name} failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        Run { stdout, dir }
    }

    /// `embedwire-bench SCENARIO --quick ARGS --results-dir DIR`.
    fn scenario(scenario: &str, args: &[&str]) -> Run {
        Run::of(scenario, |dir| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_embedwire-bench"));
            command.arg(scenario).arg("--quick").args(args).arg("--results-dir").arg(dir);
            command
        })
    }

    fn prints(&self, figures: impl IntoIterator<Item = impl AsRef<str>>) {
        contains_all(&self.stdout, figures);
    }

    /// Column `i` of a CSV file's rows.
    fn column(&self, file: &str, i: usize) -> Vec<String> {
        self.read(file).lines().skip(1).map(|line| fields(line).swap_remove(i)).collect()
    }

    fn read(&self, file: &str) -> String {
        let path = self.dir.join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// The rows of a CSV file, after checking its header and every row's width.
    fn csv(&self, file: &str, header: &str) -> Vec<Vec<String>> {
        let text = self.read(file);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(header), "{file}:\n{text}");
        let rows: Vec<Vec<String>> = lines.map(fields).collect();
        for row in &rows {
            assert_eq!(row.len(), header.split(',').count(), "{file}: {row:?} in:\n{text}");
        }
        rows
    }

    /// The rows of a summary CSV, after checking that `judged` of them have a result.
    fn summary(&self, file: &str, judged: usize) -> Vec<Vec<String>> {
        let rows = self.csv(file, "figure,measured,unit,comparison,limit,result");
        let results: Vec<&Vec<String>> = rows.iter().filter(|row| !row[5].is_empty()).collect();
        assert_eq!(results.len(), judged, "judged rows in {file}: {rows:?}");
        for row in &rows {
            assert!(row[1].parse::<f64>().is_ok() || row[1] == "inf", "measured value of {row:?}");
            assert!(row[5].is_empty() || row[5] == "PASS" || row[5] == "MISS", "{row:?}");
        }
        rows
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Asserts that `text` contains every one of `parts`.
fn contains_all(text: &str, parts: impl IntoIterator<Item = impl AsRef<str>>) {
    for part in parts {
        assert!(text.contains(part.as_ref()), "no `{}` in:\n{text}", part.as_ref());
    }
}

/// A CSV line's fields, quoted fields unquoted.
fn fields(line: &str) -> Vec<String> {
    let (mut fields, mut quoted, mut chars) = (vec![String::new()], false, line.chars().peekable());
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

#[test]
fn run_sh_runs_the_scenarios_of_make_bench_and_writes_the_report() {
    // The server is built the way a scenario builds it, so that run.sh's own build,
    // whose feature set differs, never rebuilds the workspace mid-test; the bench is
    // fresh (cargo test built it), the clients' bench is the workspace build's.
    let release_dir = Path::new(env!("CARGO_BIN_EXE_embedwire-bench")).parent().unwrap();
    let server = embedwire_bench::server_binary::build_into(release_dir).expect("building embedwire-server");
    let run = Run::of("bench-run-quick", |dir| {
        let mut command = Command::new("bash");
        command.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("run.sh")).arg("--quick");
        command.env("BENCH_RESULTS_DIR", dir).env("BENCH_NO_BUILD", "1").env("BENCH_SERVER_BIN", &server);
        command
    });
    let info = run.read("run_info.csv");
    for step in [
        "embed-bench",
        "latency-bench",
        "wire-bench",
        "ghz-suite",
        "gateway-bench",
        "index-bench",
        "rerank-bench",
        "client-bench",
    ] {
        let line = info.lines().find(|line| line.starts_with(&format!("{step},")));
        assert!(line.unwrap_or_else(|| panic!("no {step} in {info}")).ends_with(",0"), "{step} failed: {info}");
    }

    // latency: per precision, the in-process model (back to back, and after idle pauses) and four paths, each call
    // split into its parts; the Embed
    // paths judged against the model (and int8 gRPC Embed against 2 ms where the CPU has VNNI).
    let vnni = embedwire_server::model::precision::CpuInt8::detect().instructions().is_some();
    run.prints([
        "fp32 gRPC Embed c=1 p50",
        "int8 HTTP /v1/search c=1 p50",
        "int8 in-process model p50",
        "int8 in-process model p50, each run after 350 us idle",
    ]);
    let header =
        "precision,path,calls,p50_ms,p95_ms,p99_ms,server_p50_ms,model_p50_ms,server_overhead_p50_ms,client_p50_ms";
    let dir = run.dir.join("latency");
    let latency = std::fs::read_to_string(dir.join("latency_bench.csv")).unwrap();
    assert!(latency.starts_with(&format!("{header}\n")), "{latency}");
    assert_eq!(latency.lines().count(), 1 + 2 * 6, "{latency}");
    assert_eq!(latency.lines().filter(|line| line.contains(",in-process model after idle,")).count(), 2, "{latency}");
    for row in
        latency.lines().skip(1).map(fields).filter(|row| row[1].contains("Embed") || row[1].contains("embeddings"))
    {
        let part = |i: usize| row[i].parse::<f64>().unwrap();
        // The parts are p50s of each part, so they add up to the whole's p50 only roughly.
        let (whole, parts) = (part(3), part(7) + part(8) + part(9));
        assert!(part(2) > 10.0 && part(7) > 0.1 && (parts - whole).abs() < 0.5 * whole, "{row:?}");
    }
    let summary = std::fs::read_to_string(dir.join("latency_bench_summary.csv")).unwrap();
    let judged = summary.lines().filter(|line| line.ends_with(",PASS") || line.ends_with(",MISS")).count();
    assert_eq!(judged, 4 + usize::from(vnni), "{summary}");

    // precision: int8 against fp32, throughput (judged on a VNNI CPU) and three quality floors.
    let precision = std::fs::read_to_string(run.dir.join("precision/precision_bench_summary.csv")).unwrap();
    let judged = precision.lines().filter(|line| line.ends_with(",PASS") || line.ends_with(",MISS")).count();
    assert_eq!(judged, 3 + usize::from(vnni), "{precision}");
    run.prints(["int8 top-10 agreement with fp32", "fp32 / int8 server CPU per sentence"]);

    // embed: its five targets, every measurement in one CSV.
    run.prints(["throughput (32 clients)", "latency c=1 p50", "RSS idle", "RSS after throughput", "cold start"]);
    run.summary("embed_bench_summary.csv", 5);
    let embed = run.csv("embed_bench.csv", "figure,parameter,value,unit");
    assert!(embed.iter().any(|row| row[..2] == ["in_process", "batch=1"]), "{embed:?}");

    // wire: all nine encodings, the two targets.
    let variants = run.column("wire/wire_bench.csv", 0);
    assert_eq!(variants.len(), 9, "{variants:?}");
    for variant in ["grpc_float32", "grpc_ubinary", "grpc_float32_list", "http_json_float", "http_octet_stream"] {
        assert!(variants.iter().any(|v| v == variant), "no {variant} in {variants:?}");
    }
    run.summary("wire/wire_summary.csv", 2);

    // ghz: a JSON summary per backend, config and concurrency, without the call details.
    assert_eq!(run.read("ghz/ghz_summary.csv").lines().count(), 1 + 2 * 5 * 2);
    let summary: serde_json::Value = serde_json::from_str(&run.read("ghz/pseudo/embed-256_c16.json")).unwrap();
    assert!(summary["count"].as_u64().unwrap() > 0 && summary.get("details").is_none(), "{summary}");

    // gateway: both gateways, the four targets, per-request and RSS CSVs.
    run.summary("gateway/gateway_summary.csv", 4);
    for gateway in ["embedwire", "baseline"] {
        assert!(run.csv(&format!("gateway/requests_{gateway}.csv"), "worker,start_ms,latency_ms,ok").len() > 10);
        assert!(run.csv(&format!("gateway/rss_{gateway}.csv"), "t_s,rss_mib,phase").len() > 2);
    }

    // index: exact search on one and two threads, HNSW, every figure at --quick's size.
    run.prints(["exact p50 (scan x2)", "hnsw build", "hnsw recall@10", "hnsw p50", "hnsw q/s, 2 searchers"]);
    let index = run.csv("index/index_bench.csv", "figure,size,value,unit,target,result");
    assert!(index.iter().any(|row| row[..2] == ["exact q/s, 2 searchers (scan x1)", "5000"]), "{index:?}");
    assert!(index.iter().any(|row| row[0].starts_with("hnsw recall@10") && !row[5].is_empty()), "{index:?}");
    // The width the server would pick by measured recall, and the recall the bench's queries get at it.
    assert!(index.iter().any(|row| row[0].starts_with("hnsw picked ef (target")), "{index:?}");
    assert!(index.iter().any(|row| row[0].starts_with("hnsw recall@10 (picked ef") && !row[5].is_empty()), "{index:?}");

    // rerank: the ceiling, then concurrency 1 and 4 for each scorer, every point with answers.
    run.prints(["in-process batch-20 call p50", "cross-encoder pairs/s (lowest c)", "bi-encoder pairs/s (best c)"]);
    run.summary("rerank/rerank_bench_summary.csv", 1);
    let points: Vec<Vec<String>> = run.read("rerank/rerank_bench_sweep.csv").lines().skip(1).map(fields).collect();
    let scorers: Vec<(&str, &str)> = points.iter().map(|p| (p[0].as_str(), p[1].as_str())).collect();
    assert_eq!(scorers, [("cross-encoder", "1"), ("cross-encoder", "4"), ("bi-encoder", "1"), ("bi-encoder", "4")]);
    assert!(
        points.iter().all(|p| p[3].parse::<usize>().unwrap() > 0 && p[2..].iter().all(|f| f.parse::<f64>().is_ok()))
    );
    assert_eq!(run.column("rerank/rerank_bench_in_process.csv", 0), ["1", "20"]);
    assert!(run.read("rerank/rerank_bench.md").contains("| cross-encoder | 4 |"));

    // clients: a run of each client, their medians, the one target.
    let header = "client,backend,count,batch_size,concurrency,seconds,vectors_per_s,cpu_seconds,cpu_us_per_vector";
    let clients: Vec<String> = run.csv("clients/client_bench.csv", header).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(clients, ["rust", "python", "python-async"]);
    let medians = run.csv("clients/summary.csv", "client,runs,seconds,vectors_per_s,cpu_us_per_vector,ratio_to_rust");
    assert_eq!(medians.iter().map(|row| row[0].as_str()).collect::<Vec<_>>(), clients);
    assert_eq!([medians[0][1].as_str(), &medians[0][5]], ["1", "1.0"], "one run; rust is the ratios' base");
    run.summary("clients/clients_summary.csv", 1);

    // The report: every section, and its plots.
    let report = run.read("REPORT.md");
    assert!(!report.contains("did not run"), "a section is missing:\n{report}");
    contains_all(&report, ["## Targets", "## Embed throughput", "## JSON against binary", "## The /v1 contract"]);
    contains_all(&report, ["### One 256-text embed call", "## gRPC under ghz", "## Vector index", "## Rerank"]);
    let plots = ["wire_bytes_per_embedding", "wire_throughput_latency", "gateway_throughput_vs_concurrency"];
    let more_plots = ["gateway_latency_percentiles", "gateway_rss_over_time", "ghz_throughput_vs_concurrency"];
    for plot in plots.into_iter().chain(more_plots).chain(["rerank_pairs_vs_concurrency"]) {
        let size = std::fs::metadata(run.dir.join(format!("plots/{plot}.png"))).map_or(0, |m| m.len());
        let listed = report.contains(&format!("{plot}.png"));
        assert!(size > 1000 && listed, "{plot}.png missing, empty or not in the report");
    }
}

#[test]
fn tokenize_compares_tokenize_with_embed() {
    let run = Run::scenario("tokenize", &["--concurrency", "1,2"]);
    let rpcs: Vec<Vec<String>> = run.csv("tokenize.csv", "rpc,concurrency,calls_per_s,p50_ms,p99_ms,calls");
    let rpcs: Vec<(&str, &str)> = rpcs.iter().map(|row| (row[0].as_str(), row[1].as_str())).collect();
    assert_eq!(rpcs, [("embed", "1"), ("tokenize", "1"), ("tokenize", "2")]);
    let summary: serde_json::Value = serde_json::from_str(&run.read("tokenize.json")).unwrap();
    let judged = summary["figures"].as_array().unwrap().iter().filter(|f| !f["result"].is_null()).count();
    assert_eq!(judged, 1, "{summary}");
    assert!(summary["environment"]["cores"].as_u64().unwrap() >= 1, "{summary}");
}

#[test]
fn search_compares_ingest_and_search_with_embed() {
    let run = Run::scenario("search", &[]);
    run.prints(["Embed corpus (64/call, 4 clients)", "Ingest corpus (1000 docs/call, to COMPLETED)"]);
    run.prints(["Search c=16 (top_k 5)", "Embed c=16 (1 text)", "Search c=1 idle p50 / p95 / p99"]);
    run.prints(["Search c=1 during ingest", "second ingest (100 docs) under search"]);
    let rows = run.summary("search_bench.csv", 2);
    assert_eq!(run.read("search_bench.csv"), run.read("search_bench_summary.csv"));
    for detail in ["index documents", "search_during_ingest_c1 p99", "cpu ingest server"] {
        assert!(rows.iter().any(|row| row[0] == detail), "no `{detail}` in {rows:?}");
    }
    assert!(rows.iter().any(|row| row[..2] == ["index documents", "300.000"]), "{rows:?}");
}

#[test]
fn store_compares_weaviate_and_postgres_with_the_embedded_store() {
    let run = Run::scenario("store", &[]);
    let figures = ["index chunks", "ingest (1000 docs/call, to COMPLETED)", "search c=16 (top_k 5)"];
    let more = ["search c=16 p50 / p99", "CPU per search, embedwire", "load outside the bench during search"];
    for (store, engine) in
        [("embedded", "store"), ("weaviate 1 node", "weaviate"), ("postgres primary + replica", "postgres")]
    {
        run.prints(figures.iter().chain(&more).map(|figure| format!("{store}: {figure}")));
        if engine != "store" {
            run.prints([format!("{store}: CPU per chunk, {engine}"), format!("{store}: data on disk (all nodes)")]);
        }
    }
    // Both shared stores are judged against the embedded store.
    run.prints(["postgres primary + replica / embedded: ingest docs/s", "weaviate 1 node / embedded: search/s c=16"]);
    assert!(run.summary("store_bench.csv", 4).iter().any(|row| row[0] == "postgres primary + replica: index chunks"));
    let stores = run.read("store_bench_stores.csv");
    let rows: Vec<Vec<String>> = stores.lines().map(fields).collect();
    assert_eq!(rows.len(), 4, "a header and one row per store:\n{stores}");
    assert!(rows.iter().all(|row| row.len() == rows[0].len()), "{stores}");
    assert_eq!(rows[1][..2], ["embedded", "0"]);
    assert_eq!(rows[2][..7], ["weaviate 1 node", "1", "1", "1", "QUORUM", "ONE", "100"]);
    assert_eq!(rows[3][..7], ["postgres primary + replica", "0", "", "", "", "", "100"]);
}

#[test]
fn soak_windows_add_up_to_the_summary() {
    let run = Run::scenario("soak", &[]);
    run.prints(["max mix rate", "soak rate (open loop)", "ingest jobs completed", "RSS growth, window 2 -> 3"]);
    run.prints(["errors besides RESOURCE_EXHAUSTED", "Embed p99 drift", "Search p99 drift"]);
    let rows = run.summary("soak_bench.csv", 4);
    let calls = |figure: &str| rows.iter().find(|row| row[0] == figure).map(|row| row[1].parse::<f64>().unwrap());
    let total: f64 = ["Embed calls", "Search calls", "Ingest calls"].iter().map(|f| calls(f).unwrap()).sum();
    assert!(total > 0.0, "the soak made no calls: {rows:?}");
    let header = "window,start_s,warmup,rss_mean_mib,rss_max_mib,server_cores,bench_cores,other_cores,\
                  embed_ok,embed_rejected,embed_errors,embed_p50_ms,embed_p99_ms,\
                  search_ok,search_rejected,search_errors,search_p50_ms,search_p99_ms,\
                  ingest_ok,ingest_rejected,ingest_errors,ingest_p50_ms,ingest_p99_ms";
    let windows = run.csv("soak_bench_windows.csv", header);
    assert_eq!(windows.iter().map(|w| w[2].as_str()).collect::<Vec<_>>(), ["1", "0", "0"], "one warm-up window");
    for window in &windows {
        let number = |i: usize| window[i].parse::<f64>().unwrap_or_else(|_| panic!("field {i} of {window:?}"));
        assert!(number(3) > 1.0 && number(5) > 0.0, "the server's RSS and CPU were sampled: {window:?}");
    }
    let counted: f64 =
        windows.iter().flat_map(|w| [8, 9, 10, 13, 14, 15, 18, 19, 20].map(|i| w[i].parse::<f64>().unwrap())).sum();
    assert_eq!(counted, total);
}

#[test]
fn overload_accounts_for_every_call() {
    let run = Run::scenario("overload", &[]);
    // The default server is compared with one whose load bounds are off, at the default flags otherwise.
    assert_eq!(ServerConfig::parse_from(["embedwire-server"]).max_queue_ms, None);
    run.prints([
        "closed loop grpc_embed x1 c=64",
        "closed loop http_v1_search x1 c=64",
        "closed loop http_embed x32 c=1",
    ]);
    run.prints(["max: ", "open loop 3 x max: accepted p99", "open loop 3 x max: back to the unloaded p99 after"]);
    // Per closed-loop cell: refusals and the throughput ratio; open loop: goodput, accepted p99, refusals, recovery.
    run.summary("overload_bench.csv", 4 * 2 * 2 + 4);
    let header = "workload,texts_per_call,callers,server,calls,ok,errors,seconds,texts_per_s,p50_ms,p99_ms";
    let cells = run.csv("overload_closed_loop.csv", header);
    assert_eq!(cells.len(), 4 * 2 * 2, "4 workloads x callers 1 and 64 x 2 servers: {cells:?}");
    for cell in &cells {
        let number = |i: usize| cell[i].parse::<f64>().unwrap_or_else(|_| panic!("field {i} of {cell:?}"));
        assert_eq!(number(4), number(5) + number(6), "every call answered or counted as failed: {cell:?}");
        assert!(number(5) > 0.0 && number(8) > 0.0, "the cell ran: {cell:?}");
    }
    let header = "max_per_s,unloaded_p50_ms,unloaded_p99_ms,offered_per_s,sent,accepted,rejected,errors,\
                  rejected_p50_ms,rejected_p99_ms,accepted_p50_ms,accepted_p99_ms,goodput_per_s,full_batch_ms,\
                  full_batch_size,burst_batch_ms,burst_batch_size,recovery_s,lag_p99_ms,held_back,server_cores,\
                  bench_cores,max_server_cores,max_bench_cores,full_padded_per_text,burst_padded_per_text,\
                  full_us_per_padded_token,burst_us_per_padded_token";
    let runs = run.csv("overload_bench_runs.csv", header);
    let number = |i: usize| runs[0][i].parse::<f64>().unwrap_or_else(|_| panic!("field {i} of {:?}", runs[0]));
    // Every call sent is accounted for: accepted, rejected or failed; offered at 3 x the maximum.
    assert_eq!(number(4), number(5) + number(6) + number(7), "{runs:?}");
    assert!(number(0) > 0.0 && (number(3) - 3.0 * number(0)).abs() <= 0.25, "{runs:?}");
    assert!(number(13) > 0.0 && number(14) >= 1.0, "the full batch was read from /metrics: {runs:?}");
    assert!(number(15) > 0.0 && number(16) >= 1.0, "the burst's batches were read from /metrics: {runs:?}");
    // Where capacity went: both processes' CPU in both phases, and the model's work read from /metrics (a padded
    // text holds at least its real tokens, and the model took some time for them).
    assert!(number(20) > 0.0 && number(22) > 0.0, "the server's CPU in both phases: {runs:?}");
    assert!((21..=23).all(|i| number(i) >= 0.0), "the load generator's CPU: {runs:?}");
    assert!(number(24) >= 1.0 && number(25) >= 1.0, "padded tokens a text: {runs:?}");
    assert!(number(26) > 0.0 && number(27) > 0.0, "model time a padded token: {runs:?}");
}

/// `chaos --cycles 2` on one store: every judged figure (lost, doubled, stuck, failed jobs) 0, a CSV row per cycle
/// with its victims, documents acknowledged, and no problem listed.
fn chaos_loses_nothing(store: &str) {
    let run = Run::of("chaos", |dir| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_embedwire-bench"));
        command.args(["chaos", "--quick", "--store", store, "--cycles", "2", "--seed", "26", "--results-dir"]).arg(dir);
        command
    });
    run.prints(["cycle 2/2: killed server-", "acknowledged documents", "lost documents (acknowledged, not found)"]);
    let rows = run.summary(&format!("chaos_{store}_summary.csv"), 4);
    for row in rows.iter().filter(|row| !row[5].is_empty()) {
        assert_eq!([row[1].as_str(), &row[5]], ["0.000", "PASS"], "{row:?} in:\n{}", run.stdout);
    }
    let header = "cycle,start_s,kill_after_ms,server,server_pid,store_process,store_pid,server_restart_ms,\
                  store_restart_ms,acked_calls,acked_documents,failed_calls,failed_documents,restart_failures";
    let cycles = run.csv(&format!("chaos_{store}_cycles.csv"), header);
    assert_eq!(cycles.len(), 2, "{cycles:?}");
    let second = match store {
        "weaviate" => "weaviate-",
        "postgres" => "postgres-replica",
        _ => "",
    };
    for cycle in &cycles {
        assert!(cycle[3].starts_with("server-") && cycle[5].starts_with(second), "victims of {cycle:?}");
        assert_eq!(cycle[5].is_empty(), second.is_empty(), "{cycle:?}");
    }
    let acknowledged: usize = cycles.iter().map(|cycle| cycle[10].parse::<usize>().unwrap()).sum();
    assert!(acknowledged > 0, "nothing was acknowledged during the cycles: {cycles:?}");
    let problems =
        run.csv(&format!("chaos_{store}_problems.csv"), "problem,document_id,job_id,upstream,index,cycle,detail");
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn chaos_embedded_loses_nothing_across_kills() {
    chaos_loses_nothing("embedded");
}

#[test]
fn chaos_postgres_loses_nothing_across_kills() {
    chaos_loses_nothing("postgres");
}

#[test]
fn chaos_weaviate_loses_nothing_across_kills() {
    chaos_loses_nothing("weaviate");
}

#[test]
fn retrieval_measures_each_mode_against_its_yardsticks() {
    let run = Run::scenario("retrieval", &["--quick-queries", "10", "--quick-documents", "50"]);
    run.prints(["vector nDCG@10 - exact", "keyword nDCG@10 - plain BM25", "hybrid nDCG@10 - best single mode"]);
    run.prints(["hybrid p50 / vector p50", "ingest with keyword index / without"]);
    let header = "store,mode,alpha,fusion,ndcg_at_10,recall_at_100,mrr_at_10,p50_ms,p99_ms,queries_per_s,judged_queries,latency_documents";
    let rows = run.csv("retrieval.csv", header);
    let modes: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(modes[..3], ["vector", "keyword", "hybrid"], "{rows:?}");
    for row in &rows {
        let ndcg: f64 = row[4].parse().unwrap();
        assert!((0.0..=1.0).contains(&ndcg) && ndcg > 0.2, "a mode that finds nothing relevant: {row:?}");
    }
    assert_eq!(rows.iter().filter(|r| r[0] == "yardstick").count(), 2);
    assert_eq!(run.csv("retrieval_ingest.csv", "server,documents,documents_per_s,completed_s").len(), 2);
    assert!(std::fs::metadata(run.dir.join("retrieval.png")).map_or(0, |m| m.len()) > 1000, "the plot");
}

#[test]
fn collections_measures_idle_cost_and_per_collection_work() {
    let run = Run::scenario("collections", &[]);
    run.prints([
        "start to SERVING, 30 empty collections",
        "RSS settled, 30 empty collections: extra",
        "a collection / default",
        "Search c=16, default / a collection",
    ]);
    assert!(run.dir.join("collections.json").is_file(), "the results");
}
