//! Recurring jobs: exactly one job per tick, durable across restarts, missed
//! windows by policy. Cron types live on their own queue so other tests' runtimes
//! never schedule them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use lq_runtime::{
    cron::{fire_due, Schedule, LATE_AFTER},
    CatchUp, Job, JobContext, JobError, Perform, Runtime, RuntimeConfig,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

/// Every second, on queue `cron-test`.
#[derive(Serialize, Deserialize, Default, Job)]
#[job(kind = "test.every_second", queue = "cron-test", cron = "* * * * * *")]
pub struct EverySecond;

impl Perform for EverySecond {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Every second, one live job at a time (producer only: fired by hand below).
#[derive(Serialize, Deserialize, Default, Job)]
#[job(
    kind = "test.every_second_unique",
    queue = "cron-unique",
    cron = "* * * * * *",
    unique_key = "sweep"
)]
pub struct EverySecondUnique;

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// Drives one schedule with an injected clock through `steps`, with down windows
/// longer than LATE_AFTER; returns (on-time ticks seen, down windows) and checks
/// every fired tick against the clock that fired it.
async fn simulate(
    db: &TestDb,
    kind: &str,
    catch_up: CatchUp,
    seed: u64,
) -> (Vec<DateTime<Utc>>, Vec<(DateTime<Utc>, DateTime<Utc>)>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let options = EverySecond::OPTIONS;
    let start = t("2030-01-01T00:00:00Z");
    let mut now = start;
    let mut downs = Vec::new();
    let mut conn = db.pool.acquire().await.unwrap();
    fire_every_second_as(&mut conn, kind, &options, catch_up, Some(now)).await;
    let mut fired_total = 0usize;
    let mut calls = 0;
    while fired_total < 1000 {
        calls += 1;
        if calls % 97 == 0 {
            // Everything is down for 15–60 s: a catch-up window.
            let gap = chrono::Duration::milliseconds(rng.i64(15_000..60_000));
            downs.push((now, now + gap));
            now += gap;
            // A "restart": a fresh connection and scheduler state.
            drop(conn);
            conn = db.pool.acquire().await.unwrap();
        } else {
            now += chrono::Duration::milliseconds(rng.i64(200..1500));
        }
        let rep = fire_every_second_as(&mut conn, kind, &options, catch_up, Some(now)).await;
        for (tick, _) in &rep.fired {
            assert!(*tick <= now, "tick {tick} fired early at {now}");
        }
        // A second runtime deciding at the same instant finds nothing left to do.
        let twin = fire_every_second_as(&mut conn, kind, &options, catch_up, Some(now)).await;
        assert!(twin.fired.is_empty(), "a tick fired twice");
        fired_total += rep.fired.len();
    }
    let ticks: Vec<(DateTime<Utc>, Option<i64>, bool)> = sqlx::query_as(
        "select tick, job_id, catch_up from lq.cron_ticks where kind = $1 order by tick",
    )
    .bind(kind)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(ticks.len(), fired_total);
    let jobs: i64 = sqlx::query_scalar(
        "select count(*) from lq.all_jobs where kind = $1 and id in (select job_id from lq.cron_ticks)",
    )
    .bind(kind)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs as usize, fired_total, "one job per fired tick");
    (ticks.iter().map(|x| x.0).collect(), downs)
}

#[tokio::test]
async fn a_simulated_clock_drives_a_thousand_ticks_through_restarts_and_catch_up() {
    let db = TestDb::new().await;
    let (fired, downs) = simulate(&db, "sim.once", CatchUp::Once, 7).await;
    let late = chrono::Duration::from_std(LATE_AFTER).unwrap();
    // Every whole second after the start is either fired exactly once, or lies in
    // a missed window (older than LATE_AFTER when the window ended), which fired
    // one job for itself.
    let first = t("2030-01-01T00:00:01Z");
    let last = *fired.last().unwrap();
    let mut expected = Vec::new();
    let mut s = first;
    while s <= last {
        let missed = downs.iter().find(|(from, to)| s > *from && s <= *to - late);
        match missed {
            None => expected.push(s),
            Some((from, to)) => {
                // the window's newest missed tick stands for it
                let newest =
                    chrono::DurationRound::duration_trunc(*to - late, chrono::Duration::seconds(1))
                        .unwrap();
                if s == newest && s > *from {
                    expected.push(s);
                }
            }
        }
        s += chrono::Duration::seconds(1);
    }
    assert_eq!(fired, expected);
    assert!(fired.len() >= 1000, "{} ticks", fired.len());
    assert!(downs.len() >= 5, "{} catch-up windows", downs.len());
}

