//! chaos: crashes under ingest, and what survives them. The split deployment of `scripts/cluster.sh` (two servers and
//! embedwire-gateway in front; on a 3-node Weaviate cluster, on a PostgreSQL primary with a streaming replica, or each
//! server on its own embedded store) takes documents through the gateway's `POST /v1/ingest` without pause, while each
//! cycle SIGKILLs a random server at a random moment (with Weaviate also a random node, with PostgreSQL also the
//! replica) and brings it back with `cluster.sh restart`, on its ports and data. After the last cycle every
//! acknowledged job must end, and every acknowledged document be found exactly once in the index that acknowledged it:
//! by id (`GetDocuments`) and by its own text as the query (`Search`, one hit per chunk). With embedded stores that
//! index is the acknowledging server's (the gateway fails over to the other server's index while the first is down,
//! and says so in `x-embedwire-upstream`); with a shared store it is the one index. Documents of calls that failed (an
//! error answer, a broken connection) were never acknowledged: they may or may not be stored, and are not judged.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use embedwire_bench::{
    corpus::{CorpusOptions, Paragraph},
    http_client::HttpConnection,
    latency::ms,
    options::{Common, at_least_one, seconds},
    report::{Report, Row, Table},
    server_binary,
    store_cluster::{SplitBinaries, Store, StoreCluster, WEAVIATE_NODES},
    wire_count::ByteCounters,
};
use embedwire_proto::v1::{
    GetDocumentsRequest, GetIndexStatsRequest, SearchQuery, SearchRequest, search_query,
    search_service_client::SearchServiceClient,
};
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint};

/// Corpus paragraphs the documents cycle through (each document's text is made its own by its number).
const PARAGRAPHS: (usize, usize) = (3000, 300);
/// The moment of the kill within a cycle, in ms after the previous restart (full, --quick).
const KILL_WINDOW_MS: ((u64, u64), (u64, u64)) = ((300, 4000), (200, 1500));
/// With a store process as a second victim, it dies within this many ms after the server.
const SECOND_KILL_SPREAD_MS: u64 = 1000;
/// An ingest call that takes longer counts as failed (not acknowledged); its connection is dropped.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Between polls of the unfinished jobs after the last cycle.
const JOB_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Ids per GetDocuments call and texts per Search call of the probes.
const IDS_PER_CALL: usize = 100;
const QUERIES_PER_CALL: usize = 16;
/// Hits asked per own-text query: the document's own chunk scores ~1.0, so it is among them unless lost.
const PROBE_TOP_K: u32 = 10;
/// Hits asked by a second search when the own-text query missed, to tell why (reported, still counted as lost): each
/// paragraph is ingested ~5 times (copies differ only in their number), so an approximate index could rank a stored
/// document below its near twins; found at rank 1, it was missing where the first search looked (with Weaviate, a
/// replica whose vector index lacks it); not found at all, it is not searchable there either.
const WIDE_PROBE_TOP_K: u32 = 1000;
/// Tries of `cluster.sh restart` per victim and cycle: a process that does not come back is retried (and counted)
/// before the run gives up.
const RESTART_TRIES: usize = 3;
/// Error lines of each server log printed after the run.
const LOG_ERRORS_SHOWN: usize = 5;
const CYCLE_COLUMNS: &str = "cycle,start_s,kill_after_ms,server,server_pid,store_process,store_pid,\
    server_restart_ms,store_restart_ms,acked_calls,acked_documents,failed_calls,failed_documents,restart_failures";

/// Options of the chaos scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub corpus: CorpusOptions,
    /// The servers' store.
    #[arg(long, value_enum)]
    pub store: Store,
    /// Kill-and-restart cycles.
    #[arg(long, default_value_t = 100, value_parser = at_least_one::<usize>())]
    pub cycles: usize,
    /// Seed of the victims and moments [default: from the clock; printed and written with the results].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Ingest loops through the gateway, each on its own connection.
    #[arg(long, default_value_t = 2, value_parser = at_least_one::<usize>())]
    pub ingesters: usize,
    /// Documents per POST /v1/ingest.
    #[arg(long, default_value_t = 8, value_parser = at_least_one::<usize>())]
    pub batch: usize,
    /// Pause of each ingest loop after a call, in ms: keeps the documents offered within what two servers embed on a
    /// small machine, so that the jobs left at the end take seconds.
    #[arg(long, default_value_t = 1000)]
    pub pause_ms: u64,
    /// Most jobs an ingest loop keeps open: it posts again only when fewer of its jobs are unfinished. The run is about
    /// faults, not drain speed: offered without a bound, the documents outran what a Weaviate cluster losing a node
    /// and a server every ~30 s indexes in small jobs (4,766 jobs queued over 100 cycles, ~80 minutes to drain), so
    /// each run measured the backlog's drain. The cap keeps work in flight at every kill and the final wait short.
    #[arg(long, default_value_t = 8, value_parser = at_least_one::<usize>())]
    pub open_jobs: usize,
    /// Longest wait for the acknowledged jobs to end after the last cycle; a job still open then is stuck.
    #[arg(long, default_value_t = 600.0, value_parser = seconds)]
    pub job_timeout_secs: f64,
}

