//! The litequeue demo: a tiny shop whose background jobs live in its own Postgres.
//!
//! It signs users up and places orders in business transactions that enqueue jobs
//! in the same transaction (one sign-up is rolled back: its job never exists),
//! runs a worker runtime, shows progress, and prints what ran: a payment that fails
//! twice and then succeeds, a shipment that fails until it is dead, and a
//! duplicate welcome email that unique keys collapse.

use std::time::Duration;

use lq_runtime::{Job, JobContext, JobError, JobState, Perform, Runtime, RuntimeConfig};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// Welcome mail for a new user; at most one live per user.
#[derive(Serialize, Deserialize, Job)]
#[job(queue = "emails", priority = 10, unique_key = "welcome:{user_id}")]
struct SendWelcomeEmail {
    user_id: i64,
}

impl Perform for SendWelcomeEmail {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let shop = ctx.state::<Shop>();
        let email: String = sqlx::query_scalar("select email from users where id = $1")
            .bind(self.user_id)
            .fetch_one(&shop.pool)
            .await?;
        shop.say(format!("  [emails]   welcome mail sent to {email}"));
        Ok(())
    }
}

/// Charges an order; the fake gateway times out twice before it answers.
#[derive(Serialize, Deserialize, Job)]
#[job(max_attempts = 5, backoff = exponential(base = "200ms", max = "2s", jitter = 0.1))]
struct ChargeOrder {
    order_id: i64,
    cents: i64,
}

impl Perform for ChargeOrder {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let shop = ctx.state::<Shop>();
        if ctx.attempt() <= 2 {
            shop.say(format!(
                "  [default]  charging order {} failed (attempt {}), will retry",
                self.order_id,
                ctx.attempt()
            ));
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "payment gateway timed out",
            )
            .into());
        }
        sqlx::query("update orders set paid = true where id = $1")
            .bind(self.order_id)
            .execute(&shop.pool)
            .await?;
        shop.say(format!(
            "  [default]  order {} charged {:.2} EUR on attempt {}",
            self.order_id,
            self.cents as f64 / 100.0,
            ctx.attempt()
        ));
        Ok(())
    }
}

/// Ships an order; no carrier serves Mars, so that one fails every attempt and is dead.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "ship_order", max_attempts = 3, backoff = fixed("150ms"))]
struct ShipOrder {
    order_id: i64,
    destination: String,
}

impl Perform for ShipOrder {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if self.destination != "Mars" {
            ctx.state::<Shop>().say(format!(
                "  [default]  order {} shipped to {}",
                self.order_id, self.destination
            ));
            return Ok(());
        }
        ctx.state::<Shop>().say(format!(
            "  [default]  shipping order {} to {} failed (attempt {}/{})",
            self.order_id,
            self.destination,
            ctx.attempt(),
            ctx.max_attempts()
        ));
        Err(format!("no carrier delivers to {}", self.destination).into())
    }
}

/// Application state every job can reach with `ctx.state::<Shop>()`.
struct Shop {
    pool: PgPool,
}

