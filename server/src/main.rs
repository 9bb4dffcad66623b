//! The `embedwire-server` binary: parses flags, sets up logging, binds, serves until
//! SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use embedwire_server::{EmbedServer, ServerConfig};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    // Before any thread starts: glibc sizes its arenas as threads first allocate.
    limit_malloc_arenas();
    keep_freed_buffers();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?.block_on(run())
}

/// Malloc arenas glibc may create, unless MALLOC_ARENA_MAX says otherwise.
const MALLOC_ARENAS: i32 = 2;

/// glibc gives threads their own malloc arenas, up to 8 per core, and memory freed
/// in one is rarely returned or reused by another; the model thread, ONNX
/// Runtime's threads, the runtime's workers and the blocking pool all allocate. Two
/// arenas held 21 MiB less after a 3000-document ingest and search, at the same
/// speeds (allocation is not where the time goes).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes allocator settings; no thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        }
    }
}

/// Allocations up to this size come from the arenas, not from their own mmap.
const MALLOC_MMAP_THRESHOLD: i32 = 8 << 20;
/// Free memory an arena keeps at its top before giving pages back to the kernel.
const MALLOC_TRIM_THRESHOLD: i32 = 16 << 20;

/// Every FLOAT32 answer passes through buffers of its size (the vectors, tonic's
/// encode buffer: 393 KB each for 256 x 384). glibc's self-tuning thresholds settle
/// just above one such buffer, so when two are freed together the arena hands the
/// pages back (madvise) and the next call faults them in again: 12 % of the
/// server's CPU on gRPC FLOAT32 calls, ~45 page faults per call. Fixed thresholds
/// keep up to 2 x 16 MiB of freed memory per process for reuse.
fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator settings; no thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD);
    }
}

async fn run() -> anyhow::Result<()> {
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
