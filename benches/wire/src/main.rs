//! `baiji-wire`: the peers' side of baiji's wire benchmark.
//!
//! * `baiji-wire bench --driver redis|nats --namesrv HOST:PORT ...` runs `baiji::bench` (the
//!   same runner, checker and JSON as `baiji bench`) against Redis Streams or NATS JetStream.
//! * `baiji-wire report --results DIR` turns the JSON files of a side-by-side run into
//!   `REPORT.md` with medians, ratios and SVG plots.

mod nats_driver;
mod redis_driver;
mod report;

use std::process::ExitCode;

use baiji::bench::{run, BenchArgs, BenchError};
use clap::{Parser, Subcommand};

/// Peers for baiji's wire benchmark, and its report.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a workload against Redis Streams (`--driver redis`, `--namesrv` = the Redis
    /// address) or NATS JetStream (`--driver nats`, `--namesrv` = the NATS address); every
    /// other option is `baiji bench`'s.
    Bench(Box<BenchArgs>),
    /// Writes REPORT.md and SVG plots from a directory of result JSON files.
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("baiji-wire: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Bench(args) => rt.block_on(async {
            let report = match args.driver.as_str() {
                "redis" => run(&args, redis_driver::RedisDriver::new(&args.namesrv)).await?,
                "nats" => run(&args, nats_driver::NatsDriver::new(&args.namesrv)).await?,
                "raw" => run(&args, baiji::bench::raw::RawDriver::new(&args.namesrv)).await?,
                other => {
                    return Err(BenchError::Args(format!(
                        "unknown driver `{other}`: redis, nats or raw"
                    )))
                }
            };
            println!("{}", report.table());
            Ok(())
        }),
        Command::Report(args) => report::write(&args).map_err(BenchError::Args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baiji-wire: {e}");
            ExitCode::FAILURE
        }
    }
}
