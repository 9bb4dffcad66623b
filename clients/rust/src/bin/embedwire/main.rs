//! `embedwire`: the command line client of embedwire servers.
//!
//! # Layout
//! - `cli`: the flags and subcommands (clap), and their mapping to a `ClientConfig`.
//! - `commands`: one module per subcommand.
//! - `vectors_out`: JSON lines, `.npy` and raw float32 output of vectors.
//! - `table`: the text table of search hits.
//! - `exit`: the one-line error message and the exit code.
//!
//! Exit codes: 0 success, 1 other failure (a file, bad input), 2 usage, 3 a server
//! could not be reached or was overloaded (or is not serving, for `health`), 4 the
//! server refused the request.

mod cli;
mod commands;
mod exit;
mod table;
mod vectors_out;

use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return exit::report(anyhow::Error::new(error).context("starting the async runtime")),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => exit::report(error),
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Lazy: a server that is down is reported by the command's first call, with
    // the reason, instead of failing here.
    let client = cli.global.client_config()?.connect_lazy()?.collection(&cli.global.collection);
    let json = cli.global.json;
    match cli.command {
        Command::Embed(args) => commands::embed::run(&client, args, json).await?,
        Command::Ingest(args) => commands::ingest::run(&client, args, json).await?,
        Command::Search(args) => commands::search::run(&client, args, json).await?,
        Command::Rerank(args) => commands::rerank::run(&client, args, json).await?,
        Command::Job(args) => commands::job::run(&client, args, json).await?,
        Command::Collections(command) => commands::collections::run(&client, command, json).await?,
        Command::Info => commands::info::run(&client, json).await?,
        Command::Health => {
            if !commands::health::run(&client, json).await? {
                return Ok(ExitCode::from(exit::UNAVAILABLE));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