/// An acknowledged ingest call: its job, where it went, and its documents (numbers `first..first + count`).
struct Acked {
    job_id: String,
    upstream: String,
    index: String,
    first: usize,
    count: usize,
    cycle: usize,
}

/// An ingest call that was not acknowledged.
struct Failed {
    documents: usize,
    cycle: usize,
    error: String,
}

/// What the ingest loops share: the documents, the running cycle, and the calls' outcomes.
struct Ingest {
    paragraphs: Vec<Paragraph>,
    /// The next document number to send.
    next: AtomicUsize,
    cycle: AtomicUsize,
    stop: AtomicBool,
    acked: Mutex<Vec<Acked>>,
    failed: Mutex<Vec<Failed>>,
}

impl Ingest {
    fn id(n: usize) -> String {
        format!("chaos-{n:06}")
    }

    /// Paragraphs repeat; the number makes every text (and its embedding) its own, so that its own text finds it.
    fn text(&self, n: usize) -> String {
        format!("{} (chaos document {n})", self.paragraphs[n % self.paragraphs.len()].text)
    }
}

/// One kill-and-restart cycle.
struct Cycle {
    start: Duration,
    kill_after: Duration,
    /// The server killed (name, pid), and the store process if one was.
    server: (String, u32),
    store: Option<(String, u32)>,
    /// Spawn to ready of each, by `cluster.sh restart`.
    server_restart: Duration,
    store_restart: Option<Duration>,
    /// Restarts that failed before one succeeded: (process, why).
    restart_failures: Vec<(String, String)>,
}

/// How the acknowledged jobs ended.
#[derive(Default)]
struct Jobs {
    completed: usize,
    /// (job, error).
    failed: Vec<(String, String)>,
    /// (job, its last status or why it could not be read).
    stuck: Vec<(String, String)>,
    took: Duration,
}

/// What the probes found wrong, per document id.
#[derive(Default)]
struct Probes {
    missing_by_id: Vec<String>,
    missing_by_text: Vec<String>,
    /// Missed by the own-text top 10, found by the wide search: (id, its rank there, 1-based).
    found_only_wide: Vec<(String, usize)>,
    doubled: Vec<String>,
    /// Per index: (index, documents it counts, pending, acknowledged into it).
    indexes: Vec<(String, u64, u64, usize)>,
}