#[tokio::test]
async fn skip_policy_drops_missed_windows() {
    let db = TestDb::new().await;
    let (fired, downs) = simulate(&db, "sim.skip", CatchUp::Skip, 11).await;
    let late = chrono::Duration::from_std(LATE_AFTER).unwrap();
    for (from, to) in &downs {
        let dropped = fired
            .iter()
            .filter(|s| *s > from && **s <= *to - late)
            .count();
        assert_eq!(dropped, 0, "window {from}..{to}");
    }
    let catch_up: i64 = sqlx::query_scalar("select count(*) from lq.cron_ticks where catch_up")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(catch_up, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_runtimes_share_one_schedule_and_fire_each_tick_once() {
    let db = TestDb::new().await;
    let mut runtimes = Vec::new();
    for _ in 0..3 {
        let pool = db.another_pool(4).await;
        let config = RuntimeConfig {
            poll_interval: Duration::from_millis(100),
            ..RuntimeConfig::default()
        };
        runtimes.push(
            Runtime::builder(pool)
                .config(config)
                .queue("cron-test", 2)
                .start()
                .await
                .unwrap(),
        );
    }
    db.wait_for(
        "five ticks",
        "select count(*) >= 5 from lq.cron_ticks where kind = 'test.every_second'",
        Duration::from_secs(30),
    )
    .await;
    for rt in runtimes {
        rt.shutdown().await.unwrap();
    }
    let ticks: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "select tick from lq.cron_ticks where kind = 'test.every_second' order by tick",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // Consecutive whole seconds, none missing, none twice (the primary key).
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], chrono::Duration::seconds(1), "{ticks:?}");
    }
    let jobs: i64 =
        sqlx::query_scalar("select count(*) from lq.all_jobs where kind = 'test.every_second'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(jobs as usize, ticks.len());
    // None early: each job was created at or after its tick, by database time.
    let early: i64 = sqlx::query_scalar(
        "select count(*) from lq.cron_ticks t join lq.all_jobs j on j.id = t.job_id where j.created_at < t.tick",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(early, 0);
}

/// A pass that begins just before a tick and waits for another runtime's pass
/// (which holds the schedule's row, updated and uncommitted) reads the clock
/// after the wait, and fires that tick. Its tick row and job are dated by the
/// firing, not by the transaction's start, which predates the tick. (The fault
/// suite's cron scenario caught a tick row dated before its tick.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_waited_for_another_dates_its_ticks_after_the_wait() {
    let db = TestDb::new().await;
    let kind = "test.waited";
    let pass = |pool: sqlx::PgPool| async move {
        let mut conn = pool.acquire().await.unwrap();
        fire_every_second_as(&mut conn, kind, &EverySecond::OPTIONS, CatchUp::Once, None).await
    };
    // The schedule's row, starting now by the database's clock.
    pass(db.pool.clone()).await;

    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("update lq.cron_schedules set checked_at = checked_at where kind = $1")
        .bind(kind)
        .execute(&mut *holder)
        .await
        .unwrap();
    let waiter = tokio::spawn(pass(db.another_pool(1).await));
    // The waiter's transaction began before a whole second that has now passed
    // while it waits on the holder's row.
    db.wait_for(
        "the waiting pass to outlast the next whole second after its start",
        "select exists (select from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'
               and clock_timestamp() >= date_trunc('second', xact_start) + interval '1 second')",
        Duration::from_secs(10),
    )
    .await;
    holder.commit().await.unwrap();
    let report = waiter.await.unwrap();
    assert!(
        !report.fired.is_empty(),
        "the waiter fired the tick it outlasted"
    );

    let (ticks, early): (i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where t.fired_at < t.tick or j.created_at < t.tick)
         from lq.cron_ticks t join lq.all_jobs j on j.id = t.job_id where t.kind = $1",
    )
    .bind(kind)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(ticks as usize, report.fired.len());
    assert_eq!(early, 0, "a tick row or job dated before its tick");
}

