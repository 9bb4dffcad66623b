//! tokenize: the `Tokenize` rpc (the server's tokenizer, no model): what a call costs
//! without inference, next to an `Embed` of the same sentence, so a slow Embed can be told
//! apart from a slow server. The harness's example of a scenario: workload, targets.

use embedwire_bench::{
    closed_loop::{self, Caller},
    latency::ms,
    load::Stop,
    options::Common,
    report::{Report, Row, Table},
    sentences::sentence,
    server_process::ServerProcess,
};
use embedwire_proto::v1::{EmbedRequest, TokenizeRequest, embed_service_client::EmbedServiceClient};
use tonic::transport::Channel;

/// Tokenize calls/s at concurrency 1 at least this many times Embed's.
const MIN_TOKENIZE_OVER_EMBED: f64 = 5.0;

/// Options of the tokenize scenario: the common ones alone.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// One client calling Tokenize (or Embed, for the comparison) with the next sentence.
struct SentenceCaller {
    client: EmbedServiceClient<Channel>,
    embed: bool,
}

impl Caller for SentenceCaller {
    async fn call(&mut self, n: usize) -> anyhow::Result<()> {
        let inputs = vec![sentence(n)];
        if self.embed {
            self.client.embed(EmbedRequest { inputs, ..Default::default() }).await?;
        } else {
            self.client.tokenize(TokenizeRequest { inputs, truncate: None }).await?;
        }
        Ok(())
    }
}

#[tokio::main]
pub async fn run(common: &Common, _: Args) -> anyhow::Result<()> {
    let mut report = Report::new(common.results("tokenize"), "tokenize")?;
    let command = common.server_command(common.server_binary()?, vec![("--backend", "onnx".into())]);
    let (duration, warmup) = (common.duration(5.0, 1.0), common.warmup(1.0, 0.2));
    let (server, _) = ServerProcess::start(&command).await?;
    let (mut table, mut rates) = (Table::new("rpc,concurrency,calls_per_s,p50_ms,p99_ms,calls"), Vec::new());
    let levels = common.sweep(&[1, 4, 16], &[1, 4]);
    for (rpc, concurrency) in std::iter::once(("embed", 1)).chain(levels.iter().map(|&c| ("tokenize", c))) {
        let channel = server.connect().await?;
        let callers = || {
            let caller = |_| SentenceCaller { client: EmbedServiceClient::new(channel.clone()), embed: rpc == "embed" };
            (0..concurrency).map(caller).collect()
        };
        closed_loop::run(callers(), Stop::After(warmup)).await?;
        let run = closed_loop::run(callers(), Stop::After(duration)).await?;
        anyhow::ensure!(run.errors() == 0, "{rpc} c={concurrency}: {:?}", run.first_error);
        let (rate, p50, p99) = (run.rate(), ms(run.latency().p50), ms(run.latency().p99));
        let measured = format!("{rate:.0} calls/s, p50 {p50:.2} ms");
        println!("{rpc} c={concurrency}: {measured}");
        table.row(format!("{rpc},{concurrency},{rate:.1},{p50:.3},{p99:.3},{}", run.ok()).split(','));
        report.figure(Row::info(format!("{rpc} c={concurrency}"), rate, "calls/s", measured));
        rates.push((rpc, concurrency, rate));
    }
    server.stop().await?;
    let rate_at_one = |name| rates.iter().find(|&&(rpc, c, _)| rpc == name && c == 1).map_or(0.0, |&(.., rate)| rate);
    let ratio = rate_at_one("tokenize") / rate_at_one("embed").max(1e-9);
    let row = Row::info("Tokenize vs Embed calls/s, c=1", ratio, "x", format!("{ratio:.1} x"));
    report.figure(row.at_least(MIN_TOKENIZE_OVER_EMBED, format!(">= {MIN_TOKENIZE_OVER_EMBED} x")));
    report.table("tokenize.csv", &table)?;
    report.finish()
}
