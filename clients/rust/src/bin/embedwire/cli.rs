//! The command line: global flags (each with an env twin) and one subcommand per
//! server operation.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use embedwire_client::{ClientConfig, RetryPolicy};

/// embedwire: embed texts, ingest and search documents on embedwire servers.
#[derive(Debug, Parser)]
#[command(name = "embedwire", version)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Server address (host:port or http(s)://host:port); repeat the flag or separate
    /// with commas for several servers, which embed calls are spread over
    #[arg(
        long = "server",
        env = "EMBEDWIRE_SERVER",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub servers: Vec<String>,
    /// Machine-readable JSON output, for scripts
    #[arg(long, global = true)]
    pub json: bool,
    /// API key, sent as `authorization: Bearer KEY`
    #[arg(long, env = "EMBEDWIRE_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
    /// PEM file of the CA that signed the servers' certificates (implies https)
    #[arg(long, env = "EMBEDWIRE_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// Deadline of each call, in seconds (0: none)
    #[arg(long, env = "EMBEDWIRE_TIMEOUT", default_value_t = 30.0, global = true)]
    pub timeout: f64,
    /// The collection that ingest, search, job and stats act on (default: the
    /// server's default collection)
    #[arg(long, env = "EMBEDWIRE_COLLECTION", default_value = "", hide_default_value = true, global = true)]
    pub collection: String,
    /// Retries of a call after UNAVAILABLE or RESOURCE_EXHAUSTED (an overload
    /// refusal is retried after the wait the server hints, jittered)
    #[arg(long, env = "EMBEDWIRE_RETRIES", default_value_t = RetryPolicy::default().max_retries, global = true)]
    pub retries: u32,
}

impl Global {
    /// The library's configuration for these flags.
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        anyhow::ensure!(
            self.timeout.is_finite() && self.timeout >= 0.0,
            "--timeout must be a number of seconds, not {}",
            self.timeout
        );
        let mut config = ClientConfig::new(self.servers.iter().map(|s| s.trim()).filter(|s| !s.is_empty()))
            .with_timeout((self.timeout > 0.0).then(|| Duration::from_secs_f64(self.timeout)))
            .with_retry(RetryPolicy { max_retries: self.retries, ..RetryPolicy::default() });
        if let Some(key) = &self.api_key {
            config = config.with_api_key(key);
        }
        if let Some(path) = &self.ca_file {
            config = config.with_ca_file(path);
        }
        Ok(config)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Embed texts (arguments, --file, or stdin, one per line); JSON lines on stdout
    /// unless --npy or --raw
    Embed(EmbedArgs),
    /// Store the documents of a JSONL file ({"id": ..., "text": ..., "metadata": {...}} per line)
    Ingest(IngestArgs),
    /// Search the stored documents
    Search(SearchArgs),
    /// Order texts (a file or stdin, one per line) by relevance to a query
    Rerank(RerankArgs),
    /// Show (or follow) an ingestion job
    Job(JobArgs),
    /// List, create or delete collections (creating and deleting need an admin key)
    #[command(subcommand)]
    Collections(CollectionsCommand),
    /// Show the served model and the server's limits
    Info,
    /// Check whether each server is serving
    Health,
}

#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Texts to embed; without any, texts are read from --file or stdin
    pub texts: Vec<String>,
    /// Read texts from this file, one per line
    #[arg(long, conflicts_with = "texts")]
    pub file: Option<PathBuf>,
    /// Write the vectors as a NumPy .npy file (float32, count x dim)
    #[arg(long, value_name = "FILE", conflicts_with = "raw")]
    pub npy: Option<PathBuf>,
    /// Write the vectors as raw little-endian float32, row-major
    #[arg(long, value_name = "FILE")]
    pub raw: Option<PathBuf>,
    /// Do not scale vectors to unit length
    #[arg(long)]
    pub no_normalize: bool,
    /// Keep only the first N dimensions
    #[arg(long, value_name = "N")]
    pub dimensions: Option<u32>,
    /// Encoding on the wire (vectors are written as float32 whatever it is)
    #[arg(long, value_enum, default_value_t = DtypeArg::Float32)]
    pub dtype: DtypeArg,
    /// Texts per Embed call
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Embed calls in flight at once
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DtypeArg {
    Float32,
    Float16,
    Int8,
}