/// The leader links a recurring type but does not serve its queue, so it does
/// not schedule it: the runtime that serves the queue fires it. (A follower used
/// to defer to any leader that merely linked the type, and the schedule never
/// fired while that leader led.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_does_not_serve_a_recurring_kinds_queue_leaves_it_to_one_that_does() {
    let db = TestDb::new().await;
    let config = || RuntimeConfig {
        poll_interval: Duration::from_millis(100),
        ..RuntimeConfig::default()
    };
    let leader = Runtime::builder(db.another_pool(4).await)
        .config(RuntimeConfig {
            owner: "rt-leader".into(),
            ..config()
        })
        .queue("default", 1)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "rt-leader to lead",
        "select exists (select from lq.leader where holder = 'rt-leader' and expires_at > now())",
        Duration::from_secs(30),
    )
    .await;
    let follower = Runtime::builder(db.another_pool(4).await)
        .config(config())
        .queue("cron-test", 1)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "two ticks fired by the runtime that serves the queue",
        "select count(*) >= 2 from lq.cron_ticks where kind = 'test.every_second'",
        Duration::from_secs(30),
    )
    .await;
    let holder: String = sqlx::query_scalar("select holder from lq.leader")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(holder, "rt-leader", "the leader did not change meanwhile");
    follower.shutdown().await.unwrap();
    leader.shutdown().await.unwrap();
}

/// A stored last tick in the future (a host whose clock ran ahead, a hand edit)
/// would stall the schedule until then; the next pass moves it back to now and
/// says so, and the schedule fires from there.
#[tokio::test]
async fn a_last_tick_in_the_future_is_moved_back_and_the_schedule_fires() {
    let db = TestDb::new().await;
    let kind = "test.rewound";
    let mut conn = db.pool.acquire().await.unwrap();
    let first = fire_every_second(&mut conn, kind, "2030-01-01T00:00:00Z").await;
    assert!(first.rewound_from.is_none());
    sqlx::query("update lq.cron_schedules set last_tick = $2 where kind = $1")
        .bind(kind)
        .bind(t("2030-06-01T00:00:00Z"))
        .execute(&db.pool)
        .await
        .unwrap();

    let rewound = fire_every_second(&mut conn, kind, "2030-01-01T00:00:05.500Z").await;
    assert_eq!(rewound.rewound_from, Some(t("2030-06-01T00:00:00Z")));
    let stored: DateTime<Utc> =
        sqlx::query_scalar("select last_tick from lq.cron_schedules where kind = $1")
            .bind(kind)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        t("2030-01-01T00:00:05Z"),
        "moved back to the newest tick at or before now"
    );

    let next = fire_every_second(&mut conn, kind, "2030-01-01T00:00:06.200Z").await;
    assert!(next.rewound_from.is_none());
    assert_eq!(
        next.fired.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![t("2030-01-01T00:00:06Z")]
    );
}

/// One pass of an every-second schedule at `now`.
async fn fire_every_second(
    conn: &mut sqlx::PgConnection,
    kind: &str,
    now: &str,
) -> lq_runtime::cron::FireReport {
    fire_every_second_with(conn, kind, &EverySecond::OPTIONS, now).await
}

/// [`fire_every_second`] with the options of another recurring type.
async fn fire_every_second_with(
    conn: &mut sqlx::PgConnection,
    kind: &str,
    options: &lq_runtime::JobOptions,
    now: &str,
) -> lq_runtime::cron::FireReport {
    fire_every_second_as(conn, kind, options, CatchUp::Once, Some(t(now))).await
}

