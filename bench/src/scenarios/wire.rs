//! wire: JSON against binary on one server (the pseudo backend, 256 real query
//! sentences per call), so the transport and the encodings are all that differ: gRPC
//! Embed in each dtype against POST /v1/embeddings (JSON floats, base64, octet-stream)
//! and the legacy POST /embed. Per variant: requests/s and latency under load, bytes on
//! the sockets, the server's encode step (its own code, in-process), the client's decode
//! in Rust and Python (`bench/decode_bench.py`), and server CPU per call at c=1. Every
//! answer is decoded inside the timed call, as a real client would. The variants take
//! turns in rounds, so a change in the machine's load hits them alike.

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use bytes::Bytes;
use embedwire_bench::{
    closed_loop::{self, Caller, ClosedLoopRun},
    corpus::CorpusOptions,
    cpu::{CpuUse, CpuWindow},
    http_client::HttpConnection,
    latency::{median_time, ms},
    load::Stop,
    options::{Common, at_least_one, program_output},
    report::{Report, Row, Table},
    server_process::ServerProcess,
    wire_count::{ByteCounters, PreEncoded, grpc_channel},
};
use embedwire_gateway_http::{
    encoding::{FloatRow, FloatRows, binary_response, row_bytes},
    routes::openai::{EmbeddingItem, EmbeddingValue, EmbeddingsReply, UsageBody},
};
use embedwire_proto::{
    v1::{EmbedRequest, EmbedResponse, EmbeddingDtype as Dtype},
    vectors,
};
use prost::Message;
use serde::Deserialize;
use serde_json::json;

/// gRPC FLOAT32 requests/s at least this many times HTTP JSON floats'.
const MIN_RPS_RATIO: f64 = 3.0;
/// gRPC FLOAT32 bytes per response at most this fraction of HTTP JSON floats'.
const MAX_BYTES_RATIO: f64 = 0.45;
/// `wire_bench.csv`, one line per variant.
const COLUMNS: &str = "variant,description,concurrency,requests,errors,seconds,rps,p50_ms,p95_ms,p99_ms,\
    bytes_per_response,request_bytes,body_bytes,one_call_wire_bytes,one_call_request_bytes,server_encode_ms,\
    rust_decode_ms,python_decode_ms,python_runs,python_max_abs_diff,server_cpu_ms_per_call_c1,c1_p50_ms,server_cores,\
    bench_cores";
/// Answers each variant gives before it is measured.
const WARMUP_CALLS: usize = 3;
/// The server's backend: pseudo measures the transport and the encodings alone (the
/// targets' setting); onnx would add what the model costs.
const BACKEND: &str = "pseudo";
/// Texts per call (real query sentences from the docstring corpus).
const TEXTS: usize = 256;
/// The Python decode benchmark, and the protos it generates its classes from.
const DECODE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/decode_bench.py");
const PROTO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto");

/// Options of the wire scenario (`--concurrency`: one level, default 16).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Variants to measure, by name (grpc_float32, http_octet_stream, ...) [default: all].
    #[arg(long, env = "WIRE_BENCH_VARIANTS", value_delimiter = ',')]
    pub variants: Vec<String>,
    /// Rounds the variants take in turn [default: 2, --quick: 1].
    #[arg(long, env = "WIRE_BENCH_ROUNDS", value_parser = at_least_one::<usize>())]
    pub rounds: Option<usize>,
    /// The corpus, and the Python the decode benchmark runs with.
    #[command(flatten)]
    pub corpus: CorpusOptions,
}

/// What a variant asks for: a gRPC dtype, or an HTTP body and how a client decodes it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Grpc(Dtype),
    JsonFloat,
    JsonBase64,
    Octet,
    EmbedJson,
}

