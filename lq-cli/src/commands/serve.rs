//! `lq serve`: the web dashboard (lq-web), standalone.

use std::{env::VarError, net::SocketAddr, time::Duration};

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
    // A plain string, checked in `run`: clap's own error would echo the value,
    // password and all.
    #[arg(long, env = "LQ_WEB_BASIC", hide_env_values = true)]
    basic: Option<String>,
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

/// `user:password` split, refused without echoing it: the value holds a
/// password. An empty password is [`lq_web::Error::EmptySecret`], from
/// [`ServeOptions::check`].
fn basic(value: &str) -> Result<(String, String), Failure> {
    match value.split_once(':') {
        Some((user, pass)) if !user.is_empty() => Ok((user.to_owned(), pass.to_owned())),
        _ => Err(
            "give basic auth (--basic or LQ_WEB_BASIC) as user:password, \
             a non-empty user name before the first colon (the value given is not shown)"
                .into(),
        ),
    }
}

/// The server's options from `args` and the value of the token's variable
/// (`token`): a variable set but empty is refused ([`lq_web::Error::EmptySecret`]),
/// not taken for no token.
fn options(args: ServeArgs, token: Result<String, VarError>) -> Result<ServeOptions, Failure> {
    let token = match token {
        Ok(t) => Some(t),
        Err(VarError::NotPresent) => None,
        Err(VarError::NotUnicode(_)) => {
            return Err(format!("{} is not valid UTF-8", args.token_env).into())
        }
    };
    let basic = args.basic.as_deref().map(basic).transpose()?;
    let options = ServeOptions::new(args.bind)
        .allow_actions(args.allow_actions)
        .token(token)
        .basic(basic)
        .refresh(args.refresh)
        // `lq --timeout`, the scope `lq_cli::run` set.
        .timeout(lq_runtime::control::timeout());
    let options = (args.public_origin.into_iter()).fold(options, ServeOptions::public_origin);
    options.check()?;
    Ok(options)
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
    let (bind, actions) = (args.bind, args.allow_actions);
    let token = std::env::var(&args.token_env);
    let options = options(args, token)?;
    eprintln!(
        "lq: dashboard on http://{}/ ({}); Ctrl-C stops it",
        bind,
        if actions {
            "actions allowed"
        } else {
            "read-only"
        }
    );
    // Served anyway (the migration may be on its way); each page says so too.
    if let Ok(found) = lq_runtime::schema_version(pool).await {
        if found < lq_runtime::SCHEMA_VERSION {
            eprintln!(
                "lq: warning: the lq schema in this database is at version {found}, this lq \
                 needs {}: pages fail until `lq migrate` runs (or check --database-url)",
                lq_runtime::SCHEMA_VERSION
            );
        }
    }
    lq_web::serve(pool.clone(), options).await?;
    Ok(Outcome::Clean)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn args(argv: &[&str]) -> ServeArgs {
        let argv = std::iter::once("serve").chain(argv.iter().copied());
        Cli::try_parse_from(argv).expect("clap takes it").serve
    }

    #[test]
    fn a_token_variable_set_but_empty_is_refused_not_taken_for_no_token() {
        for bind in ["127.0.0.1:8080", "0.0.0.0:8080"] {
            let e = options(args(&["--bind", bind]), Ok(String::new())).unwrap_err();
            assert!(
                matches!(
                    e.downcast_ref::<lq_web::Error>(),
                    Some(lq_web::Error::EmptySecret { what: "token" })
                ),
                "{bind}: {e}"
            );
        }
        let unset = options(args(&[]), Err(VarError::NotPresent)).unwrap();
        assert!(unset.token.is_none());
        let set = options(args(&[]), Ok("t0ken".into())).unwrap();
        assert_eq!(set.token.as_deref(), Some("t0ken"));
        // The refusal names flags that exist.
        let open = options(args(&["--bind", "0.0.0.0:8080"]), Err(VarError::NotPresent));
        let said = open.unwrap_err().to_string();
        assert!(
            said.contains("LQ_WEB_TOKEN, or the variable lq serve --token-env names"),
            "{said}"
        );
        assert!(
            !said.contains("--token)") && !said.contains("--token "),
            "{said}"
        );
    }

    /// `lq --timeout` reaches the dashboard: `lq_cli::run` runs the command
    /// inside its scope, and the server's options take the scope's bound.
    #[tokio::test]
    async fn the_commands_timeout_reaches_the_dashboard() {
        let bound = std::time::Duration::from_secs(90);
        let o = lq_runtime::control::with_timeout(bound, async {
            options(args(&[]), Err(VarError::NotPresent))
        })
        .await
        .unwrap();
        assert_eq!(o.timeout, bound);
        let o = options(args(&[]), Err(VarError::NotPresent)).unwrap();
        assert_eq!(o.timeout, lq_runtime::control::DEFAULT_TIMEOUT);
    }

    #[test]
    fn a_bad_basic_value_is_refused_without_showing_it() {
        for bad in [":s3cret", "s3cret", ""] {
            let a = args(&["--basic", bad]);
            let e = options(a, Err(VarError::NotPresent)).unwrap_err();
            let shown = e.to_string();
            assert!(shown.contains("user:password"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        let empty = options(args(&["--basic", "ops:"]), Err(VarError::NotPresent));
        let e = empty.unwrap_err();
        assert!(matches!(
            e.downcast_ref::<lq_web::Error>(),
            Some(lq_web::Error::EmptySecret { .. })
        ));
        let ok = options(args(&["--basic", "ops:s3:cret"]), Err(VarError::NotPresent)).unwrap();
        assert_eq!(ok.basic, Some(("ops".into(), "s3:cret".into())));
    }

    #[test]
    fn public_origins_reach_the_server_options() {
        let a = args(&[
            "--public-origin",
            "https://ops.example.com",
            "--public-origin",
            "https://ops2.example.com",
        ]);
        // Behind a proxy a secret is required.
        let open = options(a, Err(VarError::NotPresent));
        assert!(open.is_err(), "served behind a proxy without a secret");
        let a = args(&[
            "--public-origin",
            "https://ops.example.com",
            "--public-origin",
            "https://ops2.example.com",
        ]);
        let o = options(a, Ok("s3cret".into())).unwrap();
        assert_eq!(
            o.public_origins,
            ["https://ops.example.com", "https://ops2.example.com"]
        );
    }
}
