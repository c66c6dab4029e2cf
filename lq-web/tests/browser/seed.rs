//! A realistic load for the dashboard to show: several queues, thousands of jobs
//! in every state made by a real runtime running real handlers (so errors,
//! attempts and workers are what an operator would see), a paused queue, jobs
//! running, recurring schedules, and an hour of per-minute history for the
//! charts.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use lq_runtime::{control, EnqueueOptions, Job, JobContext, JobError, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// Set when "the fix is deployed": bounced addresses then send.
pub static MAILER_FIXED: AtomicBool = AtomicBool::new(false);
/// Never notified: the report jobs that hold wait on it until the test ends.
static HOLD: Notify = Notify::const_new();

/// How many jobs of each kind and fate the seed makes.
pub const EMAILS_SENT: u64 = 3_000;
pub const EMAILS_BOUNCED: u64 = 1_500;
pub const CHARGES_DECLINED: u64 = 800;
pub const CHARGES_WAITING: u64 = 4_000;
pub const REPORTS_RUNNING: u64 = 5;
pub const REPORTS_WAITING: u64 = 2_500;
pub const REPORTS_SCHEDULED: u64 = 3_000;
pub const WEBHOOKS_DELIVERED: u64 = 2_000;
pub const WEBHOOKS_CANCELLED: u64 = 1_200;

/// An email; addresses at `bounce.test` fail until [`MAILER_FIXED`].
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "mail.send", queue = "emails", max_attempts = 3, backoff = fixed("10ms"))]
pub struct SendEmail {
    pub to: String,
    pub template: String,
}

impl Perform for SendEmail {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        if self.to.ends_with("@bounce.test") && !MAILER_FIXED.load(Ordering::SeqCst) {
            return Err(format!("550 5.1.1 <{}>: mailbox unavailable", self.to).into());
        }
        Ok(())
    }
}

/// A card charge; a declined one is retried an hour later.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "billing.charge", queue = "billing", max_attempts = 8, backoff = fixed("1h"))]
pub struct ChargeCard {
    pub customer: i64,
    pub cents: i64,
    pub declined: bool,
}

impl Perform for ChargeCard {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        if self.declined {
            return Err(format!(
                "card_declined: insufficient funds (customer {})",
                self.customer
            )
            .into());
        }
        Ok(())
    }
}

/// A monthly report; `hold` ones run until the test ends.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "reports.build", queue = "reports")]
pub struct BuildReport {
    pub account: i64,
    pub month: String,
    pub hold: bool,
}

impl Perform for BuildReport {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        if self.hold {
            HOLD.notified().await;
        }
        Ok(())
    }
}

/// A webhook; one to a removed endpoint cancels itself.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "webhooks.deliver", queue = "webhooks")]
pub struct DeliverWebhook {
    pub endpoint: String,
    pub event: String,
}

impl Perform for DeliverWebhook {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        if self.endpoint.contains("removed") {
            return Err(JobError::cancel("the endpoint was removed"));
        }
        Ok(())
    }
}

/// Nightly, in Berlin time.
#[derive(Serialize, Deserialize, Default, Job)]
#[job(
    kind = "maintenance.nightly_cleanup",
    queue = "maintenance",
    cron = "0 3 * * *",
    cron_tz = "Europe/Berlin"
)]
pub struct NightlyCleanup;

impl Perform for NightlyCleanup {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Every quarter hour.
#[derive(Serialize, Deserialize, Default, Job)]
#[job(
    kind = "maintenance.refresh_rates",
    queue = "maintenance",
    cron = "*/15 * * * *"
)]
pub struct RefreshRates;

impl Perform for RefreshRates {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn tenant(i: u64) -> &'static str {
    ["acme", "globex", "initech", "umbrella"][(i % 4) as usize]
}