/// Every variant in table order: name (tables, CSV, files), description, and the decoder `decode_bench.py` uses.
const VARIANTS: [(Kind, &str, &str, &str); 9] = [
    (Kind::Grpc(Dtype::Float32), "grpc_float32", "gRPC Embed, FLOAT32 bytes", "grpc"),
    (Kind::Grpc(Dtype::Float16), "grpc_float16", "gRPC Embed, FLOAT16 bytes", "grpc"),
    (Kind::Grpc(Dtype::Int8), "grpc_int8", "gRPC Embed, INT8 bytes + row scales", "grpc"),
    (Kind::Grpc(Dtype::Ubinary), "grpc_ubinary", "gRPC Embed, UBINARY (1 bit/dim)", "grpc"),
    (Kind::Grpc(Dtype::Float32List), "grpc_float32_list", "gRPC Embed, FLOAT32_LIST (repeated float)", "grpc"),
    (Kind::JsonFloat, "http_json_float", "HTTP /v1/embeddings, JSON floats", "json_float"),
    (Kind::JsonBase64, "http_json_base64", "HTTP /v1/embeddings, base64", "json_base64"),
    (Kind::Octet, "http_octet_stream", "HTTP /v1/embeddings, octet-stream", "octet"),
    (Kind::EmbedJson, "http_embed_json", "HTTP /embed, JSON floats", "embed_json"),
];

/// A decoded answer: count, dim and the vectors as f32 (FLOAT16 and INT8
/// approximately; none for UBINARY, whose bits are used as they are).
type Decoded = (usize, usize, Vec<f32>);

#[derive(Deserialize)]
struct OpenAi<T> {
    data: Vec<Item<T>>,
}

#[derive(Deserialize)]
struct Item<T> {
    embedding: T,
}

#[derive(Deserialize)]
struct EmbedJson {
    embeddings: Vec<Vec<f32>>,
}

fn flatten(rows: impl IntoIterator<Item = Vec<f32>>) -> anyhow::Result<Decoded> {
    let (mut values, mut dim, mut count) = (Vec::new(), None, 0);
    for row in rows {
        anyhow::ensure!(*dim.get_or_insert(row.len()) == row.len(), "row {count} has {} values", row.len());
        values.extend_from_slice(&row);
        count += 1;
    }
    Ok((count, dim.unwrap_or(0), values))
}

/// Decodes an HTTP body (the octet-stream's shape in its header) or the protobuf bytes of an `EmbedResponse`.
fn decode(kind: Kind, body: &[u8], dim_header: Option<&str>) -> anyhow::Result<Decoded> {
    match kind {
        Kind::Grpc(_) => decode_grpc(&EmbedResponse::decode(body)?),
        Kind::JsonFloat => {
            flatten(serde_json::from_slice::<OpenAi<Vec<f32>>>(body)?.data.into_iter().map(|i| i.embedding))
        }
        Kind::EmbedJson => flatten(serde_json::from_slice::<EmbedJson>(body)?.embeddings),
        Kind::JsonBase64 => {
            let data = serde_json::from_slice::<OpenAi<String>>(body)?.data;
            let rows = data.iter().map(|i| anyhow::Ok(vectors::f32_from_le_bytes(&BASE64.decode(&i.embedding)?)));
            flatten(rows.collect::<anyhow::Result<Vec<_>>>()?)
        }
        Kind::Octet => {
            let dim: usize = dim_header.context("no x-embedding-dimensions header")?.parse()?;
            let bytes = body.len();
            anyhow::ensure!(dim > 0 && bytes.is_multiple_of(dim * 4), "{bytes} bytes are not rows of {dim} f32");
            Ok((bytes / (dim * 4), dim, vectors::f32_from_le_bytes(body)))
        }
    }
}

fn decode_grpc(r: &EmbedResponse) -> anyhow::Result<Decoded> {
    let (count, dim, dtype) = (r.count as usize, r.dim as usize, vectors::effective_dtype(r.dtype()));
    if dtype == Dtype::Ubinary {
        // The bits copied out, as a client keeping them does.
        let bits = std::hint::black_box(r.embeddings.to_vec());
        anyhow::ensure!(bits.len() == count * vectors::bytes_per_row(dtype, dim), "UBINARY of {} bytes", bits.len());
        return Ok((count, dim, Vec::new()));
    }
    Ok((count, dim, vectors::decode_rows(&r.embeddings, &r.row_scales, &r.values, count, dim, dtype)?))
}

/// One worker: its own connection counted in shared counters, the same request
/// (encoded once) every call, every answer decoded and its vector count checked.
struct VariantCaller {
    kind: Kind,
    transport: Transport,
    request: (&'static str, Bytes, Option<&'static str>),
    texts: usize,
}

enum Transport {
    Grpc(tonic::client::Grpc<tonic::transport::Channel>),
    Http(HttpConnection),
}