impl Probes {
    fn lost(&self) -> Vec<&String> {
        // Found by the second search only is lost too: that search may be answered by another replica, and a
        // document one replica's vector index lacks is missed by every search that replica answers.
        let wide = self.found_only_wide.iter().map(|(id, _)| id);
        let mut lost: Vec<&String> = self.missing_by_id.iter().chain(&self.missing_by_text).chain(wide).collect();
        lost.sort();
        lost.dedup();
        lost
    }
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let store = args.store.name();
    let mut report = Report::new(common.results("chaos"), &format!("chaos_{store}"))?;
    let server = common.server_binary()?;
    let gateway = server_binary::gateway_beside(&server)?;
    let paragraphs = args.corpus.select(common.pick(PARAGRAPHS.0, PARAGRAPHS.1), 0, 0)?.documents;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |t| t.as_nanos() as u64)
    });
    println!("chaos: {store}, {} cycles, seed {seed}", args.cycles);
    // The servers' flags as env twins: the script starts (and restarts) them.
    let mut server_env = vec![("EMBEDWIRE_INTRA_OP_THREADS".to_string(), common.intra_op_threads.to_string().into())];
    for (name, path) in [("EMBEDWIRE_MODEL_DIR", &common.model_dir), ("EMBEDWIRE_ORT_LIBRARY", &common.ort_library)] {
        server_env.extend(path.as_ref().map(|path| (name.to_string(), path.into())));
    }
    anyhow::ensure!(common.server_args.is_empty(), "chaos: --server-arg is not passed to the script's servers");
    let binaries = SplitBinaries { server, gateway, server_env };
    let (cluster, took) = StoreCluster::start_split(args.store.kind(), binaries)?;
    println!("split deployment up after {:.1} s in {}", took.as_secs_f64(), cluster.state_dir().display());
    let ingest = Arc::new(Ingest {
        paragraphs,
        next: AtomicUsize::new(0),
        cycle: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        acked: Mutex::new(Vec::new()),
        failed: Mutex::new(Vec::new()),
    });
    let runtime = tokio::runtime::Runtime::new()?;
    let started = Instant::now();
    let outcome = runtime.block_on(async {
        let kill_window = common.pick(KILL_WINDOW_MS.0, KILL_WINDOW_MS.1);
        let chaos = chaos(&cluster, &args, ingest.clone(), (seed, kill_window));
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            outcome = chaos => outcome,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("SIGINT: stopped"),
            _ = terminate.recv() => anyhow::bail!("SIGTERM: stopped"),
        }
    });
    let (cycles, jobs, probes) = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            print_log_errors(&cluster);
            return Err(error); // the cluster stops as it drops; its logs stay
        }
    };
    let wall = started.elapsed();
    let acked = std::mem::take(&mut *ingest.acked.lock().expect("lock poisoned"));
    let failed = std::mem::take(&mut *ingest.failed.lock().expect("lock poisoned"));

    let rows = figures(&acked, &failed, &cycles, &jobs, &probes, wall);
    let clean = rows.iter().all(|row| row.passes() != Some(false));
    report.figures(rows);
    report.table(&format!("chaos_{store}_cycles.csv"), &cycles_table(&cycles, &acked, &failed))?;
    report.table(&format!("chaos_{store}_problems.csv"), &problems_table(&acked, &jobs, &probes))?;
    for (name, value, unit) in [
        ("cycles", args.cycles as f64, "cycles"),
        ("seed", seed as f64, "seed"),
        ("ingesters", args.ingesters as f64, "loops"),
        ("batch", args.batch as f64, "documents"),
        ("pause_ms", args.pause_ms as f64, "ms"),
        ("open_jobs", args.open_jobs as f64, "jobs per loop"),
        ("quick", f64::from(u8::from(common.quick)), "bool"),
    ] {
        report.setup(name, value, unit);
    }
    print_log_errors(&cluster);
    if clean {
        cluster.stop()?;
    } else {
        println!("something was lost, doubled or stuck: the logs stay in {}/logs", cluster.state_dir().display());
        drop(cluster);
    }
    report.finish()
}

/// The ingest loops, the cycles, then the jobs and the probes.
async fn chaos(
    cluster: &StoreCluster,
    args: &Args,
    ingest: Arc<Ingest>,
    (seed, kill_window): (u64, (u64, u64)),
) -> anyhow::Result<(Vec<Cycle>, Jobs, Probes)> {
    let gateway = cluster.gateway()?;
    let servers: Vec<String> = cluster.servers()?.into_iter().map(|(name, _)| name).collect();
    let loops: Vec<_> = (0..args.ingesters)
        .map(|_| {
            let pace = Pace { batch: args.batch, pause: Duration::from_millis(args.pause_ms), open_jobs: args.open_jobs };
            tokio::spawn(ingest_loop(gateway, ingest.clone(), pace))
        })
        .collect();
    let mut rng = SplitMix64(seed);
    let (mut cycles, started) = (Vec::with_capacity(args.cycles), Instant::now());
    for number in 0..args.cycles {
        ingest.cycle.store(number, Ordering::Relaxed);
        let start = started.elapsed();
        let kill_after = Duration::from_millis(rng.between(kill_window));
        tokio::time::sleep(kill_after).await;
        let server = servers[rng.below(servers.len())].clone();
        let server_pid = cluster.kill(&server)?;
        let store_victim = match args.store {
            Store::Embedded => None,
            Store::Weaviate => Some(cluster.store_processes()[rng.below(WEAVIATE_NODES)].clone()),
            Store::Postgres => Some("postgres-replica".to_string()),
        };
        let store = match store_victim {
            Some(name) => {
                tokio::time::sleep(Duration::from_millis(rng.between((0, SECOND_KILL_SPREAD_MS)))).await;
                let pid = cluster.kill(&name)?;
                Some((name, pid))
            }
            None => None,
        };
        // The store first: a server's readiness waits for its store.
        let mut restart_failures = Vec::new();
        let store_restart = match &store {
            Some((name, _)) => Some(restart(cluster, name, &mut restart_failures)?),
            None => None,
        };
        let server_restart = restart(cluster, &server, &mut restart_failures)?;
        let killed = store.as_ref().map_or(String::new(), |(name, _)| format!(" and {name}"));
        println!(
            "cycle {}/{}: killed {server}{killed} after {} ms; back after {:.1} s; {} documents acknowledged",
            number + 1,
            args.cycles,
            kill_after.as_millis(),
            (server_restart + store_restart.unwrap_or_default()).as_secs_f64(),
            ingest.acked.lock().expect("lock poisoned").iter().map(|a| a.count).sum::<usize>(),
        );
        let server = (server, server_pid);
        cycles.push(Cycle { start, kill_after, server, store, server_restart, store_restart, restart_failures });
    }
    ingest.stop.store(true, Ordering::Relaxed);
    for ingest_loop in loops {
        ingest_loop.await.context("ingest loop")??;
    }
    let job_ids: Vec<String> = ingest.acked.lock().expect("lock poisoned").iter().map(|a| a.job_id.clone()).collect();
    println!("waiting for {} acknowledged jobs", job_ids.len());
    let jobs = wait_for_jobs(gateway, &job_ids, Duration::from_secs_f64(args.job_timeout_secs)).await?;
    println!(
        "jobs: {} completed, {} failed, {} stuck after {:.1} s",
        jobs.completed,
        jobs.failed.len(),
        jobs.stuck.len(),
        jobs.took.as_secs_f64()
    );
    let probes = probe(&ingest).await?;
    Ok((cycles, jobs, probes))
}

