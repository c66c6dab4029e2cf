//! What a handler knows: `JobContext`'s times, queue and cron tick.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use lq_runtime::{
    cron::{fire_due, Schedule, LATE_AFTER},
    database_now, CatchUp, CronTick, EnqueueOptions, Job, JobContext, JobError, Perform, Runtime,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(30);

/// What one run of [`Probe`] saw.
#[derive(Debug, Clone)]
struct Seen {
    id: i64,
    queue: String,
    run_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    cron: Option<CronTick>,
}

#[derive(Clone, Default)]
struct Sightings(Arc<Mutex<Vec<Seen>>>);

/// Records its context, on a queue no other test serves.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.context_probe", queue = "context-test")]
struct Probe {
    n: u32,
}

impl Perform for Probe {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Sightings>().0.lock().unwrap().push(Seen {
            id: ctx.id(),
            queue: ctx.queue().to_owned(),
            run_at: ctx.run_at(),
            created_at: ctx.created_at(),
            cron: ctx.cron().cloned(),
        });
        Ok(())
    }
}

async fn run_all(db: &TestDb, expected: usize) -> Vec<Seen> {
    let seen = Sightings::default();
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("context-test", 4)
        .state(seen.clone())
        .start()
        .await
        .unwrap();
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), expected, "{seen:?}");
    seen
}

#[tokio::test]
async fn a_handler_sees_when_its_job_was_due_and_enqueued() {
    let db = TestDb::new().await;
    let before = database_now(&db.pool).await.unwrap();
    let due = before - chrono::Duration::minutes(90);
    let opts = EnqueueOptions::new().run_at(due);
    let id = Probe { n: 1 }
        .enqueue_with(&db.pool, opts)
        .await
        .unwrap()
        .id;
    let after = database_now(&db.pool).await.unwrap();
    let seen = run_all(&db, 1).await.remove(0);
    assert_eq!(seen.id, id);
    assert_eq!(seen.queue, "context-test");
    assert_eq!(seen.run_at, due);
    assert!(
        before <= seen.created_at && seen.created_at <= after,
        "{before} <= {} <= {after}",
        seen.created_at
    );
    assert!(seen.cron.is_none(), "a job enqueued by hand has no tick");
}

#[tokio::test]
async fn a_recurring_job_knows_its_tick_and_how_many_ticks_a_catch_up_covers() {
    let db = TestDb::new().await;
    let schedule = Schedule::parse("* * * * * *", "UTC").unwrap();
    let payload = serde_json::to_string(&Probe { n: 0 }).unwrap();
    let fire = |now: DateTime<Utc>| {
        let (db, schedule, payload) = (&db, &schedule, &payload);
        async move {
            let mut conn = db.pool.acquire().await.unwrap();
            fire_due(
                &mut conn,
                Probe::KIND,
                &Probe::OPTIONS,
                schedule,
                CatchUp::Once,
                payload,
                Some(now),
            )
            .await
            .unwrap()
        }
    };
    let start: DateTime<Utc> = "2024-03-01T00:00:00Z".parse().unwrap();
    assert!(fire(start).await.fired.is_empty());
    // Every runtime was down for an hour: one job stands for the missed window,
    // then the last LATE_AFTER seconds' ticks fire one each.
    let now = start + chrono::Duration::hours(1);
    let report = fire(now).await;
    let late = LATE_AFTER.as_secs() as i64;
    assert_eq!(report.fired.len(), 1 + late as usize);
    assert_eq!(report.missed, 3600 - late as usize);

    let mut seen = run_all(&db, report.fired.len()).await;
    seen.sort_by_key(|s| s.cron.as_ref().map(|c| c.tick));
    let ticks: Vec<CronTick> = seen.iter().map(|s| s.cron.clone().unwrap()).collect();
    let catch_up = &ticks[0];
    assert!(catch_up.catch_up);
    assert_eq!(catch_up.tick, now - chrono::Duration::seconds(late));
    assert_eq!(catch_up.ticks_covered as usize, report.missed);
    for (i, on_time) in ticks[1..].iter().enumerate() {
        assert!(!on_time.catch_up);
        assert_eq!(on_time.ticks_covered, 1);
        let expected = now - chrono::Duration::seconds(late - 1 - i as i64);
        assert_eq!(on_time.tick, expected);
    }
    // Each job's id is the one the scheduler reported for its tick.
    for s in &seen {
        let tick = s.cron.as_ref().unwrap().tick;
        assert!(report.fired.contains(&(tick, s.id)), "{tick} {}", s.id);
    }
}
