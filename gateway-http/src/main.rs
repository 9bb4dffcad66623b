//! `embedwire-gateway`: the HTTP/JSON layer as its own process, forwarding over gRPC
//! to one or more embedwire-server processes (see `GrpcUpstream` for how calls are
//! spread and failed over: servers with embedded stores each have their own index,
//! so a failover answers from another index, which every answer's
//! `x-embedwire-index` header and `/healthz` make visible; servers sharing one store
//! are balanced).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use clap::Parser;
use embedwire_gateway_http::access::{AccessLayer, AccessPolicy, ApiKeys};
use embedwire_gateway_http::{GatewaySettings, GrpcUpstream, GrpcUpstreamSettings, router};

/// Settings of the standalone gateway; every flag has an env twin.
#[derive(Debug, Parser)]
#[command(name = "embedwire-gateway", version, about = "HTTP/JSON gateway in front of embedwire-server processes")]
struct GatewayConfig {
    /// Address to listen on for HTTP.
    #[arg(long, env = "EMBEDWIRE_GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Upstream embedwire-server addresses, comma-separated, in failover order
    /// (`http://` is added when missing).
    #[arg(long, env = "EMBEDWIRE_UPSTREAMS", value_delimiter = ',', default_value = "http://127.0.0.1:50051")]
    upstream: Vec<String>,
    /// Seconds to wait for a connection to an upstream.
    #[arg(long, env = "EMBEDWIRE_GATEWAY_CONNECT_TIMEOUT", default_value_t = 1.0)]
    connect_timeout: f64,
    /// Seconds an unreachable upstream is skipped before it is tried again.
    #[arg(long, env = "EMBEDWIRE_GATEWAY_COOL_DOWN", default_value_t = 2.0)]
    cool_down: f64,
    /// Seconds between probes of every upstream's health, store (from its Info) and
    /// document count; routing learns whether the upstreams share an index from them.
    #[arg(long, env = "EMBEDWIRE_GATEWAY_PROBE_INTERVAL", default_value_t = 5.0)]
    probe_interval: f64,
    /// Deadline in seconds of each upstream call.
    #[arg(long, env = "EMBEDWIRE_GATEWAY_REQUEST_TIMEOUT", default_value_t = 60.0)]
    request_timeout: f64,
    /// Largest HTTP request body, in bytes (larger ones get 413).
    #[arg(long, env = "EMBEDWIRE_GATEWAY_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Largest gRPC message to or from an upstream, in bytes.
    #[arg(long, env = "EMBEDWIRE_GATEWAY_MAX_MESSAGE_BYTES", default_value_t = 64 * 1024 * 1024)]
    max_message_bytes: usize,
    /// API keys with full access, comma-separated; with any key configured, every route
    /// but /healthz, /readyz (and /metrics unless --metrics-require-key) needs one.
    #[arg(long, env = "EMBEDWIRE_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    api_keys: Vec<String>,
    /// API keys that can embed and search but not ingest, comma-separated.
    #[arg(long, env = "EMBEDWIRE_READ_ONLY_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    read_only_api_keys: Vec<String>,
    /// A file of API keys, one per line: `KEY` or `KEY read-only`.
    #[arg(long, env = "EMBEDWIRE_API_KEYS_FILE")]
    api_keys_file: Option<std::path::PathBuf>,
    /// Require an API key for /metrics too.
    #[arg(long, env = "EMBEDWIRE_METRICS_REQUIRE_KEY")]
    metrics_require_key: bool,
    /// The key the gateway presents to its upstreams (`authorization: Bearer KEY`).
    #[arg(long, env = "EMBEDWIRE_UPSTREAM_API_KEY", hide_env_values = true)]
    upstream_api_key: Option<String>,
}

impl GatewayConfig {
    fn validate(&self) -> anyhow::Result<()> {
        for (name, seconds) in [
            ("connect-timeout", self.connect_timeout),
            ("cool-down", self.cool_down),
            ("probe-interval", self.probe_interval),
            ("request-timeout", self.request_timeout),
        ] {
            anyhow::ensure!(seconds.is_finite() && seconds > 0.0, "--{name} must be a positive number of seconds");
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let config = GatewayConfig::parse();
    config.validate()?;
    let addresses =
        config.upstream.iter().map(|a| if a.contains("://") { a.clone() } else { format!("http://{a}") }).collect();
    let upstream = GrpcUpstream::new(GrpcUpstreamSettings {
        addresses,
        connect_timeout: Duration::from_secs_f64(config.connect_timeout),
        cool_down: Duration::from_secs_f64(config.cool_down),
        request_timeout: Duration::from_secs_f64(config.request_timeout),
        max_message_bytes: config.max_message_bytes,
        api_key: config.upstream_api_key.clone(),
        probe_interval: Duration::from_secs_f64(config.probe_interval),
    })
    .map_err(anyhow::Error::msg)?;
    let upstream = Arc::new(upstream);
    let _probes = upstream.spawn_probes();
    let keys = ApiKeys::load(&config.api_keys, &config.read_only_api_keys, config.api_keys_file.as_deref())
        .map_err(anyhow::Error::msg)?;
    let access = AccessPolicy { keys, metrics_open: !config.metrics_require_key, rate_limit: None };
    let app = router(upstream, GatewaySettings { max_body_bytes: config.max_body_bytes, ..GatewaySettings::default() })
        .layer(AccessLayer::new(access));
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = listener.local_addr()?;
    tracing::info!(upstreams = ?config.upstream, "listening on {address}");
    // Small JSON answers would otherwise wait for the peer's delayed ACK (Nagle).
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
    Ok(())
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    tracing::info!("shutting down");
}