/// One pass of an every-second schedule with `options`, the missed-tick policy
/// `missed`, at `now` (the database's clock when `None`).
async fn fire_every_second_as(
    conn: &mut sqlx::PgConnection,
    kind: &str,
    options: &lq_runtime::JobOptions,
    missed: impl Into<lq_runtime::cron::MissedTicks>,
    now: Option<DateTime<Utc>>,
) -> lq_runtime::cron::FireReport {
    let schedule = Schedule::parse("* * * * * *", "UTC").unwrap();
    fire_due(conn, kind, options, &schedule, missed, "null", now)
        .await
        .unwrap()
}

/// A runtime that knows a recurring type records its declaration, so tools
/// without the type show the schedule and its next fire time.
#[tokio::test]
async fn a_schedule_describes_itself_and_shows_its_next_tick() {
    let db = TestDb::new().await;
    let rt = Runtime::builder(db.pool.clone())
        .queue("cron-test", 1)
        .owner("cron-describer")
        .start()
        .await
        .unwrap();
    db.wait_for(
        "a tick to fire",
        "select exists (select from lq.cron_ticks where kind = 'test.every_second')",
        Duration::from_secs(30),
    )
    .await;
    let schedules = lq_runtime::control::cron_schedules(&db.pool).await.unwrap();
    rt.shutdown().await.unwrap();
    let s = schedules
        .iter()
        .find(|s| s.kind == "test.every_second")
        .expect("listed");
    assert_eq!(s.expr.as_deref(), Some("* * * * * *"));
    assert_eq!(s.tz.as_deref(), Some("UTC"));
    assert_eq!(s.catch_up.as_deref(), Some("once"));
    assert_eq!(s.queue.as_deref(), Some("cron-test"));
    assert_eq!(s.declared_by.as_deref(), Some("cron-describer"));
    assert!(s.last_job_id.is_some());
    let next = s.next_tick.expect("a next tick");
    assert!(next > s.last_tick, "{next} after {}", s.last_tick);
    assert!(
        next - s.last_tick <= chrono::Duration::seconds(2),
        "{next} {}",
        s.last_tick
    );
}

/// A recurring type with a `unique_key`: a tick while the last tick's job is
/// still live records the tick and enqueues nothing, so jobs do not pile up
/// behind a slow or paused queue.
#[tokio::test]
async fn a_tick_whose_unique_key_a_live_job_holds_enqueues_nothing() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let kind = EverySecondUnique::KIND;
    async fn fire_unique(conn: &mut sqlx::PgConnection, now: &str) -> lq_runtime::cron::FireReport {
        let options = &EverySecondUnique::OPTIONS;
        fire_every_second_with(conn, EverySecondUnique::KIND, options, now).await
    }
    let first = fire_unique(&mut conn, "2030-01-01T00:00:00.500Z").await;
    assert!(
        first.fired.is_empty(),
        "the first pass only starts the schedule"
    );
    let second = fire_unique(&mut conn, "2030-01-01T00:00:01.500Z").await;
    assert_eq!(second.fired.len(), 1, "{second:?}");
    let held = second.fired[0].1;
    let third = fire_unique(&mut conn, "2030-01-01T00:00:02.500Z").await;
    assert!(third.fired.is_empty(), "the key is held: {third:?}");
    let ticks: i64 = sqlx::query_scalar("select count(*) from lq.cron_ticks where kind = $1")
        .bind(kind)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        ticks, 2,
        "the held tick is recorded, so it is not fired again"
    );
    let live: Vec<(i64, Option<String>)> =
        sqlx::query_as("select id, unique_key from lq.jobs where kind = $1")
            .bind(kind)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(live, vec![(held, Some("sweep".to_owned()))]);

    // Once that job ends, the next tick enqueues again.
    db.finish(held, "succeeded", 0.0).await;
    let fourth = fire_unique(&mut conn, "2030-01-01T00:00:03.500Z").await;
    assert_eq!(fourth.fired.len(), 1, "{fourth:?}");
}

