//! embedwire-bench: every benchmark of embedwire, one subcommand per scenario. The
//! engine (options, processes, load, results) is the `embedwire_bench` library; a
//! scenario in `scenarios/` holds only its workload and its targets. See
//! bench/README.md.

use clap::Parser;

/// Registers the scenarios: `module => Variant,` per scenario, each module with a
/// clap `Args` and a `run(Args)`. Adding a scenario is its file and one line here.
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
            $(#[doc = concat!("The `", stringify!($module), "` scenario (see its --help).")]
            $variant(scenarios::$module::Args),)*
        }

        fn main() -> anyhow::Result<()> {
            match Scenario::parse() {
                $(Scenario::$variant(args) => {
                    args.common.validate()?;
                    scenarios::$module::run(args)
                })*
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
}