impl VariantCaller {
    async fn connect(kind: Kind, texts: &[String], at: SocketAddr, bytes: Arc<ByteCounters>) -> anyhow::Result<Self> {
        let json = |value: serde_json::Value| serde_json::to_vec(&value).expect("plain JSON");
        let openai = |format| json(json!({"input": texts, "model": "bench", "encoding_format": format}));
        let http = async || anyhow::Ok(Transport::Http(HttpConnection::open(at, bytes.clone()).await?));
        let (path, body, accept, transport) = match kind {
            Kind::Grpc(dtype) => {
                let request = EmbedRequest { inputs: texts.to_vec(), dtype: dtype as i32, ..Default::default() };
                let channel = grpc_channel(at, bytes).await.context("gRPC connection")?;
                // The default 4 MiB limit is below a 1024-text FLOAT32_LIST answer.
                let client = tonic::client::Grpc::new(channel).max_decoding_message_size(64 << 20);
                ("/embedwire.v1.EmbedService/Embed", request.encode_to_vec(), None, Transport::Grpc(client))
            }
            Kind::JsonFloat => ("/v1/embeddings", openai("float"), None, http().await?),
            Kind::JsonBase64 => ("/v1/embeddings", openai("base64"), None, http().await?),
            Kind::Octet => {
                let body = json(json!({"input": texts, "model": "bench"}));
                ("/v1/embeddings", body, Some("application/octet-stream"), http().await?)
            }
            Kind::EmbedJson => ("/embed", json(json!({"texts": texts})), None, http().await?),
        };
        Ok(VariantCaller { kind, transport, request: (path, body.into(), accept), texts: texts.len() })
    }

    /// One call, decoded; with `keep`, the bytes that carried it (and the octet-stream's dimensions header) too.
    async fn fetch(&mut self, keep: bool) -> anyhow::Result<(Decoded, Vec<u8>, Option<String>)> {
        let (path, body, accept) = self.request.clone();
        let answer = match &mut self.transport {
            Transport::Grpc(client) => {
                client.ready().await.context("gRPC connection")?;
                let path = http::uri::PathAndQuery::from_static(path);
                let call = client.unary(tonic::Request::new(body), path, PreEncoded::default());
                let response: EmbedResponse = call.await.context("Embed")?.into_inner();
                (decode_grpc(&response)?, if keep { response.encode_to_vec() } else { Vec::new() }, None)
            }
            Transport::Http(connection) => {
                let response =
                    connection.send(http::Method::POST, path, Some((body, "application/json")), accept).await?;
                response.ensure_success()?;
                let dim_header = response.header("x-embedding-dimensions");
                let decoded = decode(self.kind, &response.body, dim_header)?;
                let kept = if keep { response.body.to_vec() } else { Vec::new() };
                (decoded, kept, dim_header.filter(|_| keep).map(str::to_string))
            }
        };
        anyhow::ensure!(answer.0.0 == self.texts, "{} vectors for {} inputs", answer.0.0, self.texts);
        Ok(answer)
    }
}

impl Caller for VariantCaller {
    async fn call(&mut self, _n: usize) -> anyhow::Result<()> {
        self.fetch(false).await.map(|_| ())
    }
}

