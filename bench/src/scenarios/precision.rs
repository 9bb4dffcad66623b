//! precision: the int8 graph against the fp32 one, both served at default flags (`--precision int8` against
//! `--precision fp32`): throughput with 32 one-sentence clients and server CPU per sentence, in alternating rounds so
//! the machine's drift hits both alike, and the quality int8 costs, measured through the servers' own answers: each
//! server embeds the evaluation sentences of the int8 gate (scripts/model/quality_sentences.txt: 2000 sentences and
//! 400 short queries), then cosine of each int8 vector to its fp32 one, and how many of each query's top-10 sentences
//! by fp32 int8 finds too.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use embedwire_bench::{
    cpu::{CpuUse, CpuWindow},
    load::{self, LoadResult, Rpc, Stop},
    options::{Common, connections},
    report::{Report, Row, Table},
    sentences,
    server_process::ServerProcess,
};
use embedwire_proto::v1::{EmbedRequest, embed_service_client::EmbedServiceClient};
use embedwire_server::model::precision::CpuInt8;
use tonic::transport::Channel;

/// int8 throughput at least this factor of fp32's, on a CPU with int8 dot products (issue 28).
const MIN_SPEEDUP_VNNI: f64 = 1.6;
/// Quality floors of the int8 gate (scripts/model/INT8.md).
const MIN_COSINE_MEAN: f64 = 0.99;
const MIN_COSINE_MIN: f64 = 0.97;
const MIN_TOP10_AGREEMENT: f64 = 0.90;
const CLIENTS: usize = 32;
const CLIENTS_PER_CONNECTION: usize = 4;
/// Texts per Embed call when embedding the quality sentences.
const QUALITY_BATCH: usize = 32;
const TOP: usize = 10;

/// Options of the precision scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Alternating throughput rounds per precision [--quick: 1].
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The quality sentences: lines of text, the last `--queries` of them the queries.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/model/quality_sentences.txt"))]
    pub sentences: PathBuf,
    /// Queries at the end of the sentence file.
    #[arg(long, default_value_t = 400)]
    pub queries: usize,
}

/// One precision's server and what it measured.
struct Side {
    name: &'static str,
    server: ServerProcess,
    channels: Vec<Channel>,
    runs: Vec<(LoadResult, CpuUse)>,
}

pub fn run(common: &Common, args: Args) -> anyhow::Result<()> {
    let mut report = Report::new(common.results("precision"), "precision_bench")?;
    let binary = common.server_binary()?;
    let lines: Vec<String> = std::fs::read_to_string(&args.sentences)
        .with_context(|| format!("reading {}", args.sentences.display()))?
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(String::from)
        .collect();
    anyhow::ensure!(lines.len() > args.queries + TOP, "{} has too few lines", args.sentences.display());
    let (corpus, queries) = lines.split_at(lines.len() - args.queries);
    let (corpus, queries) = common.pick((corpus, queries), (&corpus[..300], &queries[..60]));
    let texts: Arc<[String]> = sentences::sentences(512).into();
    let rounds = common.pick(args.rounds, 1);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let mut sides = Vec::new();
        for name in ["fp32", "int8"] {
            let command = common.server_command(binary.clone(), vec![("--precision", name.into())]);
            let server = ServerProcess::start(&command).await?.0;
            let channels = connections(&server, CLIENTS.div_ceil(CLIENTS_PER_CONNECTION)).await?;
            sides.push(Side { name, server, channels, runs: Vec::new() });
        }
        println!("precision: quality on {} sentences and {} queries", corpus.len(), queries.len());
        let mut vectors = Vec::new();
        for side in &sides {
            vectors.push((embed_all(&side.channels[0], corpus).await?, embed_all(&side.channels[0], queries).await?));
        }
        let quality = Quality::measure(&vectors[0], &vectors[1]);
        let (time, warmup) = (common.duration(8.0, 1.0), common.warmup(2.0, 0.3));
        for round in 1..=rounds {
            for side in &mut sides {
                load::run(&side.channels, CLIENTS, texts.clone(), Rpc::Embed, Stop::After(warmup)).await?;
                let run = load::run(&side.channels, CLIENTS, texts.clone(), Rpc::Embed, Stop::After(time));
                let (run, cpu) = CpuWindow::around(side.server.pid, run).await?;
                println!("  round {round} {}: {:.0} sentences/s, server {:.2} cores", side.name, run.rate(), cpu.server_cores);
                side.runs.push((run, cpu));
            }
        }
        judge(&mut report, &sides, &quality);
        report.table("precision_bench.csv", &table(&sides, &quality))?;
        for side in sides {
            side.server.stop().await?;
        }
        anyhow::Ok(())
    })?;
    report.finish()
}

/// Unit vectors of `texts` from one server, in order.
async fn embed_all(channel: &Channel, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut client = EmbedServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20);
    let mut vectors = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(QUALITY_BATCH) {
        let request = EmbedRequest { inputs: chunk.to_vec(), ..Default::default() };
        let answer = client.embed(request).await.context("Embed")?.into_inner();
        let values: Vec<f32> =
            answer.embeddings.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        anyhow::ensure!(values.len().is_multiple_of(chunk.len()), "Embed answered {} values for {} texts", values.len(), chunk.len());
        vectors.extend(values.chunks_exact(values.len() / chunk.len()).map(<[f32]>::to_vec));
    }
    Ok(vectors)
}