/// `cluster.sh restart name` until it comes back (at most [`RESTART_TRIES`] times); the failed tries are recorded
/// with the last lines of their error (the process's own last log lines), and the time counts them all.
fn restart(cluster: &StoreCluster, name: &str, failures: &mut Vec<(String, String)>) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for attempt in 1..=RESTART_TRIES {
        match tokio::task::block_in_place(|| cluster.restart(name)) {
            Ok(_) => return Ok(started.elapsed()),
            Err(error) if attempt < RESTART_TRIES => {
                let text = format!("{error:#}");
                // The process's own error when it logged one; else it ended without a word (its log's last line).
                let lines: Vec<&str> = text.lines().collect();
                let last_log_line = lines.iter().rev().find(|line| !line.starts_with("cluster: ") && !line.is_empty());
                let why = match lines.iter().rev().find(|line| line.starts_with("Error: ")) {
                    Some(error) => error.to_string(),
                    None => format!("exited without an error; its last log line: {}", last_log_line.unwrap_or(&"")),
                };
                println!("  {name} did not come back (try {attempt}): {why}");
                failures.push((name.to_string(), why));
            }
            Err(error) => return Err(error),
        }
    }
    unreachable!("the last try returns")
}

/// How an ingest loop offers documents.
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// Documents per call.
    batch: usize,
    /// The pause after each call.
    pause: Duration,
    /// Most of its jobs unfinished before it posts again.
    open_jobs: usize,
}