/// The server's encode step for `kind` from one answer's vectors, with the server's
/// own code: embedwire-proto's dtype encodings and prost, or the HTTP layer's reply
/// types and serializers on the FLOAT32 bytes it gets from the embed service.
fn server_encode(kind: Kind, values: &[f32], dim: usize) -> usize {
    let count = values.len() / dim;
    let bytes = vectors::encode_rows(values, dim, if let Kind::Grpc(dtype) = kind { dtype } else { Dtype::Float32 });
    let json = |body: serde_json::Result<Vec<u8>>| body.map_or(0, |body| body.len());
    match kind {
        Kind::Grpc(dtype) => EmbedResponse {
            dim: dim as u32,
            count: count as u32,
            dtype: vectors::effective_dtype(dtype) as i32,
            embeddings: bytes.bytes.into(),
            row_scales: bytes.row_scales,
            values: bytes.values,
            ..Default::default()
        }
        .encode_to_vec()
        .len(),
        Kind::JsonFloat | Kind::JsonBase64 => {
            let item = |index| {
                let row = row_bytes(&bytes.bytes, dim, index);
                let embedding = match kind {
                    Kind::JsonFloat => EmbeddingValue::Float(FloatRow(row)),
                    _ => EmbeddingValue::Base64(BASE64.encode(row)),
                };
                EmbeddingItem { object: "embedding", index, embedding }
            };
            let (data, usage) = ((0..count).map(item).collect(), UsageBody { prompt_tokens: 0, total_tokens: 0 });
            json(serde_json::to_vec(&EmbeddingsReply { object: "list", data, model: "bench".into(), usage }))
        }
        Kind::EmbedJson => {
            #[derive(serde::Serialize)]
            struct Reply<'a> {
                embeddings: FloatRows<'a>,
            }
            json(serde_json::to_vec(&Reply { embeddings: FloatRows { bytes: &bytes.bytes, dim } }))
        }
        Kind::Octet => {
            let length = bytes.bytes.len();
            drop(binary_response(bytes.bytes.into(), count as u32, dim as u32));
            length
        }
    }
}

/// What `decode_bench.py` measured for one variant.
#[derive(Debug, Clone, Deserialize)]
struct PythonDecode {
    median_ms: f64,
    runs: usize,
    /// Largest difference from the gRPC FLOAT32 vectors (None for UBINARY bits).
    max_abs_diff: Option<f64>,
}

/// Every figure of one variant.
#[derive(Default)]
struct Measured {
    name: &'static str,
    description: &'static str,
    body: usize,
    /// (received, sent) bytes of one call on an open connection, then under load.
    wire: (u64, u64),
    load_bytes: (u64, u64),
    encode: Duration,
    decode: Duration,
    python: Option<PythonDecode>,
    /// One client, for server CPU per call; then the concurrent load, rounds combined.
    single: (ClosedLoopRun, CpuUse),
    load: (ClosedLoopRun, CpuUse),
}

impl Measured {
    fn per_call(&self, bytes: u64) -> f64 {
        bytes as f64 / self.load.0.timings.len().max(1) as f64
    }

    fn server_cpu_ms(&self) -> f64 {
        self.single.1.server_cores * self.single.1.wall.as_secs_f64() * 1e3 / self.single.0.ok().max(1) as f64
    }
}