impl Shop {
    fn say(&self, line: String) {
        println!("{line}");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_examples::init_logging();
    let pool = lq_examples::fresh_database("lq_demo").await?;
    sqlx::raw_sql(
        "create table users (id bigserial primary key, email text not null unique);
         create table orders (id bigserial primary key, user_id bigint not null references users, paid boolean not null default false);",
    )
    .execute(&pool)
    .await?;

    println!("== business transactions (each enqueues its jobs in the same transaction)");
    let alice = sign_up(&pool, "alice@example.com", true).await?;
    let _bob = sign_up(&pool, "bob@example.com", false).await?; // rolled back
    let carol = sign_up(&pool, "carol@example.com", true).await?;
    // A double-clicked button: the second welcome mail collapses into the first.
    let again = SendWelcomeEmail { user_id: alice }.enqueue(&pool).await?;
    println!(
        "  re-enqueued alice's welcome mail: existing job {} returned (existing = {})",
        again.id, again.existing
    );
    place_order(&pool, alice, 4_200, "Berlin").await?;
    place_order(&pool, carol, 1_999, "Mars").await?;

    println!("== runtime: 2 queues, progress as it happens");
    let config = RuntimeConfig {
        poll_interval: Duration::from_millis(100),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::builder(pool.clone())
        .config(config)
        .queue("default", 4)
        .queue("emails", 2)
        .state(Shop { pool: pool.clone() })
        .start()
        .await?;
    wait_until_idle(&pool).await?;
    let stats = runtime.shutdown_with_stats().await?;

    println!("== summary");
    summary(&pool).await?;
    println!(
        "runtime counters: claimed {} | succeeded {} | retried {} | dead {}",
        stats.claimed, stats.succeeded, stats.retried, stats.dead
    );
    let bob_jobs: i64 =
        sqlx::query_scalar("select count(*) from lq.all_jobs where payload->>'user_id' = '2'")
            .fetch_one(&pool)
            .await?;
    println!("bob's sign-up was rolled back: {bob_jobs} jobs exist for him");
    Ok(())
}

/// Inserts a user and enqueues the welcome mail in one transaction.
async fn sign_up(pool: &PgPool, email: &str, commit: bool) -> anyhow::Result<i64> {
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar("insert into users (email) values ($1) returning id")
        .bind(email)
        .fetch_one(&mut *tx)
        .await?;
    let job = SendWelcomeEmail { user_id: id }.enqueue(&mut tx).await?;
    if commit {
        tx.commit().await?;
        println!("  signed up {email} (user {id}), welcome job {}", job.id);
    } else {
        tx.rollback().await?;
        println!(
            "  sign-up of {email} rolled back: user {id} and welcome job {} never existed",
            job.id
        );
    }
    Ok(id)
}

/// Inserts an order and enqueues its charge and shipment in one transaction.
async fn place_order(
    pool: &PgPool,
    user_id: i64,
    cents: i64,
    destination: &str,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    let order_id: i64 = sqlx::query_scalar("insert into orders (user_id) values ($1) returning id")
        .bind(user_id)
        .fetch_one(&mut *tx)
        .await?;
    ChargeOrder { order_id, cents }.enqueue(&mut tx).await?;
    ShipOrder {
        order_id,
        destination: destination.into(),
    }
    .enqueue(&mut tx)
    .await?;
    tx.commit().await?;
    println!("  order {order_id} placed by user {user_id} (charge + shipment enqueued)");
    Ok(())
}

async fn wait_until_idle(pool: &PgPool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let live: i64 = sqlx::query_scalar(
            "select count(*) from lq.all_jobs where state in ('queued', 'running')",
        )
        .fetch_one(pool)
        .await?;
        if live == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "jobs still live after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn summary(pool: &PgPool) -> anyhow::Result<()> {
    println!(
        "  {:<4} {:<18} {:<8} {:<10} {:>8}  last error",
        "id", "kind", "queue", "state", "attempts"
    );
    for job in lq_runtime::control::list(pool, &lq_runtime::JobFilter::new(), 100)
        .await?
        .into_iter()
        .rev()
    {
        let last = job.errors.last().map_or("-", |e| e.error.as_str());
        println!(
            "  {:<4} {:<18} {:<8} {:<10} {:>8}  {}",
            job.id, job.kind, job.queue, job.state, job.attempts, last
        );
    }
    let dead = lq_runtime::control::list(
        pool,
        &lq_runtime::JobFilter::new().state(JobState::Dead),
        10,
    )
    .await?;
    for job in dead {
        let errors = job.errors.len();
        println!(
            "  dead job {} ({}) kept all {errors} attempts' errors; payload {}",
            job.id, job.kind, job.payload
        );
    }
    Ok(())
}
