//! embedwire-bench: every benchmark of embedwire, one subcommand per scenario. The engine (options, processes, load,
//! results) is the `embedwire_bench` library; a scenario in `scenarios/` has only its workload and targets. See
//! bench/README.md.

use clap::Parser;
use embedwire_bench::options::Common;

// A scenario's command line: the options of every scenario, then its own `Args`, whose
// doc comment is the subcommand's description (a doc comment here would replace it).
#[derive(Debug, clap::Args)]
struct Cli<A: clap::Args> {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    args: A,
}

/// Registers the scenarios: `module => Variant,` per scenario, each module with a
/// clap `Args` and a `run(&Common, Args)`. Adding a scenario is its file and one line here.
macro_rules! scenarios {
    ($($module:ident => $variant:ident,)*) => {
        mod scenarios {
            $(pub mod $module;)*
        }

        /// embedwire-bench: measures embedwire and prints each figure against its
        /// target; results go to CSV, JSON and markdown under bench/results.
        #[derive(Debug, Parser)]
        #[command(name = "embedwire-bench", version, about)]
        enum Scenario {
            $($variant(Cli<scenarios::$module::Args>),)*
        }

        fn main() -> anyhow::Result<()> {
            match Scenario::parse() {
                $(Scenario::$variant(Cli { common, args }) => scenarios::$module::run(&common, args),)*
            }
        }
    };
}

scenarios! {
    embed => Embed,
    tokenize => Tokenize,
    gateway => Gateway,
    search => Search,
    rerank => Rerank,
    store => Store,
    wire => Wire,
    ghz => Ghz,
    index => Index,
    overload => Overload,
    soak => Soak,
    clients => Clients,
    chaos => Chaos,
    retrieval => Retrieval,
    collections => Collections,
    latency => Latency,
    precision => Precision,
}
