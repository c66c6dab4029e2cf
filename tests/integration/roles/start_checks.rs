//! A role's limits at start: `start()` names the privileges its role lacks and
//! refuses a connection limit too low for its pool, and a tight limit that is
//! enough runs every job.

use super::*;

/// `start()` names each privilege its role lacks.
#[tokio::test]
async fn start_names_the_privileges_its_role_lacks() {
    let mut roles = Roles::default();
    let no_update = roles.create("lq_no_update", "").await;
    let nothing = roles.create("lq_nothing", "").await;
    let db = TestDb::new().await;
    grant(&db.pool, WORKER_GRANTS, &no_update).await;
    sqlx::raw_sql(&format!("revoke update on lq.jobs from {no_update}"))
        .execute(&db.pool)
        .await
        .unwrap();

    for (role, expected) in [
        (&no_update, vec!["UPDATE on lq.jobs".to_owned()]),
        (&nothing, vec!["USAGE on schema lq".to_owned()]),
    ] {
        let pool = pool_as(&db, role, 2).await;
        let started = Runtime::builder(pool)
            .config(quick())
            .queue("roles_privileges_q", 1)
            .start()
            .await;
        match started {
            Err(Error::MissingPrivileges {
                role: named,
                missing,
            }) => {
                assert_eq!(&named, role);
                for privilege in &expected {
                    assert!(missing.contains(privilege), "{role}: {missing:?}");
                }
                if role == &no_update {
                    assert_eq!(missing, expected, "{role} lacks only UPDATE on lq.jobs");
                }
            }
            Err(e) => panic!("{role}: expected MissingPrivileges {expected:?}, got {e:?}"),
            Ok(rt) => {
                rt.shutdown().await.ok();
                panic!("{role}: the runtime started")
            }
        }
    }
    drop(db);
}

/// A role whose connection limit can never hold the runtime's connections is
/// refused at start; the same role without the limit starts.
#[tokio::test]
async fn start_refuses_a_role_whose_connection_limit_is_too_low() {
    let mut roles = Roles::default();
    let worker = roles.create("lq_limited", "connection limit 3").await;
    let db = TestDb::new().await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    let pool = pool_as(&db, &worker, 2).await;
    let started = Runtime::builder(pool.clone())
        .config(quick())
        .queue("roles_limit_q", 1)
        .start()
        .await;
    match started {
        Err(Error::NotEnoughConnections { needed, limit }) => {
            assert_eq!(limit, 3);
            let builder = Runtime::builder(pool.clone()).queue("roles_limit_q", 1);
            assert_eq!(
                needed,
                builder.connections(),
                "the count operators are told"
            );
        }
        Err(e) => panic!("expected NotEnoughConnections, got {e:?}"),
        Ok(rt) => {
            rt.shutdown().await.ok();
            panic!("the runtime started under a connection limit of 3")
        }
    }

    sqlx::raw_sql(&format!("alter role {worker} connection limit -1"))
        .execute(&db.pool)
        .await
        .unwrap();
    let rt = Runtime::builder(pool.clone())
        .config(quick())
        .queue("roles_limit_q", 1)
        .start()
        .await
        .unwrap();
    rt.shutdown().await.unwrap();
    drop(pool);
    drop(db);
}

// ---------------------------------------------------------------------------

/// Any kind's job, sent to one of many queues by `EnqueueOptions::queue`.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.many_queues", queue = "roles_many_0")]
struct ManyQueues {
    n: u32,
}

impl Perform for ManyQueues {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Forty queues under a role allowed 42 connections: claimers beyond the sixteenth
/// share connections instead of each holding one, the completer and heartbeat have
/// their own, every job on every queue succeeds, and the runtime holds no more
/// connections than `RuntimeBuilder::connections` says. (Before, 150 queues on a
/// 100-connection server claimed 96 jobs and finished none.)
#[tokio::test]
async fn forty_queues_within_a_tight_connection_limit_run_every_job() {
    let mut roles = Roles::default();
    let worker = roles.create("lq_manyq", "connection limit 42").await;
    let db = TestDb::new().await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    let queues: Vec<String> = (0..40).map(|i| format!("roles_many_{i}")).collect();
    let mut ids = Vec::new();
    for (i, queue) in queues.iter().enumerate() {
        for n in 0..5 {
            let job = ManyQueues {
                n: i as u32 * 10 + n,
            };
            let opts = EnqueueOptions::new().queue(queue.clone());
            ids.push(job.enqueue_with(&db.pool, opts).await.unwrap().id);
        }
    }
    let pool = pool_as(&db, &worker, 2).await;
    let mut builder = Runtime::builder(pool.clone()).config(quick());
    for queue in &queues {
        builder = builder.queue(queue.clone(), 2);
    }
    let most = builder.connections();
    let rt = builder.start().await.unwrap();
    for id in &ids {
        wait_state(&db, *id, "succeeded").await;
    }
    // What `RuntimeBuilder::connections` promises operators: the runtime's own,
    // besides the application pool's (2 here), after every queue has claimed.
    let open: i64 = sqlx::query_scalar("select count(*) from pg_stat_activity where usename = $1")
        .bind(&worker)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        open <= i64::from(most) + 2,
        "{open} sessions, the builder said at most {most} + the pool's 2"
    );
    rt.shutdown().await.unwrap();
    drop(pool);
    drop(db);
}