/// Sends batches of new documents to the gateway until told to stop; records each call acknowledged or failed.
async fn ingest_loop(gateway: SocketAddr, ingest: Arc<Ingest>, pace: Pace) -> anyhow::Result<()> {
    let Pace { batch, pause, open_jobs } = pace;
    let mut connection: Option<HttpConnection> = None;
    let mut open: Vec<String> = Vec::new();
    while !ingest.stop.load(Ordering::Relaxed) {
        if open.len() >= open_jobs {
            drop_ended_jobs(&mut connection, gateway, &mut open).await;
            if open.len() >= open_jobs {
                tokio::time::sleep(JOB_POLL_INTERVAL).await;
                continue;
            }
        }
        let (first, cycle) = (ingest.next.fetch_add(batch, Ordering::Relaxed), ingest.cycle.load(Ordering::Relaxed));
        let ids: Vec<String> = (first..first + batch).map(Ingest::id).collect();
        let documents: Vec<Value> =
            ids.iter().zip(first..).map(|(id, n)| json!({"id": id, "text": ingest.text(n)})).collect();
        let body = json!({ "documents": documents });
        let call = ingest_call(&mut connection, gateway, &body, &ids);
        match tokio::time::timeout(CALL_TIMEOUT, call).await.unwrap_or_else(|_| Err(anyhow::anyhow!("timed out"))) {
            Ok((job_id, upstream, index)) => {
                open.push(job_id.clone());
                let acked = Acked { job_id, upstream, index, first, count: batch, cycle };
                ingest.acked.lock().expect("lock poisoned").push(acked);
            }
            Err(error) => {
                // A broken or timed-out call leaves the connection in an unknown state: a new one next time.
                connection = None;
                let failed = Failed { documents: batch, cycle, error: error_class(&error) };
                ingest.failed.lock().expect("lock poisoned").push(failed);
            }
        }
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

/// Forgets the jobs of `open` that ended (asked through the gateway). A job that cannot be asked (the gateway or its
/// server restarting) stays open until the next look.
async fn drop_ended_jobs(connection: &mut Option<HttpConnection>, gateway: SocketAddr, open: &mut Vec<String>) {
    let mut still_open = Vec::with_capacity(open.len());
    for id in open.drain(..) {
        if connection.is_none() {
            *connection = HttpConnection::open(gateway, ByteCounters::new()).await.ok();
        }
        let answer = match connection.as_mut() {
            Some(connection) => tokio::time::timeout(CALL_TIMEOUT, connection.get(&format!("/v1/jobs/{id}"))).await,
            None => Ok(Err(anyhow::anyhow!("no connection"))),
        };
        let status = match answer {
            Ok(Ok(answer)) => answer.json::<Value>().ok().and_then(|job| job["status"].as_str().map(str::to_string)),
            _ => {
                *connection = None;
                None
            }
        };
        if !matches!(status.as_deref(), Some("completed" | "failed")) {
            still_open.push(id);
        }
    }
    *open = still_open;
}

/// One POST /v1/ingest; Ok only for an acknowledgement of exactly these ids: (job, upstream, index).
async fn ingest_call(
    connection: &mut Option<HttpConnection>,
    gateway: SocketAddr,
    body: &Value,
    ids: &[String],
) -> anyhow::Result<(String, String, String)> {
    if connection.is_none() {
        *connection = Some(HttpConnection::open(gateway, ByteCounters::new()).await?);
    }
    let answer = connection.as_mut().expect("opened above").post_json("/v1/ingest", body).await?;
    if !answer.status.is_success() {
        let detail: Value = answer.json().unwrap_or(Value::Null);
        let (code, message) = (&detail["error"]["code"], &detail["error"]["message"]);
        let (code, message) = (code.as_str().unwrap_or(""), message.as_str().unwrap_or(""));
        anyhow::bail!("HTTP {} {code}: {message}", answer.status.as_u16());
    }
    let job: Value = answer.json().context("the ingest answer")?;
    let acknowledged: Vec<&str> =
        job["document_ids"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    anyhow::ensure!(acknowledged == ids, "acknowledged other ids than sent: {acknowledged:?}");
    let job_id = job["job_id"].as_str().context("an ingest answer without job_id")?.to_string();
    let header = |name| answer.header(name).map(str::to_string).with_context(|| format!("no {name} header"));
    Ok((job_id, header("x-embedwire-upstream")?, header("x-embedwire-index")?))
}

/// An error without what differs between calls (ids and counts in the message after the status), so that alike
/// failures count together.
fn error_class(error: &anyhow::Error) -> String {
    let text = format!("{error:#}");
    let (head, message) = text.split_once(": ").unwrap_or((&text, ""));
    let message: String = message.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
    format!("{head}: {message}").chars().take(160).collect()
}

/// Polls every acknowledged job through the gateway (which asks every upstream) until each ended or `timeout` passed.
async fn wait_for_jobs(gateway: SocketAddr, job_ids: &[String], timeout: Duration) -> anyhow::Result<Jobs> {
    let (started, mut jobs) = (Instant::now(), Jobs::default());
    let mut open: BTreeMap<&str, String> =
        job_ids.iter().map(|id| (id.as_str(), "not asked yet".to_string())).collect();
    let mut connection = HttpConnection::open(gateway, ByteCounters::new()).await?;
    while !open.is_empty() && started.elapsed() < timeout {
        let mut ended = Vec::new();
        for (id, last) in open.iter_mut() {
            let answer = match connection.get(&format!("/v1/jobs/{id}")).await {
                Ok(answer) => answer,
                Err(error) => {
                    *last = format!("GET failed: {error:#}");
                    connection = HttpConnection::open(gateway, ByteCounters::new()).await?;
                    continue;
                }
            };
            let job: Value = answer.json().unwrap_or(Value::Null);
            match job["status"].as_str() {
                Some("completed") => {
                    jobs.completed += 1;
                    ended.push(*id);
                }
                Some("failed") => {
                    jobs.failed.push((id.to_string(), job["error"].as_str().unwrap_or("").to_string()));
                    ended.push(*id);
                }
                Some(status) => {
                    *last = format!("{status}, {} of {} processed", job["processed_documents"], job["total_documents"])
                }
                None => *last = format!("HTTP {}: {}", answer.status.as_u16(), String::from_utf8_lossy(&answer.body)),
            }
        }
        for id in ended {
            open.remove(id);
        }
        if !open.is_empty() {
            tokio::time::sleep(JOB_POLL_INTERVAL).await;
        }
    }
    jobs.stuck = open.into_iter().map(|(id, last)| (id.to_string(), last)).collect();
    jobs.took = started.elapsed();
    Ok(jobs)
}

/// Every acknowledged document, at the server that acknowledged it: by id, and by its own text as the query.
async fn probe(ingest: &Ingest) -> anyhow::Result<Probes> {
    let acked = ingest.acked.lock().expect("lock poisoned");
    let mut by_upstream: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut per_index: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    for call in acked.iter() {
        by_upstream.entry(&call.upstream).or_default().extend(call.first..call.first + call.count);
        per_index.entry(&call.index).or_insert((&call.upstream, 0)).1 += call.count;
    }
    let mut probes = Probes::default();
    for (upstream, numbers) in &by_upstream {
        let mut client = SearchServiceClient::new(connect(upstream).await?);
        for numbers in numbers.chunks(IDS_PER_CALL) {
            let ids: Vec<String> = numbers.iter().map(|&n| Ingest::id(n)).collect();
            let found = client.get_documents(GetDocumentsRequest { ids: ids.clone(), ..Default::default() }).await.context("GetDocuments")?;
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for document in &found.get_ref().documents {
                *seen.entry(document.id.as_str()).or_default() += 1;
            }
            for id in &ids {
                match seen.get(id.as_str()) {
                    None => probes.missing_by_id.push(id.clone()),
                    Some(&count) if count > 1 => probes.doubled.push(id.clone()),
                    Some(_) => {}
                }
            }
        }
        let mut missed = Vec::new();
        for numbers in numbers.chunks(QUERIES_PER_CALL) {
            let request = own_text_search(numbers.iter().map(|&n| ingest.text(n)), PROBE_TOP_K);
            let answer = client.search(request).await.context("Search")?.into_inner();
            anyhow::ensure!(answer.results.len() == numbers.len(), "Search answered {} results", answer.results.len());
            for (&n, result) in numbers.iter().zip(&answer.results) {
                let id = Ingest::id(n);
                let mut chunks: Vec<u32> = result
                    .hits
                    .iter()
                    .filter(|hit| hit.document_id == id)
                    .map(|hit| hit.chunk.unwrap_or_default().index)
                    .collect();
                let hits = chunks.len();
                chunks.sort_unstable();
                chunks.dedup();
                if hits == 0 {
                    missed.push(n);
                } else if chunks.len() < hits {
                    probes.doubled.push(id);
                }
            }
        }
        for n in missed {
            match wide_rank(&mut client, &ingest.text(n), &Ingest::id(n)).await? {
                Some(rank) => probes.found_only_wide.push((Ingest::id(n), rank)),
                None => probes.missing_by_text.push(Ingest::id(n)),
            }
        }
    }
    for (index, (upstream, acknowledged)) in per_index {
        let mut client = SearchServiceClient::new(connect(upstream).await?);
        let stats = client.get_index_stats(GetIndexStatsRequest::default()).await.context("GetIndexStats")?.into_inner();
        probes.indexes.push((index.to_string(), stats.document_count, stats.pending_documents, acknowledged));
    }
    probes.doubled.sort();
    probes.doubled.dedup();
    Ok(probes)
}

/// A probe's search: `texts` as queries, `top_k` hits each, ids and chunk numbers only, no rerank.
fn own_text_search(texts: impl IntoIterator<Item = String>, top_k: u32) -> SearchRequest {
    SearchRequest {
        queries: texts.into_iter().map(|text| SearchQuery { query: Some(search_query::Query::Text(text)) }).collect(),
        top_k: Some(top_k),
        include_text: Some(false),
        include_metadata: Some(false),
        rerank: Some(false),
        ..SearchRequest::default()
    }
}

/// The rank (1-based) of document `id`'s first hit among [`WIDE_PROBE_TOP_K`] hits for `text`, if there.
async fn wide_rank(client: &mut SearchServiceClient<Channel>, text: &str, id: &str) -> anyhow::Result<Option<usize>> {
    let request = own_text_search([text.to_string()], WIDE_PROBE_TOP_K);
    let answer = client.search(request).await.context("Search (wide)")?.into_inner();
    let hits = answer.results.first().map(|result| result.hits.as_slice()).unwrap_or_default();
    Ok(hits.iter().position(|hit| hit.document_id == id).map(|at| at + 1))
}

async fn connect(upstream: &str) -> anyhow::Result<Channel> {
    let endpoint = Endpoint::from_shared(upstream.to_string())?.timeout(Duration::from_secs(120));
    endpoint.connect().await.with_context(|| format!("connecting to {upstream}"))
}

fn figures(
    acked: &[Acked],
    failed: &[Failed],
    cycles: &[Cycle],
    jobs: &Jobs,
    probes: &Probes,
    wall: Duration,
) -> Vec<Row> {
    let documents: usize = acked.iter().map(|a| a.count).sum();
    let failed_documents: usize = failed.iter().map(|f| f.documents).sum();
    let mut rows = vec![
        Row::info("cycles (SIGKILL, restart)", cycles.len() as f64, "cycles", cycles.len().to_string()),
        Row::info("run time", wall.as_secs_f64(), "s", format!("{:.0} s", wall.as_secs_f64())),
        Row::info("acknowledged documents", documents as f64, "docs", format!("{documents} in {} calls", acked.len())),
        Row::info(
            "ingest calls not acknowledged",
            failed.len() as f64,
            "calls",
            format!("{} ({failed_documents} documents, not judged)", failed.len()),
        ),
    ];
    let mut restarts: Vec<(&str, Vec<Duration>)> = vec![("server", cycles.iter().map(|c| c.server_restart).collect())];
    let store: Vec<Duration> = cycles.iter().filter_map(|c| c.store_restart).collect();
    if !store.is_empty() {
        restarts.push(("store process", store));
    }
    for (what, mut times) in restarts {
        times.sort_unstable();
        let (p50, max) = (ms(times[times.len() / 2]) / 1e3, ms(times[times.len() - 1]) / 1e3);
        rows.push(Row::info(format!("{what} restart to ready p50 / max"), p50, "s", format!("{p50:.1} / {max:.1} s")));
    }
    let failures: Vec<&(String, String)> = cycles.iter().flat_map(|c| &c.restart_failures).collect();
    let measured = format!("{} (each retried until it came back)", failures.len());
    rows.push(Row::info("restarts that failed", failures.len() as f64, "restarts", measured));
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (name, why) in failures {
        let why: String = why.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).take(160).collect();
        *reasons.entry(format!("{}: {why}", name.trim_end_matches(|c: char| c.is_ascii_digit()))).or_default() += 1;
    }
    for (reason, count) in reasons {
        rows.push(Row::info(format!("restart failed: {reason}"), count as f64, "restarts", count.to_string()));
    }
    let took = jobs.took.as_secs_f64();
    rows.push(Row::info("jobs ended after the last cycle", took, "s", format!("{} in {took:.1} s", jobs.completed)));
    for (index, count, pending, acknowledged) in &probes.indexes {
        let measured = format!("{count} ({acknowledged} acknowledged into it; {pending} pending documents counted by the store)");
        rows.push(Row::info(format!("documents in index {index}"), *count as f64, "docs", measured));
    }
    let lost = probes.lost().len();
    let lost_note = format!(
        "{} not found by id, {} not by their text in the top {WIDE_PROBE_TOP_K}, {} only by a second search",
        probes.missing_by_id.len(),
        probes.missing_by_text.len(),
        probes.found_only_wide.len()
    );
    let wide = &probes.found_only_wide;
    let ranks: Vec<String> = wide.iter().map(|(_, rank)| rank.to_string()).collect();
    let measured = if wide.is_empty() { "0".to_string() } else { format!("{} (ranks {})", wide.len(), ranks.join(", ")) };
    let figure =
        format!("documents missed by the own-text top {PROBE_TOP_K}, found by a second search (top {WIDE_PROBE_TOP_K})");
    rows.push(Row::info(figure, wide.len() as f64, "docs", measured).with_note(
        "counted as lost: rank 1 means the first search was answered where the document is missing (with Weaviate, \
         a replica whose vector index lacks it), a lower rank that near twins outranked it",
    ));
    let judged = [
        ("lost documents (acknowledged, not found)", lost, "docs", lost_note),
        ("doubled documents (a copy or chunk twice)", probes.doubled.len(), "docs", String::new()),
        ("stuck jobs (open after the wait)", jobs.stuck.len(), "jobs", String::new()),
        ("failed jobs", jobs.failed.len(), "jobs", String::new()),
    ];
    for (figure, count, unit, note) in judged {
        rows.push(Row::info(figure, count as f64, unit, count.to_string()).at_most(0.0, "0".into()).with_note(note));
    }
    let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
    for failure in failed {
        *errors.entry(&failure.error).or_default() += 1;
    }
    for (error, count) in errors {
        rows.push(Row::info(format!("not acknowledged: {error}"), count as f64, "calls", count.to_string()));
    }
    rows
}

fn cycles_table(cycles: &[Cycle], acked: &[Acked], failed: &[Failed]) -> Table {
    let mut table = Table::new(CYCLE_COLUMNS);
    for (number, cycle) in cycles.iter().enumerate() {
        let acked: Vec<&Acked> = acked.iter().filter(|a| a.cycle == number).collect();
        let failed: Vec<&Failed> = failed.iter().filter(|f| f.cycle == number).collect();
        let (store, store_pid) =
            cycle.store.as_ref().map_or((String::new(), String::new()), |(name, pid)| (name.clone(), pid.to_string()));
        table.row([
            number.to_string(),
            format!("{:.3}", cycle.start.as_secs_f64()),
            cycle.kill_after.as_millis().to_string(),
            cycle.server.0.clone(),
            cycle.server.1.to_string(),
            store,
            store_pid,
            format!("{:.0}", ms(cycle.server_restart)),
            cycle.store_restart.map_or(String::new(), |t| format!("{:.0}", ms(t))),
            acked.len().to_string(),
            acked.iter().map(|a| a.count).sum::<usize>().to_string(),
            failed.len().to_string(),
            failed.iter().map(|f| f.documents).sum::<usize>().to_string(),
            cycle.restart_failures.len().to_string(),
        ]);
    }
    table
}

/// Every document or job found wrong, with where it went: what a failed run is debugged from.
fn problems_table(acked: &[Acked], jobs: &Jobs, probes: &Probes) -> Table {
    let mut table = Table::new("problem,document_id,job_id,upstream,index,cycle,detail");
    let call_of = |id: &str| {
        let n: usize = id.trim_start_matches("chaos-").parse().unwrap_or(usize::MAX);
        acked.iter().find(|a| (a.first..a.first + a.count).contains(&n))
    };
    let documents = [
        ("missing by id", &probes.missing_by_id),
        ("missing by text", &probes.missing_by_text),
        ("doubled", &probes.doubled),
    ];
    for (problem, ids) in documents {
        for id in ids {
            let (job, upstream, index, cycle) = call_of(id).map_or(Default::default(), |a| {
                (a.job_id.clone(), a.upstream.clone(), a.index.clone(), a.cycle.to_string())
            });
            table.row([problem.to_string(), id.clone(), job, upstream, index, cycle, String::new()]);
        }
    }
    for (id, rank) in &probes.found_only_wide {
        let (job, upstream, index, cycle) = call_of(id).map_or(Default::default(), |a| {
            (a.job_id.clone(), a.upstream.clone(), a.index.clone(), a.cycle.to_string())
        });
        let detail = format!("not in the own-text top {PROBE_TOP_K}; rank {rank} of the top {WIDE_PROBE_TOP_K}");
        table.row(["found only by a wide search".to_string(), id.clone(), job, upstream, index, cycle, detail]);
    }
    for (problem, list) in [("job stuck", &jobs.stuck), ("job failed", &jobs.failed)] {
        for (job_id, detail) in list {
            let call = acked.iter().find(|a| &a.job_id == job_id);
            let (upstream, index, cycle) =
                call.map_or(Default::default(), |a| (a.upstream.clone(), a.index.clone(), a.cycle.to_string()));
            table.row([
                problem.to_string(),
                String::new(),
                job_id.clone(),
                upstream,
                index,
                cycle,
                detail.replace(',', ";"),
            ]);
        }
    }
    table
}

/// The ERROR lines of each server's log (all its runs), the first few printed: what a failed run starts from.
fn print_log_errors(cluster: &StoreCluster) {
    for name in cluster
        .servers()
        .map(|servers| servers.into_iter().map(|(name, _)| name).collect())
        .unwrap_or_else(|_| Vec::new())
    {
        let path = cluster.state_dir().join(format!("logs/{name}.log"));
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let errors: Vec<&str> = log.lines().filter(|line| line.contains(" ERROR ")).collect();
        if !errors.is_empty() {
            println!("{name}: {} ERROR lines in {}; the first:", errors.len(), path.display());
            for line in errors.iter().take(LOG_ERRORS_SHOWN) {
                println!("  {line}");
            }
        }
    }
}

/// A small seeded generator (SplitMix64): victims and moments are reproducible from the printed seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `low..high` (`low` when empty).
    fn between(&mut self, (low, high): (u64, u64)) -> u64 {
        low + self.next() % (high - low).max(1)
    }
}