#[derive(Debug, Subcommand)]
pub enum CollectionsCommand {
    /// The collections the key reaches
    List,
    /// Create an empty collection; settings left out take the server's
    Create(CreateCollectionArgs),
    /// Delete a collection with its documents, jobs and vectors
    Delete {
        /// Its name
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct CreateCollectionArgs {
    /// 1 to 48 lower-case letters, digits and underscores, starting with a letter
    pub name: String,
    /// Longest chunk, in model tokens
    #[arg(long)]
    pub chunk_tokens: Option<u32>,
    /// Tokens each chunk repeats from the one before
    #[arg(long)]
    pub chunk_overlap_tokens: Option<u32>,
    /// The vector index
    #[arg(long, value_enum)]
    pub index: Option<IndexArg>,
    /// Whether keyword and hybrid search are possible
    #[arg(long)]
    pub keyword_index: Option<bool>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IndexArg {
    Exact,
    Hnsw,
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// JSONL file of documents
    pub file: PathBuf,
    /// Wait until the job has indexed every document
    #[arg(long)]
    pub wait: bool,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The query text
    pub query: String,
    /// Number of hits
    #[arg(long, short = 'k', default_value_t = 5)]
    pub top_k: u32,
    /// Only documents whose metadata KEY equals VALUE (repeatable; all must hold)
    #[arg(long = "filter", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub filters: Vec<(String, String)>,
    /// Drop hits scoring below this
    #[arg(long)]
    pub threshold: Option<f32>,
    /// Rerank with the server's cross-encoder (true/false; default: the server's choice)
    #[arg(long)]
    pub rerank: Option<bool>,
    /// How chunks are found: by meaning (vector), by words (keyword: BM25) or both (hybrid)
    #[arg(long, value_enum, default_value_t = ModeArg::Vector)]
    pub mode: ModeArg,
    /// Weight of the vector side in hybrid mode, 0 to 1 (default: the server's, 0.5)
    #[arg(long)]
    pub alpha: Option<f32>,
    /// How hybrid mode merges its rankings (default: the server's, relative-score)
    #[arg(long, value_enum)]
    pub fusion: Option<FusionArg>,
    /// Rank documents instead of chunks: --top-k counts documents
    #[arg(long, value_enum)]
    pub group_by: Option<GroupByArg>,
    /// Chunks shown per document with --group-by document, 1 to 100
    #[arg(long, requires = "group_by")]
    pub group_size: Option<u32>,
    /// Mark the words that match the query's, [like this]
    #[arg(long)]
    pub highlight: bool,
}

/// `--group-by` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupByArg {
    /// One entry per document, by its best chunk
    Document,
}

/// `--mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Vector,
    Keyword,
    Hybrid,
}

/// `--fusion` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FusionArg {
    /// Reciprocal rank fusion
    Rrf,
    /// Scores scaled to [0, 1], weighted, added
    RelativeScore,
}

#[derive(Debug, Args)]
pub struct RerankArgs {
    /// The query the texts are judged against
    #[arg(long, short = 'q')]
    pub query: String,
    /// File of candidate texts, one per line; `-` reads stdin
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,
    /// Show only the N best
    #[arg(long, value_name = "N")]
    pub top_n: Option<u32>,
    /// A cross-encoder's logits instead of probabilities
    #[arg(long)]
    pub raw_scores: bool,
    /// Refuse a text too long for the model instead of cutting it
    #[arg(long)]
    pub no_truncate: bool,
    /// Cut over-long texts at their start instead of their end
    #[arg(long)]
    pub truncate_left: bool,
}

#[derive(Debug, Args)]
pub struct JobArgs {
    /// The job id Ingest returned
    pub id: String,
    /// Follow the job until it finishes
    #[arg(long)]
    pub wait: bool,
}

fn parse_key_value(value: &str) -> Result<(String, String), String> {
    let (key, value) = value.split_once('=').ok_or_else(|| format!("`{value}` is not KEY=VALUE"))?;
    Ok((key.to_string(), value.to_string()))
}
