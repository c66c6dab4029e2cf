//! Spoofed cancel notifications: a NOTIFY on the cancel channel is only a
//! hint, acted on when the row confirms it, however many arrive.

use super::*;

/// Waits for its cancellation signal (noting it) or for the test to release it.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "roles.cancel_probe",
    queue = "roles_cancel_q",
    max_attempts = 1
)]
struct CancelProbe;

/// Shared with the [`CancelProbe`] handlers.
#[derive(Clone)]
struct CancelState {
    /// Ids whose handler saw its cancellation signal.
    signalled: Arc<Mutex<HashSet<i64>>>,
    /// Ids the test released.
    released: Arc<tokio::sync::watch::Sender<HashSet<i64>>>,
}

impl Perform for CancelProbe {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let state = ctx.state::<CancelState>();
        let mut released = state.released.subscribe();
        tokio::select! {
            _ = ctx.cancelled() => {
                state.signalled.lock().unwrap().insert(ctx.id());
                Err("stopped by its cancellation signal".into())
            }
            _ = released.wait_for(|r| r.contains(&ctx.id())) => Ok(()),
        }
    }
}

/// A runtime serving [`CancelProbe`]s with `slots` handlers, once it listens for
/// cancel notifications (so none sent after this is missed), and their state.
async fn start_listening(db: &TestDb, slots: usize) -> (Runtime, CancelState) {
    let state = CancelState {
        signalled: Default::default(),
        released: Arc::new(tokio::sync::watch::channel(HashSet::new()).0),
    };
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("roles_cancel_q", slots)
        .state(state.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the runtime to LISTEN on lq_cancel",
        "select exists (select 1 from pg_stat_activity
                        where datname = current_database() and query ilike '%listen%lq_cancel%')",
        LIMIT,
    )
    .await;
    (rt, state)
}

/// Any role that can connect may NOTIFY `lq_cancel`: a notification for a job
/// whose row asks for no cancellation is ignored, and a real cancel still works.
#[tokio::test]
async fn a_cancel_notification_the_row_does_not_confirm_is_ignored() {
    let mut roles = Roles::default();
    let nobody = roles.create("lq_nobody", "").await;
    let db = TestDb::new().await;
    let (rt, state) = start_listening(&db, 3).await;
    let spoofed = CancelProbe.enqueue(&db.pool).await.unwrap().id;
    let barrier = CancelProbe.enqueue(&db.pool).await.unwrap().id;
    let released = CancelProbe.enqueue(&db.pool).await.unwrap().id;
    for id in [spoofed, barrier, released] {
        wait_state(&db, id, "running").await;
    }

    // A role with no grants at all sends the cancel notification of two jobs.
    let mut spoofer = PgConnection::connect_with(&options_as(&db, &nobody))
        .await
        .unwrap();
    for id in [spoofed, released] {
        sqlx::query("select pg_notify('lq_cancel', $1)")
            .bind(id.to_string())
            .execute(&mut spoofer)
            .await
            .unwrap();
    }
    spoofer.close().await.unwrap();
    // A real cancel, notified after the spoofs, is acted on after them: once its
    // job has ended, the runtime has seen the spoofs.
    assert_eq!(
        control::cancel(&db.pool, barrier).await.unwrap(),
        JobState::Running
    );
    wait_state(&db, barrier, "cancelled").await;
    assert_eq!(
        *state.signalled.lock().unwrap(),
        HashSet::from([barrier]),
        "only the really cancelled job's handler saw its signal"
    );
    assert_eq!(state_of(&db, spoofed).await, "running");

    state.released.send_modify(|r| {
        r.insert(released);
    });
    wait_state(&db, released, "succeeded").await;

    assert_eq!(
        control::cancel(&db.pool, spoofed).await.unwrap(),
        JobState::Running
    );
    wait_state(&db, spoofed, "cancelled").await;
    assert!(state.signalled.lock().unwrap().contains(&spoofed));
    rt.shutdown().await.unwrap();
    drop(db);
}

/// A flood of forged cancel notifications costs a few statements, not one per
/// notification (each took a pool connection, and logged a warning), and a real
/// cancel sent after the flood still lands.
#[tokio::test]
async fn a_flood_of_forged_cancel_notifications_is_confirmed_in_a_few_statements() {
    const FORGED: u64 = 2000;
    let mut roles = Roles::default();
    let nobody = roles.create("lq_nobody_flood", "").await;
    let db = TestDb::new().await;
    let (rt, state) = start_listening(&db, 2).await;
    let spoofed = CancelProbe.enqueue(&db.pool).await.unwrap().id;
    let real = CancelProbe.enqueue(&db.pool).await.unwrap().id;
    for id in [spoofed, real] {
        wait_state(&db, id, "running").await;
    }
    // Each in a transaction of its own: PostgreSQL folds equal notifications
    // sent in one transaction into one.
    let mut spoofer = PgConnection::connect_with(&options_as(&db, &nobody))
        .await
        .unwrap();
    for _ in 0..FORGED {
        sqlx::query("select pg_notify('lq_cancel', $1)")
            .bind(spoofed.to_string())
            .execute(&mut spoofer)
            .await
            .unwrap();
    }
    spoofer.close().await.unwrap();
    assert_eq!(
        control::cancel(&db.pool, real).await.unwrap(),
        JobState::Running
    );
    wait_state(&db, real, "cancelled").await;

    let stats = rt.stats();
    // At most one check a 100 ms once forged hints were seen: a tenth of the
    // notifications leaves room for 20 s of sending on a slow host.
    assert!(
        (1..=FORGED / 10).contains(&stats.cancel_checks),
        "{} statements confirmed {FORGED} forged notifications and a real one",
        stats.cancel_checks
    );
    // The forged ones, and the real one's own hint when the heartbeat (which
    // reads the same flag) signalled it first and the job had ended by the
    // hint's check.
    assert!(
        (1..=FORGED + 1).contains(&stats.cancel_hints_ignored),
        "{stats:?}"
    );
    assert_eq!(*state.signalled.lock().unwrap(), HashSet::from([real]));
    assert_eq!(state_of(&db, spoofed).await, "running");
    state.released.send_modify(|r| {
        r.insert(spoofed);
    });
    wait_state(&db, spoofed, "succeeded").await;
    rt.shutdown().await.unwrap();
    drop(db);
}
