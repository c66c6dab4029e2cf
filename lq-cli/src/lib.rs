//! `lq`, litequeue's command line: what an operator needs without writing SQL.
//!
//! Every command is a thin layer over [`lq_runtime::control`], the same calls
//! the dashboard and an application's own tools use. Run it as the `lq`
//! binary, or mount it in an application's own command line, as below. Either
//! way `lq` reads the cluster from the database: `doctor`'s check for queued
//! jobs nobody runs judges by the job kinds the live runtimes declared
//! (`lq.runtimes`), not by the types linked into the program running `lq`.
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! enum MyApp {
//!     /// Serve the web application.
//!     Serve,
//!     /// Inspect and operate the job queue.
//!     Lq(lq_cli::LqArgs),
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     match MyApp::parse() {
//!         MyApp::Serve => std::process::ExitCode::SUCCESS,
//!         MyApp::Lq(args) => lq_cli::run(args).await,
//!     }
//! }
//! ```
//!
//! Exit codes: 0 when all went well; 1 when the command worked but found
//! something (a failing `doctor` check, a refused job in a bulk action); 2 for
//! an error (bad arguments, no database, a failed call) or a job id that names
//! no job (`jobs show`, and `jobs retry|cancel|delete|run-now`, which still act on the
//! ids that exist).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use sqlx::{Connection, PgPool};

/// `println!` to stdout through [`output::write_stdout`]: after a closed pipe
/// the output is dropped instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` to stdout through [`output::write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

mod commands;
mod filter_args;
mod output;
mod prompt;

pub use output::Format;

/// The `lq` command line: connection options, output format and a command.
/// Flatten it into an application's own clap parser to mount `lq` there:
///
/// ```no_run
/// use clap::Parser;
///
/// /// The application's own `admin` binary, with `lq` inside.
/// #[derive(Parser)]
/// struct Admin {
///     #[command(flatten)]
///     lq: lq_cli::LqArgs,
/// }
///
/// #[tokio::main]
/// async fn main() -> std::process::ExitCode {
///     lq_cli::run(Admin::parse().lq).await
/// }
/// ```
#[derive(Debug, Args)]
pub struct LqArgs {
    /// PostgreSQL URL of the database that holds the `lq` schema.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Output: `table` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,
    /// Bound on each database call a command (or a `serve` page) makes; a
    /// count over a large history may need minutes. The server cancels a
    /// statement at nine tenths of it.
    #[arg(long, value_parser = filter_args::parse_timeout, default_value = "30s", global = true)]
    pub timeout: std::time::Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands of `lq`. A `Command` comes from parsing ([`LqArgs`]): the
/// arguments each variant carries are the command line's flags, whose spelling
/// is the stable interface, so their types are not named outside this crate.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Create or upgrade the `lq` schema.
    Migrate(commands::migrate::MigrateArgs),
    /// Check what makes queues slow down or jobs stop; exit 1 on any finding.
    Doctor,
    /// Per queue: ready, scheduled and running jobs, the oldest wait, the last
    /// hour's successes and deaths (from the per-minute rollup), and pauses.
    Status(commands::status::StatusArgs),
    /// List, count, show, retry, cancel, delete or run now jobs.
    #[command(subcommand)]
    Jobs(commands::jobs::JobsCommand),
    /// List, pause or resume queues.
    #[command(subcommand)]
    Queues(commands::queues::QueuesCommand),
    /// The runtimes of the cluster and the leader.
    Runtimes,
    /// Cron schedules and their next fire times; run one now.
    #[command(subcommand)]
    Cron(commands::cron::CronCommand),
    /// Delete finished jobs older than their retention now.
    Prune(commands::prune::PruneArgs),
    /// Serve the web dashboard (read-only unless --allow-actions).
    Serve(commands::serve::ServeArgs),
}

/// Connects and runs `args`, printing to stdout (results) and stderr (errors);
/// returns the exit code. [`LqArgs`] and the crate's example show it mounted in
/// an application.
pub async fn run(args: LqArgs) -> ExitCode {
    let Some(url) = args.database_url.as_deref() else {
        eprintln!("lq: no database: pass --database-url or set DATABASE_URL");
        return ExitCode::from(2);
    };
    // Arguments that are wrong whatever the database holds are refused first.
    if let Err(e) = args.command.check() {
        eprintln!("lq: {}", output::printable(&e));
        return ExitCode::from(2);
    }
    // One connection of its own first: a pool retries a connection that fails
    // (refused, no such host, a TLS or login error) until its own timeout, and
    // then reports only that it timed out, losing the reason.
    match tokio::time::timeout(CONNECT_TIMEOUT, sqlx::PgConnection::connect(url)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
        Ok(Err(e)) => {
            eprintln!(
                "lq: cannot connect to the database: {}",
                output::printable(&lq_runtime::chain(&e))
            );
            return ExitCode::from(2);
        }
        Err(_) => {
            eprintln!(
                "lq: cannot connect to the database: no answer within {} s",
                CONNECT_TIMEOUT.as_secs()
            );
            return ExitCode::from(2);
        }
    }
    // A command runs one statement at a time; the dashboard serves many pages.
    let connections = match &args.command {
        Command::Serve(a) => a.db_connections,
        _ => 2,
    };
    let pool = match sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect(url)
        .await
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("lq: cannot connect to the database: {e}");
            return ExitCode::from(2);
        }
    };
    let code =
        lq_runtime::control::with_timeout(args.timeout, run_on(&pool, args.format, args.command))
            .await;
    pool.close().await;
    code
}

