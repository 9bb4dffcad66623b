//! The `embedwire-server` binary: parses flags, sets up logging, binds, serves until
//! SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use embedwire_server::{EmbedServer, ServerConfig};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,ort=warn")))
        .with_writer(std::io::stderr)
        .init();
    let config = ServerConfig::parse();
    let listen = config.listen;
    let server = EmbedServer::new(config)?;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
    let address = listener.local_addr()?;
    tracing::info!("listening on {address}");
    server.serve(listener, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
