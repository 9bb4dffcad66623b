//! embedwire-client-bench: the cost of the Rust client itself. Embeds N short
//! texts through `embed_many` against a running server and prints the wall time,
//! vectors per second and the client's CPU seconds per vector (user + system, from
//! getrusage of this process), optionally appending a row to a CSV file that the
//! Python client's bench writes too.
//!
//! Run it against a server on the pseudo backend to measure the transport and the
//! client rather than the model:
//! `embedwire-server --backend pseudo --listen 127.0.0.1:50051 &`
//! `embedwire-client-bench --server http://127.0.0.1:50051 --csv bench/results/clients.csv`

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use embedwire_client::{BulkOptions, ClientConfig, EmbedOptions};

/// Embeds N short texts with embed_many and reports the client's cost per vector.
#[derive(Debug, Parser)]
#[command(version)]
struct Config {
    /// Server address(es), comma separated
    #[arg(long = "server", env = "EMBEDWIRE_SERVER", value_delimiter = ',', default_value = "http://127.0.0.1:50051")]
    servers: Vec<String>,
    /// Texts to embed
    #[arg(long, default_value_t = 100_000)]
    count: usize,
    /// Texts per Embed call (the library's default)
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Embed calls in flight (the library's default)
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Tokio worker threads of the client (0: one per CPU)
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Append a result row to this CSV file (the header is written when it is new)
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// The CSV columns, shared with the Python client's bench.
const CSV_HEADER: &str =
    "client,backend,count,batch_size,concurrency,seconds,vectors_per_s,cpu_seconds,cpu_us_per_vector";

fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    anyhow::ensure!(config.count > 0, "--count must be at least 1");
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if config.threads > 0 {
        runtime.worker_threads(config.threads);
    }
    runtime.enable_all().build()?.block_on(run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    let client = ClientConfig::new(config.servers.clone()).connect().await?;
    let backend = client.info().await?.backend;
    // Short, distinct texts like search queries or titles (5 to 9 words).
    let texts: Vec<String> =
        (0..config.count).map(|i| format!("short text number {i} about topic {} and {}", i % 97, i % 13)).collect();
    // One call first, so connecting and the server's first batch are not measured.
    client.embed(["warm up"]).await?;

    let bulk = BulkOptions { batch_size: config.batch_size, max_concurrent_requests: config.concurrency };
    let cpu_before = process_cpu()?;
    let started = Instant::now();
    let embeddings = client.embed_many(&texts, bulk, &EmbedOptions::default()).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = (process_cpu()? - cpu_before).as_secs_f64();
    anyhow::ensure!(embeddings.len() == config.count, "got {} vectors for {} texts", embeddings.len(), config.count);

    let vectors_per_s = config.count as f64 / seconds;
    let cpu_us_per_vector = cpu_seconds * 1e6 / config.count as f64;
    println!(
        "rust client, {} backend, {} texts, batch {}, {} in flight",
        backend, config.count, config.batch_size, config.concurrency
    );
    println!("total time:            {seconds:.3} s");
    println!("vectors/s:             {vectors_per_s:.0}");
    println!("client CPU:            {cpu_seconds:.3} s");
    println!("client CPU per vector: {cpu_us_per_vector:.2} µs");
    let stats = client.stats();
    println!("calls: {} attempts, {} retries", stats.attempts, stats.retries);

    if let Some(path) = &config.csv {
        let row = format!(
            "rust,{backend},{},{},{},{seconds:.4},{vectors_per_s:.1},{cpu_seconds:.4},{cpu_us_per_vector:.3}",
            config.count, config.batch_size, config.concurrency
        );
        append_csv(path, &row).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// User plus system CPU time of this process so far (all threads).
fn process_cpu() -> anyhow::Result<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a full rusage into the pointer it is given.
    let result = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    anyhow::ensure!(result == 0, "getrusage failed: {}", std::io::Error::last_os_error());
    // SAFETY: initialized by the successful call above.
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(time(usage.ru_utime) + time(usage.ru_stime))
}

fn append_csv(path: &std::path::Path, row: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    if file.metadata()?.len() == 0 {
        writeln!(file, "{CSV_HEADER}")?;
    }
    writeln!(file, "{row}")
}