/// Bound on connecting to the database.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Command {
    /// Refuses arguments that are wrong whatever the database holds (a bulk
    /// action naming no jobs, ids and a filter together, a filter no database
    /// takes), so `lq` says so without connecting first.
    fn check(&self) -> Result<(), String> {
        match self {
            Command::Jobs(c) => c.check(),
            _ => Ok(()),
        }
    }
}

/// Runs `command` on `pool` (for an application that has its own pool), each
/// database call bounded by the caller's [`lq_runtime::control::with_timeout`]
/// scope, or 30 s.
///
/// ```no_run
/// use clap::Parser;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     lq: lq_cli::LqArgs,
/// }
///
/// # async fn f(pool: sqlx::PgPool) -> std::process::ExitCode {
/// // `lq --format json status`, on the application's pool.
/// let args = Cli::parse_from(["lq", "--format", "json", "status"]).lq;
/// lq_cli::run_on(&pool, args.format, args.command).await
/// # }
/// ```
pub async fn run_on(pool: &PgPool, format: Format, command: Command) -> ExitCode {
    let out = output::Out::new(format);
    let result = match command {
        Command::Migrate(a) => commands::migrate::run(pool, &out, a).await,
        Command::Doctor => commands::doctor::run(pool, &out).await,
        Command::Status(a) => commands::status::run(pool, &out, a).await,
        Command::Jobs(c) => commands::jobs::run(pool, &out, c).await,
        Command::Queues(c) => commands::queues::run(pool, &out, c).await,
        Command::Runtimes => commands::runtimes::run(pool, &out).await,
        Command::Cron(c) => commands::cron::run(pool, &out, c).await,
        Command::Prune(a) => commands::prune::run(pool, &out, a).await,
        Command::Serve(a) => commands::serve::run(pool, a).await,
    };
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Ok(Outcome::NotFound) => ExitCode::from(2),
        Err(e) => {
            let text = match schema_behind(pool, &*e).await {
                Some(found) => format!(
                    "the lq schema in this database is at version {found}, this lq needs {}: \
                     run `lq migrate`, or check --database-url (DATABASE_URL) names the \
                     database litequeue uses ({})",
                    lq_runtime::SCHEMA_VERSION,
                    describe(&*e)
                ),
                None => describe(&*e),
            };
            eprintln!("lq: {}", output::printable(&text));
            ExitCode::from(2)
        }
    }
}

/// The schema version found, when `e` is a statement naming a table, column,
/// type or function of litequeue's that the database lacks and the schema is
/// older than this build: the operator pointed `lq` at the wrong database, or
/// has not migrated it yet. `None` otherwise, or when the version cannot be read.
async fn schema_behind(pool: &PgPool, e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    if !lq_runtime::names_missing_object(e) {
        return None;
    }
    let found = lq_runtime::schema_version(pool).await.ok()?;
    (found < lq_runtime::SCHEMA_VERSION).then_some(found)
}

/// A failure as `lq` prints it: every cause in its chain (PostgreSQL's own
/// message included), and where a grant is missing, where to read which
/// grants each role needs.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = lq_runtime::chain(e);
    if lq_runtime::lacks_grant(e) {
        text.push_str(" (this role lacks a grant: docs/roles.md lists each role's grants)");
    }
    text
}

/// How a command that ran went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing to report.
    Clean,
    /// Worked, and found something an operator should see (exit 1).
    Findings,
    /// Did what it could, but a job the user named does not exist, already
    /// reported on stderr (exit 2, as for any not-found).
    NotFound,
}

/// A command's failure, printed as `lq: …` (exit 2).
pub(crate) type Failure = Box<dyn std::error::Error + Send + Sync>;
