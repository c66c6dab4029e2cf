//! Claim rooms (schema version 14): claims waiting for a claim slot queue in a
//! room first, which holds no snapshot, so only the room's holder waits for the
//! slot with one; a role refused the room claims in turn without it.

use std::time::Duration;

use lq_core::db::{self, claim::Turn};
use lq_runtime::{EnqueueOptions, Job, Runtime, RuntimeConfig};
use lq_tests::TestDb;

use crate::{
    claim_slots::{claim_in_turn, hold_slots},
    jobs::{quick, Ledger, Noop},
    roles::{grant, pool_as, Roles, WORKER_GRANTS},
};

const LIMIT: Duration = Duration::from_secs(60);

/// Waiting sessions of this database: `(waits for a room, holds a snapshot)`.
const WAITERS: &str = "select l.locktype = 'relation', a.backend_xmin is not null
     from pg_locks l join pg_stat_activity a on a.pid = l.pid
     where not l.granted
       and l.database = (select oid from pg_database where datname = current_database())
       and (l.locktype = 'advisory'
            or l.relation::regclass::text like 'lq.claim\\_room\\_%')
     order by 1, 2";

/// A query true once `rooms` sessions wait for a claim room and one for a slot.
fn waiting(rooms: usize) -> String {
    format!(
        "select count(*) filter (where l.locktype = 'relation') = {rooms}
            and count(*) filter (where l.locktype = 'advisory') = 1
         from pg_locks l
         where not l.granted
           and l.database = (select oid from pg_database where datname = current_database())"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_waiting_their_turn_queue_in_a_room_and_only_its_holder_holds_a_snapshot() {
    let db = TestDb::new().await;
    let kinds: &'static [String] = Vec::leak(vec!["test.noop".to_owned()]);
    // Each connection waits in its room once with nothing to wait for: a
    // session's first `lock table` looks the room's name up in the catalog,
    // which takes a snapshot; later ones find it cached.
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut conn = db.pool.acquire().await.unwrap();
        let warm = claim_in_turn(&mut conn, kinds, 1, "warm", 0, true)
            .await
            .unwrap();
        assert!(
            matches!(warm, Turn::Claimed(ref jobs) if jobs.is_empty()),
            "{warm:?}"
        );
        conns.push(conn);
    }
    let ids = Noop::enqueue_many(&db.pool, (0..3).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let holder = hold_slots(&db, "default", 1).await;
    let claims: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| {
            tokio::spawn(async move {
                let owner: &'static str = ["a", "b", "c"][i];
                claim_in_turn(&mut conn, kinds, 1, owner, 0, true).await
            })
        })
        .collect();
    db.wait_for(
        "two claims to wait in the room and one for the slot",
        &waiting(2),
        LIMIT,
    )
    .await;
    let waiters: Vec<(bool, bool)> = sqlx::query_as(WAITERS).fetch_all(&db.pool).await.unwrap();
    assert_eq!(
        waiters,
        [(false, true), (true, false), (true, false)],
        "(waits for a room, holds a snapshot) of each waiting session"
    );
    holder.commit().await.unwrap();
    let mut claimed = Vec::new();
    for claim in claims {
        let Turn::Claimed(jobs) = claim.await.unwrap().unwrap() else {
            panic!("claimed once its turn came")
        };
        assert_eq!(jobs.len(), 1);
        claimed.extend(jobs.iter().map(|j| j.id));
    }
    claimed.sort_unstable();
    assert_eq!(claimed, ids, "each claim took a job of its own");
    assert_eq!(db.count("running").await, 3);
}

/// A worker role with docs/roles.md's grants, and every claim room's PUBLIC
/// grant revoked (as a careful DBA might): returns its pool.
async fn worker_without_rooms(db: &TestDb, roles: &mut Roles) -> sqlx::PgPool {
    let worker = roles.create("lq_roomless", "").await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    let revokes: String = (0..db::claim::CLAIM_ROOMS)
        .map(|room| format!("revoke update on lq.claim_room_{room:02} from public;"))
        .collect();
    sqlx::raw_sql(&revokes).execute(&db.pool).await.unwrap();
    pool_as(db, &worker, 10).await
}

#[tokio::test]
async fn a_claim_refused_its_room_claims_nothing_and_claims_in_turn_without_one() {
    let mut roles = Roles::default();
    let db = TestDb::new().await;
    let pool = worker_without_rooms(&db, &mut roles).await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let mut conn = pool.acquire().await.unwrap();
    let refused = claim_in_turn(&mut conn, &kinds, 10, "a", 0, true)
        .await
        .unwrap();
    let Turn::NoRoom(e) = refused else {
        panic!("{refused:?}")
    };
    assert!(lq_core::lacks_grant(&e), "{e}");
    assert_eq!(db.count("queued").await, 1, "nothing claimed");
    let claimed = claim_in_turn(&mut conn, &kinds, 10, "a", 0, false)
        .await
        .unwrap();
    assert!(
        matches!(claimed, Turn::Claimed(ref jobs) if jobs.len() == 1),
        "{claimed:?}"
    );
    // Committed, seen from another session: the refused try left no
    // transaction open on the connection.
    assert_eq!(db.count("running").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_refused_the_rooms_waits_its_turn_without_them_and_runs_every_job() {
    let mut roles = Roles::default();
    let db = TestDb::new().await;
    let pool = worker_without_rooms(&db, &mut roles).await;
    let ledger = Ledger::default();
    let holder = hold_slots(&db, "default", 1).await;
    let ids = Noop::enqueue_many(&db.pool, (0..20).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let rt = Runtime::builder(pool)
        .config(RuntimeConfig {
            claim_slots: Some(1),
            ..quick()
        })
        .queue("default", 4)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();
    // Refused the room, the claim waits for the slot itself.
    db.wait_for(
        "the runtime's claim to wait for the slot",
        "select exists (select from pg_locks where locktype = 'advisory' and not granted
             and database = (select oid from pg_database where datname = current_database()))",
        LIMIT,
    )
    .await;
    assert_eq!(db.count("queued").await, 20);
    holder.commit().await.unwrap();
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let counts = ledger.counts();
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "{counts:?}"
    );
}
