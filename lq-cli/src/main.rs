//! The `lq` binary: see the `lq_cli` crate.

use clap::Parser;

/// litequeue's command line.
#[derive(Parser)]
#[command(
    name = "lq",
    version,
    about = "Operate litequeue's job queues in PostgreSQL"
)]
struct Cli {
    #[command(flatten)]
    args: lq_cli::LqArgs,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    lq_cli::run(Cli::parse().args).await
}