/// Fills `db` and returns the runtime that made it (keep it running: it holds
/// the running jobs and leads).
pub async fn seed(db: &TestDb) -> Runtime {
    let pool = &db.pool;
    let runtime = Runtime::builder(pool.clone())
        .queue("emails", 20)
        .queue("billing", 10)
        .queue("reports", REPORTS_RUNNING as usize)
        .queue("webhooks", 10)
        .queue("maintenance", 2)
        .owner("worker-1.prod")
        .poll_interval(Duration::from_millis(100))
        .start()
        .await
        .expect("start the runtime");

    let emails = (0..EMAILS_SENT + EMAILS_BOUNCED).map(|i| SendEmail {
        to: if i < EMAILS_BOUNCED {
            format!("user{i}@bounce.test")
        } else {
            format!("user{i}@example.com")
        },
        template: ["welcome", "receipt", "password_reset"][(i % 3) as usize].into(),
    });
    SendEmail::enqueue_many(pool, emails, EnqueueOptions::new().meta("tenant", "acme"))
        .await
        .expect("enqueue emails");
    let webhooks = (0..WEBHOOKS_DELIVERED + WEBHOOKS_CANCELLED).map(|i| DeliverWebhook {
        endpoint: if i < WEBHOOKS_CANCELLED {
            format!("https://hooks.{}.test/removed/{i}", tenant(i))
        } else {
            format!("https://hooks.{}.test/events", tenant(i))
        },
        event: "invoice.paid".into(),
    });
    DeliverWebhook::enqueue_many(pool, webhooks, EnqueueOptions::new())
        .await
        .expect("enqueue webhooks");
    let declined = (0..CHARGES_DECLINED).map(|i| ChargeCard {
        customer: 10_000 + i as i64,
        cents: 1_999,
        declined: true,
    });
    ChargeCard::enqueue_many(pool, declined, EnqueueOptions::new())
        .await
        .expect("enqueue charges");
    let held = (0..REPORTS_RUNNING).map(|i| BuildReport {
        account: i as i64,
        month: "2026-10".into(),
        hold: true,
    });
    BuildReport::enqueue_many(pool, held, EnqueueOptions::new().priority(-1))
        .await
        .expect("enqueue reports");

    db.wait_for(
        "the seeded jobs to reach their states",
        &format!(
            "select (select count(*) from lq.all_jobs where kind = 'mail.send' and state = 'dead') = {EMAILS_BOUNCED}
                and (select count(*) from lq.all_jobs where kind = 'webhooks.deliver' and state = 'cancelled') = {WEBHOOKS_CANCELLED}
                and (select count(*) from lq.all_jobs where kind = 'webhooks.deliver' and state = 'succeeded') = {WEBHOOKS_DELIVERED}
                and (select count(*) from lq.all_jobs where kind = 'mail.send' and state = 'succeeded') = {EMAILS_SENT}
                and (select count(*) from lq.jobs where kind = 'billing.charge' and state = 'queued' and attempts = 1) = {CHARGES_DECLINED}
                and (select count(*) from lq.jobs where kind = 'reports.build' and state = 'running') = {REPORTS_RUNNING}"
        ),
        Duration::from_secs(120),
    )
    .await;

    // Billing is paused for a migration: its new charges wait.
    control::pause_queue(pool, "billing", "ops@example.com")
        .await
        .expect("pause billing");
    let waiting = (0..CHARGES_WAITING).map(|i| ChargeCard {
        customer: 20_000 + i as i64,
        cents: 500 + (i as i64 % 50) * 100,
        declined: false,
    });
    ChargeCard::enqueue_many(pool, waiting, EnqueueOptions::new())
        .await
        .expect("enqueue waiting charges");
    // Reports: a backlog behind the running ones, and next month's scheduled.
    let backlog = (0..REPORTS_WAITING).map(|i| BuildReport {
        account: 100 + i as i64,
        month: "2026-10".into(),
        hold: false,
    });
    BuildReport::enqueue_many(
        pool,
        backlog,
        EnqueueOptions::new().meta("tenant", "globex"),
    )
    .await
    .expect("enqueue report backlog");
    let scheduled = (0..REPORTS_SCHEDULED).map(|i| BuildReport {
        account: 100 + i as i64,
        month: "2026-11".into(),
        hold: false,
    });
    BuildReport::enqueue_many(
        pool,
        scheduled,
        EnqueueOptions::new().delay(Duration::from_secs(6 * 3600)),
    )
    .await
    .expect("enqueue scheduled reports");

    history(db).await;
    runtime
}

/// An hour of per-minute rollup rows before now, shaped like a working day, so
/// the charts have something to draw (the runtime adds the current minute).
async fn history(db: &TestDb) {
    sqlx::raw_sql(
        "insert into lq.stats_minute (minute, queue, kind, succeeded, retried, dead, cancelled,
             started, wait_seconds, run_seconds, wait_buckets)
         select date_trunc('minute', now()) - make_interval(mins => m), q.queue, q.kind,
                (q.base * (1.0 + 0.4 * sin(m / 7.0)))::bigint,
                (q.base * 0.03)::bigint, (q.base * 0.01 * (m % 5))::bigint, 0,
                (q.base * (1.0 + 0.4 * sin(m / 7.0)))::bigint,
                q.base * (0.02 + 0.01 * (m % 9)), q.base * 0.05,
                array[0, q.base / 4, q.base / 4, q.base / 4, q.base / 8, q.base / 16, m % 7,
                      m % 3, 0, 0, 0, 0, 0, 0, 0]::bigint[]
         from generate_series(1, 60) as m,
              (values ('emails', 'mail.send', 900), ('webhooks', 'webhooks.deliver', 600),
                      ('billing', 'billing.charge', 300), ('reports', 'reports.build', 120))
                  as q(queue, kind, base)
         on conflict do nothing",
    )
    .execute(&db.pool)
    .await
    .expect("history rows");
}