/// Ticks seen later than `LATE_AFTER` but within what the caller allows (a
/// runtime allows for a dead leader's lease running out) fire one job each, on
/// time; with `CatchUp::Skip` and the default allowance they are dropped.
#[tokio::test]
async fn ticks_late_by_less_than_the_allowance_fire_as_on_time() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let allowing = |late_after| lq_runtime::cron::MissedTicks {
        catch_up: CatchUp::Skip,
        late_after,
    };
    let start = "2030-01-01T00:00:00Z";
    let later = "2030-01-01T00:00:25Z";
    for kind in ["test.late_allowed", "test.late_default"] {
        fire_every_second(&mut conn, kind, start).await;
    }
    let allowed = fire_every_second_as(
        &mut conn,
        "test.late_allowed",
        &EverySecond::OPTIONS,
        allowing(Duration::from_secs(30)),
        Some(t(later)),
    )
    .await;
    assert_eq!((allowed.fired.len(), allowed.missed), (25, 0));
    let default = fire_every_second_as(
        &mut conn,
        "test.late_default",
        &EverySecond::OPTIONS,
        CatchUp::Skip,
        Some(t(later)),
    )
    .await;
    let late = LATE_AFTER.as_secs() as usize;
    assert_eq!(
        (default.fired.len(), default.missed),
        (late, 25 - late),
        "beyond LATE_AFTER, Skip drops them"
    );
}

/// Once a year, with a payload of its own, a priority, attempts and a unique
/// key: run by hand in the tests below, never by its schedule.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "test.yearly_report",
    queue = "cron-now",
    cron = "0 0 1 1 *",
    priority = 3,
    max_attempts = 7,
    unique_key = "report:{scope}"
)]
pub struct YearlyReport {
    scope: String,
}

impl Default for YearlyReport {
    fn default() -> Self {
        Self {
            scope: "all".into(),
        }
    }
}

/// Whether a [`YearlyReport`] ran with no cron tick in its context.
static RAN_WITHOUT_A_TICK: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

impl Perform for YearlyReport {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.cron().is_none() && self.scope == "all" {
            RAN_WITHOUT_A_TICK.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A tool without the job's type runs a recurring job now: the job its ticks
/// would enqueue (payload, queue, priority, attempts, unique key, as the
/// runtime recorded them), with no tick recorded, so the schedule is untouched;
/// a live job holding the key means none, as at a tick.
#[tokio::test]
async fn a_recurring_job_runs_now_as_its_ticks_would_without_a_tick() {
    use lq_runtime::{control, CoreError, JobState};
    let db = TestDb::new().await;
    let kind = YearlyReport::KIND;
    let rt = Runtime::builder(db.pool.clone())
        .queue("cron-now", 1)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the runtime to record the schedule's job",
        "select exists (select from lq.cron_schedules
                        where kind = 'test.yearly_report' and payload is not null)",
        Duration::from_secs(30),
    )
    .await;
    let before = control::cron_schedules(&db.pool).await.unwrap();
    assert!(
        before.iter().any(|s| s.kind == kind && s.runnable),
        "the declared schedule can be run now: {before:?}"
    );
    // Held in the queue while we look, then let go.
    control::pause_queue(&db.pool, "cron-now", "test")
        .await
        .unwrap();

