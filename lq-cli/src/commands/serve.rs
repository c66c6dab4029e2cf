//! `lq serve`: the web dashboard (lq-web), standalone.

use std::{net::SocketAddr, time::Duration};

use clap::Args;
use lq_web::ServeOptions;
use sqlx::PgPool;

use crate::{filter_args::parse_duration, Failure, Outcome};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback needs a token or basic auth.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Allow retry, cancel, delete, pause and resume (read-only without it).
    #[arg(long)]
    allow_actions: bool,
    /// The environment variable holding the token to require (sent as
    /// `Authorization: Bearer`, or entered once in the /login form); unset: no token.
    #[arg(long, default_value = "LQ_WEB_TOKEN")]
    token_env: String,
    /// Require basic auth with this `user:password`.
    #[arg(long, env = "LQ_WEB_BASIC", hide_env_values = true, value_parser = parse_basic)]
    basic: Option<Basic>,
    /// The address browsers use, like `https://ops.example.com`, when a proxy
    /// in front rewrites the Host header (nginx's default): actions posted from
    /// it are accepted. Repeat for several.
    #[arg(long, value_name = "ORIGIN")]
    public_origin: Vec<String>,
    /// How often pages refresh themselves (`0s`: never).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    refresh: Duration,
    /// Most database connections the dashboard holds at once: page loads and a
    /// bulk action running to its end share them. (An application running this
    /// command on its own pool, `lq_cli::run_on`, sizes that pool itself.)
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) db_connections: u32,
}

/// A user name and password.
#[derive(Debug, Clone)]
pub struct Basic(String, String);

fn parse_basic(s: &str) -> Result<Basic, String> {
    match s.split_once(':') {
        Some((user, pass)) if !user.is_empty() && !pass.is_empty() => {
            Ok(Basic(user.to_owned(), pass.to_owned()))
        }
        _ => Err("give basic auth as user:password".to_owned()),
    }
}

pub(crate) async fn run(pool: &PgPool, args: ServeArgs) -> Result<Outcome, Failure> {
    // The audit log goes to stderr, unless the application mounting this
    // command line has its own subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "lq_web=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let token = std::env::var(&args.token_env)
        .ok()
        .filter(|t| !t.is_empty());
    let options = ServeOptions::new(args.bind)
        .allow_actions(args.allow_actions)
        .token(token)
        .basic(args.basic.map(|Basic(u, p)| (u, p)))
        .refresh(args.refresh);
    let options = (args.public_origin.into_iter()).fold(options, ServeOptions::public_origin);
    options.check()?;
    eprintln!(
        "lq: dashboard on http://{}/ ({}); Ctrl-C stops it",
        args.bind,
        if args.allow_actions {
            "actions allowed"
        } else {
            "read-only"
        }
    );
    lq_web::serve(pool.clone(), options).await?;
    Ok(Outcome::Clean)
}