#[tokio::main]
pub async fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let &[concurrency] = common.sweep(&[16], &[16]).as_slice() else { anyhow::bail!("wire runs at one --concurrency") };
    let find = |name: &String| VARIANTS.into_iter().find(|v| v.1 == name).context(format!("no variant {name}"));
    let mut variants = args.variants.iter().map(find).collect::<anyhow::Result<Vec<_>>>()?;
    if variants.is_empty() {
        variants = VARIANTS.to_vec();
    }
    let python = args.corpus.python()?;
    let mut report = Report::new(common.results("wire"), "wire")?;
    let binary = common.server_binary()?;
    let texts = args.corpus.select(0, 0, TEXTS)?.queries;
    println!("wire: {BACKEND} backend, {} texts per call, {concurrency} workers", texts.len());
    let flags = vec![("--backend", BACKEND.into())];
    let (server, _) = ServerProcess::start(&common.server_command(binary, flags)).await?;
    let connect = |kind, bytes| VariantCaller::connect(kind, &texts, server.address, bytes);
    let workers = async |kind, bytes: &Arc<ByteCounters>| {
        let mut workers = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            workers.push(connect(kind, bytes.clone()).await?);
        }
        anyhow::Ok(workers)
    };

    // The HTTP variants need the server's HTTP layer; without it the gRPC ones still run.
    let http = async { HttpConnection::open(server.address, ByteCounters::new()).await?.get("/healthz").await };
    if let Err(why) = http.await.and_then(|answer| answer.ensure_success()) {
        println!("skipping the HTTP variants: the server's HTTP layer does not answer: {why:#}");
        variants.retain(|v| matches!(v.0, Kind::Grpc(_)));
    }
    // The vectors the server's encode step starts from: one real answer.
    let ((_, dim, values), ..) = connect(Kind::Grpc(Dtype::Float32), ByteCounters::new()).await?.fetch(false).await?;
    let micro_time = Duration::from_secs_f64(common.pick(0.3, 0.05));
    let probe_time = Duration::from_secs_f64(common.pick(1.0, 0.2)); // one client: server CPU per call
    let (mut measured, mut manifest) = (Vec::new(), serde_json::Map::new());
    std::fs::create_dir_all(report.dir().join("bodies"))?;
    for &(kind, name, description, decoder) in &variants {
        let counters = ByteCounters::new();
        let mut caller = connect(kind, counters.clone()).await?;
        for _ in 0..WARMUP_CALLS {
            caller.fetch(false).await.with_context(|| format!("{name} warm-up"))?;
        }
        let before = counters.totals();
        let ((count, _, _), body, header) = caller.fetch(true).await?;
        let after = counters.totals();
        let single = CpuWindow::around(server.pid, closed_loop::run(vec![caller], Stop::After(probe_time))).await?;
        decode(kind, &body, header.as_deref())?;
        let m = Measured {
            name,
            description,
            body: body.len(),
            wire: (after.0 - before.0, after.1 - before.1),
            encode: median_time(micro_time, || server_encode(kind, &values, dim)),
            decode: median_time(micro_time, || decode(kind, &body, header.as_deref())),
            single,
            ..Default::default()
        };
        println!("{name}: one call {} B on the wire, c=1 p50 {:.1} ms", m.wire.0, ms(m.single.0.latency().p50));
        std::fs::write(report.dir().join(format!("bodies/{name}.bin")), body)?;
        manifest.insert(name.into(), json!({"kind": decoder, "count": count, "dim": dim}));
        measured.push(m);
    }

    // The Python side of the decode cost: json.loads against numpy.frombuffer on the answers just captured.
    report.write("bodies/manifest.json", &serde_json::to_string_pretty(&manifest)?)?;
    let mut decoding = std::process::Command::new(&python);
    decoding.args([DECODE_SCRIPT.as_ref(), "--dir".as_ref(), report.dir().join("bodies").as_os_str()]);
    decoding.args(["--proto-dir", PROTO_DIR]);
    decoding.args(["--seconds", &common.pick(0.3, 0.05).to_string()]);
    let decoded = program_output(&mut decoding, "the Python decode benchmark")?;
    let mut python: HashMap<String, PythonDecode> = serde_json::from_str(&decoded).context("decode_bench.py")?;

    let rounds = args.rounds.unwrap_or(common.pick(2, 1));
    let round_time = common.duration(5.0, 0.4) / rounds as u32;
    let mut parts = vec![(Vec::new(), Vec::new()); variants.len()];
    for round in 1..=rounds {
        for (i, &(kind, name, ..)) in variants.iter().enumerate() {
            if round == 1 {
                let warmup = Stop::After(common.warmup(0.5, 0.1));
                closed_loop::run(workers(kind, &ByteCounters::new()).await?, warmup).await?;
            }
            let counters = ByteCounters::new();
            let (callers, connected) = (workers(kind, &counters).await?, counters.totals());
            let (run, cpu) = CpuWindow::around(server.pid, closed_loop::run(callers, Stop::After(round_time))).await?;
            let (done, m) = (counters.totals(), &mut measured[i]);
            m.load_bytes = (m.load_bytes.0 + done.0 - connected.0, m.load_bytes.1 + done.1 - connected.1);
            println!("{name} round {round}: {:.1} req/s, {} errors", run.rate(), run.errors());
            if let Some(error) = &run.first_error {
                println!("  first error: {error}");
            }
            parts[i].0.push(run);
            parts[i].1.push(cpu);
        }
    }
    server.stop().await?;
    for (m, (runs, cpus)) in measured.iter_mut().zip(parts) {
        m.load = (ClosedLoopRun::combine(&runs), CpuUse::combine(&cpus));
        m.python = python.remove(m.name);
    }
    judge(&mut report, common, (concurrency, texts.len(), dim), &measured);
    report.table("wire_bench.csv", &table(concurrency, &measured))?;
    report.finish()
}

