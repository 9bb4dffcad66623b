//! clients: what the clients themselves cost. The Rust client's bench (clients/rust) and the Python client's
//! (`clients/python/bench_client.py`, sync and `--async`) embed the same texts through `embed_many` against one
//! server on the pseudo backend (so the client's own cost shows), each run a fresh process appending a row to
//! `client_bench.csv`. The clients take turns for some rounds; the median run of each counts (`summary.csv`), the
//! machine being shared.

use std::{path::PathBuf, process::Command};

use anyhow::Context;
use embedwire_bench::{
    corpus::python_or_venv,
    options::{Common, program_output},
    report::{Report, Row, Table},
    server_process::ServerProcess,
};

/// The Python client's CPU per vector (the worse variant) at most this many times the Rust client's.
const MAX_PYTHON_OVER_RUST: f64 = 1.5;
/// Texts per Embed call (the clients' default).
const BATCH_SIZE: usize = 64;
/// The Python client of this checkout: its bench script, and its source, whichever checkout the venv's editable
/// install points to.
const PYTHON_BENCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../clients/python/bench_client.py");
const PYTHON_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../clients/python/src");

/// Options of the clients scenario (`--concurrency`: Embed calls in flight, one level,
/// default 8, the clients' default).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The Rust client's bench [default: embedwire-client-bench beside the server binary,
    /// where the workspace build puts it].
    #[arg(long, env = "BENCH_CLIENT_BENCH_BIN")]
    pub client_bench_bin: Option<PathBuf>,
    /// The Python that runs it [default: CACHE/venv/bin/python, which `make setup` creates].
    #[arg(long, env = "BENCH_PYTHON")]
    pub python: Option<PathBuf>,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let &[in_flight] = common.sweep(&[8], &[8]).as_slice() else { anyhow::bail!("clients runs at one --concurrency") };
    // Texts each run embeds, and rounds the clients take in turn.
    let (texts, rounds) = (common.pick(100_000, 2_000), common.pick(3, 1));
    let python = python_or_venv(args.python.as_deref())?;
    let server_binary = common.server_binary()?;
    let rust = args.client_bench_bin.clone().unwrap_or_else(|| server_binary.with_file_name("embedwire-client-bench"));
    let hint = "build the workspace: `make setup`; or pass --client-bench-bin";
    anyhow::ensure!(rust.is_file(), "no {} ({hint})", rust.display());
    let report = Report::new(common.results("clients"), "clients")?;
    let csv = report.dir().join("client_bench.csv");
    let _ = std::fs::remove_file(&csv); // the bench programs append to it
    println!("clients: {texts} texts per run, batch {BATCH_SIZE}, {in_flight} in flight, {rounds} round(s)");

    let runtime = tokio::runtime::Runtime::new()?;
    let command = common.server_command(server_binary, vec![("--backend", "pseudo".into())]);
    let (server, _) = runtime.block_on(ServerProcess::start(&command))?;
    let shape = [texts, BATCH_SIZE, in_flight].map(|n| n.to_string());
    let python_path =
        std::env::var("PYTHONPATH").map_or(PYTHON_SOURCE.to_string(), |more| format!("{PYTHON_SOURCE}:{more}"));
    for _ in 0..rounds {
        let mut rust_run = Command::new(&rust);
        rust_run.args(["--server", &format!("http://{}", server.address), "--count", &shape[0]]);
        let mut python_runs = [None, Some("--async")].map(|variant| {
            let mut run = Command::new(&python);
            run.arg(PYTHON_BENCH).arg(server.address.to_string()).args(["--texts", &shape[0]]);
            run.args(variant).env("PYTHONPATH", &python_path);
            run
        });
        for run in std::iter::once(&mut rust_run).chain(&mut python_runs) {
            run.args(["--batch-size", &shape[1], "--concurrency", &shape[2], "--csv"]).arg(&csv);
            print!("{}", program_output(run, "the clients' bench programs")?);
        }
    }
    runtime.block_on(server.stop())?;
    summarize(report, &std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?)
}

/// The median run of each client in `summary.csv`, and the target.
fn summarize(mut report: Report, runs: &str) -> anyhow::Result<()> {
    let mut lines = runs.lines().map(|line| line.split(',').collect::<Vec<_>>());
    let header = lines.next().context("client_bench.csv is empty")?;
    let column = |name: &str| header.iter().position(|c| *c == name).with_context(|| format!("no {name} column"));
    let [client, seconds, rate, cpu] = ["client", "seconds", "vectors_per_s", "cpu_us_per_vector"].map(column);
    let (client, columns) = (client?, [seconds?, rate?, cpu?]);
    // Each client's runs, in the order the clients first ran.
    let mut clients: Vec<(&str, Vec<[f64; 3]>)> = Vec::new();
    for line in lines {
        let values = columns.map(|k| line.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN));
        match clients.iter_mut().find(|(name, _)| *name == line[client]) {
            Some((_, known)) => known.push(values),
            None => clients.push((line[client], vec![values])),
        }
    }
    let medians: Vec<_> = clients.iter().map(|(name, runs)| (*name, runs.len(), median(runs))).collect();
    let rust_cpu = medians.iter().find(|m| m.0 == "rust").map(|m| m.2[2]).context("no run of the Rust client")?;
    // As Python's csv module writes floats (Rust's `{:?}` is the same shortest form).
    let mut summary = Table::new("client,runs,seconds,vectors_per_s,cpu_us_per_vector,ratio_to_rust");
    let (mut worst, mut ratios) = (0.0f64, Vec::new());
    for (name, count, [seconds, rate, cpu]) in medians {
        let ratio = cpu / rust_cpu;
        let medians = [seconds, rate, cpu, ratio].map(|value| format!("{value:?}"));
        summary.row([name.to_string(), count.to_string()].into_iter().chain(medians));
        let measured = format!("{cpu:.2} us, {rate:.0} vectors/s, {seconds:.3} s (median of {count})");
        report.figure(Row::info(format!("{name} client CPU per vector"), cpu, "us", measured));
        if name != "rust" {
            worst = worst.max(ratio);
            ratios.push(format!("{name} {ratio:.2} x"));
        }
    }
    let row = Row::info("Python client CPU per vector / Rust (worst variant)", worst, "x", format!("{worst:.2} x"));
    let target = format!("<= {MAX_PYTHON_OVER_RUST} x");
    report.figure(row.at_most(MAX_PYTHON_OVER_RUST, target).with_note(ratios.join(", ")));
    report.table("summary.csv", &summary)?;
    report.finish()
}

/// Each column's median over `runs`, the mean of the middle two for an even count (as Python's `statistics.median`).
fn median(runs: &[[f64; 3]]) -> [f64; 3] {
    std::array::from_fn(|k| {
        let mut values: Vec<f64> = runs.iter().map(|run| run[k]).collect();
        values.sort_by(f64::total_cmp);
        let middle = values.len() / 2;
        if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 }
    })
}