/// int8's vectors against fp32's.
struct Quality {
    cosine_mean: f64,
    cosine_min: f64,
    /// Share of each query's fp32 top-10 sentences that int8's top-10 holds too, averaged.
    top10_agreement: f64,
}

type Vectors = (Vec<Vec<f32>>, Vec<Vec<f32>>);

impl Quality {
    fn measure((fp32_corpus, fp32_queries): &Vectors, (int8_corpus, int8_queries): &Vectors) -> Quality {
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>();
        let cosines: Vec<f64> = fp32_corpus
            .iter()
            .chain(fp32_queries)
            .zip(int8_corpus.iter().chain(int8_queries))
            .map(|(a, b)| dot(a, b) / (dot(a, a) * dot(b, b)).sqrt())
            .collect();
        let top = |query: &[f32], corpus: &[Vec<f32>]| {
            let mut scored: Vec<(f64, usize)> = corpus.iter().enumerate().map(|(i, v)| (dot(query, v), i)).collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            scored.into_iter().take(TOP).map(|(_, i)| i).collect::<Vec<_>>()
        };
        let agreements: Vec<f64> = fp32_queries
            .iter()
            .zip(int8_queries)
            .map(|(a, b)| {
                let (expected, found) = (top(a, fp32_corpus), top(b, int8_corpus));
                expected.iter().filter(|i| found.contains(i)).count() as f64 / TOP as f64
            })
            .collect();
        Quality {
            cosine_mean: cosines.iter().sum::<f64>() / cosines.len() as f64,
            cosine_min: cosines.iter().copied().fold(f64::INFINITY, f64::min),
            top10_agreement: agreements.iter().sum::<f64>() / agreements.len() as f64,
        }
    }
}

/// A side's rounds as one: sentences/s, server cores, server CPU ms per sentence.
fn pooled(side: &Side) -> (f64, f64, f64) {
    let runs: Vec<LoadResult> = side.runs.iter().map(|(run, _)| run.clone()).collect();
    let cpus: Vec<CpuUse> = side.runs.iter().map(|(_, cpu)| cpu.clone()).collect();
    let (run, cpu) = (LoadResult::combine(&runs), CpuUse::combine(&cpus));
    let rate = run.rate();
    (rate, cpu.server_cores, cpu.server_cores / rate * 1e3)
}

fn judge(report: &mut Report, sides: &[Side], quality: &Quality) {
    let [(fp32, fp32_cores, fp32_cpu), (int8, int8_cores, int8_cpu)] = [pooled(&sides[0]), pooled(&sides[1])];
    for (name, rate, cores) in [("fp32", fp32, fp32_cores), ("int8", int8, int8_cores)] {
        let figure = format!("{name} throughput ({CLIENTS} clients)");
        report.figure(Row::info(figure, rate, "sentences/s", format!("{rate:.0} s/s, server {cores:.2} cores")));
    }
    let speedup = int8 / fp32;
    let vnni = CpuInt8::detect().instructions();
    let row = Row::info(
        format!("int8 / fp32 throughput, {}", vnni.as_deref().unwrap_or("no VNNI")),
        speedup,
        "x",
        format!("{speedup:.2} x"),
    );
    report.figure(match vnni {
        Some(_) => row.at_least(MIN_SPEEDUP_VNNI, format!(">= {MIN_SPEEDUP_VNNI} x on a VNNI CPU")),
        None => row.with_note("no int8 dot-product instructions on this CPU: the 1.6 x target does not apply"),
    });
    let cpu_ratio = fp32_cpu / int8_cpu;
    report.figure(Row::info("fp32 / int8 server CPU per sentence", cpu_ratio, "x", format!("{cpu_ratio:.2} x")));
    let rows = [
        ("int8 cosine to fp32, mean", quality.cosine_mean, MIN_COSINE_MEAN),
        ("int8 cosine to fp32, min", quality.cosine_min, MIN_COSINE_MIN),
        ("int8 top-10 agreement with fp32", quality.top10_agreement, MIN_TOP10_AGREEMENT),
    ];
    for (figure, value, floor) in rows {
        report.figure(Row::info(figure, value, "", format!("{value:.4}")).at_least(floor, format!(">= {floor}")));
    }
}

fn table(sides: &[Side], quality: &Quality) -> Table {
    let mut table = Table::new("precision,round,sentences_per_s,p50_ms,p99_ms,server_cores");
    for side in sides {
        for (round, (run, cpu)) in side.runs.iter().enumerate() {
            let latency = run.latency;
            table.row([
                side.name.to_string(),
                (round + 1).to_string(),
                format!("{:.1}", run.rate()),
                format!("{:.2}", latency.p50.as_secs_f64() * 1e3),
                format!("{:.2}", latency.p99.as_secs_f64() * 1e3),
                format!("{:.2}", cpu.server_cores),
            ]);
        }
    }
    let quality_rows = [
        ("cosine_mean", quality.cosine_mean),
        ("cosine_min", quality.cosine_min),
        ("top10_agreement", quality.top10_agreement),
    ];
    for (name, value) in quality_rows {
        table.row(["quality".to_string(), name.into(), format!("{value:.4}"), String::new(), String::new(), String::new()]);
    }
    table
}