/// `shape`: workers, texts per call, dimensions.
fn judge(report: &mut Report, common: &Common, shape: (usize, usize, usize), measured: &[Measured]) {
    let (concurrency, texts, dim) = shape;
    for m in measured {
        let (run, l, bytes) = (&m.load.0, m.load.0.latency(), m.per_call(m.load_bytes.0));
        let errors = if run.errors() > 0 { format!(", {} errors", run.errors()) } else { String::new() };
        let (p50, p95, p99) = (ms(l.p50), ms(l.p95), ms(l.p99));
        let text =
            format!("{:.1} req/s, p50/p95/p99 {p50:.1}/{p95:.1}/{p99:.1} ms, {bytes:.0} B/resp{errors}", run.rate());
        report.figure(Row::info(format!("{} c={concurrency}", m.name), run.rate(), "requests/s", text));
    }
    let find = |name| measured.iter().find(|m| m.name == name);
    if let (Some(grpc), Some(json)) = (find("grpc_float32"), find("http_json_float")) {
        let (g, j) = (grpc.load.0.rate(), json.load.0.rate());
        let (rps, figure) =
            (g / j.max(1e-9), format!("gRPC bytes / HTTP JSON floats req/s ({texts} texts, {BACKEND})"));
        report.figure(
            Row::info(figure, rps, "x", format!("{rps:.2} x"))
                .at_least(MIN_RPS_RATIO, format!(">= {MIN_RPS_RATIO:.1} x"))
                .with_note(format!("{g:.1} vs {j:.1} req/s")),
        );
        let (g, j) = (grpc.per_call(grpc.load_bytes.0), json.per_call(json.load_bytes.0));
        let (bytes, figure) = (g / j.max(1e-9), "gRPC bytes / HTTP JSON floats bytes per response");
        report.figure(
            Row::info(figure, bytes, "x", format!("{bytes:.3} x"))
                .at_most(MAX_BYTES_RATIO, format!("<= {MAX_BYTES_RATIO:.2} x"))
                .with_note(format!("{g:.0} vs {j:.0} B")),
        );
    }
    for m in measured {
        let python = m.python.as_ref().map_or("-".to_string(), |p| format!("{:.2} ms", p.median_ms));
        let (wire, encode, decode, cpu) = (m.wire.0, ms(m.encode), ms(m.decode), m.server_cpu_ms());
        let text = format!(
            "{wire} B wire, encode {encode:.3} ms, decode Rust {decode:.3} ms / Python {python}, server CPU {cpu:.2} ms/call"
        );
        report.figure(Row::info(format!("one call: {}", m.name), wire as f64, "bytes", text));
    }
    // In the files only: bench/report.py reads them.
    report.setup("quick", f64::from(u8::from(common.quick)), "bool");
    report.setup(&format!("backend {BACKEND}"), 0.0, "");
    report.setup("texts per call", texts as f64, "texts");
    report.setup("dim", dim as f64, "dimensions");
    report.setup("concurrency", concurrency as f64, "workers");
}

/// `wire_bench.csv`: one line per variant, every figure.
fn table(concurrency: usize, measured: &[Measured]) -> Table {
    let mut table = Table::new(COLUMNS);
    let fixed =
        |decimals: usize, values: &[f64]| values.iter().map(move |v| format!("{v:.decimals$}")).collect::<Vec<_>>();
    for m in measured {
        let (run, cpu, l, py) = (&m.load.0, &m.load.1, m.load.0.latency(), m.python.as_ref());
        let python = [
            py.map_or(String::new(), |p| format!("{:.4}", p.median_ms)),
            py.map_or(String::new(), |p| p.runs.to_string()),
            py.and_then(|p| p.max_abs_diff).map_or(String::new(), |d| format!("{d:.3e}")),
        ];
        let cells = [m.name.to_string(), m.description.to_string()]
            .into_iter()
            .chain([concurrency, run.ok(), run.errors()].map(|n| n.to_string()))
            .chain(fixed(3, &[run.elapsed.as_secs_f64(), run.rate(), ms(l.p50), ms(l.p95), ms(l.p99)]))
            .chain(fixed(1, &[m.per_call(m.load_bytes.0), m.per_call(m.load_bytes.1)]))
            .chain([m.body as u64, m.wire.0, m.wire.1].map(|n| n.to_string()))
            .chain(fixed(4, &[ms(m.encode), ms(m.decode)]))
            .chain(python)
            .chain(fixed(4, &[m.server_cpu_ms()]))
            .chain(fixed(3, &[ms(m.single.0.latency().p50), cpu.server_cores, cpu.bench_cores]));
        table.row(cells);
    }
    table
}