    let id = control::cron_run_now(&db.pool, kind, "ops: alice")
        .await
        .unwrap();
    let job = control::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (job.kind.as_str(), job.queue.as_str(), job.state),
        (kind, "cron-now", JobState::Queued)
    );
    assert_eq!((job.priority, job.max_attempts), (3, 7));
    let json = |raw: &serde_json::value::RawValue| -> serde_json::Value {
        serde_json::from_str(raw.get()).unwrap()
    };
    assert_eq!(json(&job.payload), serde_json::json!({"scope": "all"}));
    assert_eq!(job.unique_key.as_deref(), Some("report:all"));
    assert_eq!(
        job.meta.as_deref().map(json),
        Some(serde_json::json!({"lq": {"run_now": {"by": "ops: alice"}}}))
    );

    // Its key is held while it lives: a second run enqueues nothing and names it.
    let held = control::cron_run_now(&db.pool, kind, "ops: bob")
        .await
        .unwrap_err();
    assert!(
        matches!(&held, CoreError::ScheduleKeyHeld { holder, key, .. }
            if *holder == id && key == "report:all"),
        "{held:?}"
    );
    assert_eq!(db.count("queued").await, 1);

    control::resume_queue(&db.pool, "cron-now").await.unwrap();
    db.wait_for(
        "the job run now to succeed",
        &format!(
            "select exists (select from lq.finished_jobs where id = {id} and state = 'succeeded')"
        ),
        Duration::from_secs(30),
    )
    .await;
    assert!(
        RAN_WITHOUT_A_TICK.load(std::sync::atomic::Ordering::SeqCst),
        "the handler ran it with its payload, and no cron tick"
    );
    let again = control::cron_run_now(&db.pool, kind, "ops: bob")
        .await
        .unwrap();
    assert_ne!(again, id, "the key is free once the first has ended");
    rt.shutdown().await.unwrap();

    // The schedule is as it was: no tick recorded, none moved.
    let ticks: i64 = sqlx::query_scalar("select count(*) from lq.cron_ticks where kind = $1")
        .bind(kind)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(ticks, 0);
    let after = control::cron_schedules(&db.pool).await.unwrap();
    let tick_of = |list: &[control::CronInfo]| {
        let s = list.iter().find(|s| s.kind == kind).expect("listed");
        (s.last_tick, s.next_tick)
    };
    assert_eq!(tick_of(&after), tick_of(&before));
}

/// Running a kind with no schedule, one whose job no runtime of this version
/// has recorded, or a name that breaks the rule, is a typed error that
/// enqueues nothing; a hostile note is stored harmlessly.
#[tokio::test]
async fn running_an_unknown_or_undeclared_schedule_now_says_which_and_enqueues_nothing() {
    use lq_runtime::{control, CoreError};
    let db = TestDb::new().await;
    let unknown = control::cron_run_now(&db.pool, "test.no_such_schedule", "ops")
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, CoreError::UnknownSchedule { kind } if kind == "test.no_such_schedule"),
        "{unknown:?}"
    );
    // As a runtime built before schema version 12 leaves it: the expression
    // and queue, not the job.
    db.declare_schedule_without_job("test.old_runtime", "cron-now")
        .await;
    let listed = control::cron_schedules(&db.pool).await.unwrap();
    let old = listed
        .iter()
        .find(|s| s.kind == "test.old_runtime")
        .unwrap();
    assert!(!old.runnable, "the list says it cannot be run now");
    let undeclared = control::cron_run_now(&db.pool, "test.old_runtime", "ops")
        .await
        .unwrap_err();
    assert!(
        matches!(&undeclared, CoreError::ScheduleUndeclared { kind } if kind == "test.old_runtime"),
        "{undeclared:?}"
    );
    assert!(
        undeclared.to_string().contains("start a runtime"),
        "{undeclared}"
    );
    let bad = control::cron_run_now(&db.pool, "no spaces\0", "ops")
        .await
        .unwrap_err();
    assert!(
        matches!(&bad, CoreError::InvalidName { what: "kind", .. }),
        "{bad:?}"
    );
    let jobs: i64 = sqlx::query_scalar("select count(*) from lq.all_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);

    // Whatever the caller says it is, its note is stored: a NUL escaped, and
    // cut to a pause note's length.
    sqlx::query(
        "update lq.cron_schedules set payload = '{}', priority = 0, max_attempts = 1
         where kind = 'test.old_runtime'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let by = format!("nul\0{}", "é".repeat(5_000));
    let id = control::cron_run_now(&db.pool, "test.old_runtime", &by)
        .await
        .unwrap();
    let stored: String =
        sqlx::query_scalar("select meta #>> '{lq,run_now,by}' from lq.jobs where id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(stored.starts_with("nul\\0éé"), "{stored:.20}");
    assert!(stored.len() < by.len(), "cut: {}", stored.len());
}
