//! Statements of the cluster: which runtimes are alive, and which one leads.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// What a runtime says about itself in `lq.runtimes`.
#[derive(Debug, Clone)]
pub struct RuntimeRecord<'a> {
    pub id: &'a str,
    pub host: &'a str,
    pub pid: i32,
    pub version: &'a str,
    /// `{"queue": concurrency}`.
    pub queues: &'a serde_json::Value,
    /// `{"queue": limits}` for the queues with limits (`QueueLimits::to_json`).
    pub limits: &'a serde_json::Value,
    pub kinds: &'a [String],
    /// How long the row stays valid without another beat.
    pub ttl_secs: f64,
    /// The most connections the runtime opens of its own
    /// (`RuntimeBuilder::connections`), for `lq doctor` to add up.
    pub connections: i32,
}

/// Writes or refreshes this runtime's row, if it is this runtime's: the row
/// `started_at` names, or a row whose runtime stopped beating, taken over.
/// `started_at` is the runtime's own mark, minted once when it starts (not
/// the server's clock at the first write): a beat whose commit's reply was
/// lost is retried with the same mark and finds its own row, instead of
/// taking it for another runtime's. Returns false when a live runtime with
/// another mark holds the id (two runtimes configured with one `owner`).
pub async fn runtime_beat(
    conn: &mut PgConnection,
    r: &RuntimeRecord<'_>,
    started_at: DateTime<Utc>,
) -> Result<bool, Error> {
    sqlx::query_scalar::<_, bool>(
        "insert into lq.runtimes (id, host, pid, version, queues, kinds, started_at, expires_at, limits,
             connections)
         values ($1, $2, $3, $4, $5, $6, $8, now() + make_interval(secs => $7), $9, $10)
         on conflict (id) do update set heartbeat_at = now(), expires_at = excluded.expires_at,
             queues = excluded.queues, kinds = excluded.kinds, limits = excluded.limits,
             connections = excluded.connections,
             host = excluded.host, pid = excluded.pid, version = excluded.version,
             started_at = excluded.started_at
         where lq.runtimes.started_at = excluded.started_at or lq.runtimes.expires_at < now()
         returning true",
    )
    .bind(r.id)
    .bind(r.host)
    .bind(r.pid)
    .bind(r.version)
    .bind(r.queues)
    .bind(r.kinds)
    .bind(r.ttl_secs)
    .bind(started_at)
    .bind(r.limits)
    .bind(r.connections)
    .fetch_optional(&mut *conn)
    .await
    .map(|written| written.is_some())
    .map_err(err("runtime_beat"))
}

/// Marks this runtime's row (the one `started_at` names) as no longer alive,
/// at shutdown. The row stays until [`runtimes_reap`] removes it: until then it
/// still vouches for the kinds the runtime declared, so a restart does not get
/// its backlog buried as unknown.
pub async fn runtime_leave(
    conn: &mut PgConnection,
    id: &str,
    started_at: DateTime<Utc>,
) -> Result<(), Error> {
    sqlx::query(
        "update lq.runtimes set expires_at = least(expires_at, now())
         where id = $1 and started_at = $2",
    )
    .bind(id)
    .bind(started_at)
    .execute(&mut *conn)
    .await
    .map_err(err("runtime_leave"))?;
    Ok(())
}

/// Deletes the rows of runtimes that stopped beating (or left) more than
/// `keep_secs` ago; returns their ids. The leader keeps them for the
/// unknown-kind grace, so the kinds they declared count that long (see
/// [`super::maintenance::job_bury_unknown_kinds`]).
pub async fn runtimes_reap(conn: &mut PgConnection, keep_secs: f64) -> Result<Vec<String>, Error> {
    sqlx::query_scalar(
        "delete from lq.runtimes where expires_at < now() - make_interval(secs => $1) returning id",
    )
    .bind(keep_secs)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("runtimes_reap"))
}

/// Takes the leader lease for `holder`, or renews it if `holder` has it, for
/// `ttl_secs` of database time, while `holder`'s row in `lq.runtimes` is the
/// one `started_at` names (so of two runtimes given one `owner`, only the one
/// whose row it is can lead). Returns the lease's expiry when `holder` leads
/// now, `None` when another runtime's lease is still valid.
pub async fn leader_acquire(
    conn: &mut PgConnection,
    holder: &str,
    ttl_secs: f64,
    started_at: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, Error> {
    sqlx::query_scalar(
        "insert into lq.leader (name, holder, elected_at, expires_at)
         select 'maintenance', $1, now(), now() + make_interval(secs => $2)
         where exists (select from lq.runtimes where id = $1 and started_at = $3)
         on conflict (name) do update set
             holder = excluded.holder,
             elected_at = case when lq.leader.holder = excluded.holder
                               then lq.leader.elected_at else now() end,
             expires_at = excluded.expires_at
         where lq.leader.holder = excluded.holder or lq.leader.expires_at < now()
         returning expires_at",
    )
    .bind(holder)
    .bind(ttl_secs)
    .bind(started_at)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("leader_acquire"))
}

/// Gives the lease up, if `holder` has it and its row is the one `started_at`
/// names, so another runtime takes over at its next beat instead of after the
/// lease runs out.
pub async fn leader_resign(
    conn: &mut PgConnection,
    holder: &str,
    started_at: DateTime<Utc>,
) -> Result<(), Error> {
    sqlx::query(
        "delete from lq.leader where name = 'maintenance' and holder = $1
           and exists (select from lq.runtimes where id = $1 and started_at = $2)",
    )
    .bind(holder)
    .bind(started_at)
    .execute(&mut *conn)
    .await
    .map_err(err("leader_resign"))?;
    Ok(())
}

/// One row of `lq.runtimes`, with whether it holds a valid leader lease.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RuntimeRow {
    pub id: String,
    pub host: String,
    pub pid: i32,
    pub version: String,
    pub queues: serde_json::Value,
    /// Null for a runtime built before schema 13.
    pub limits: Option<serde_json::Value>,
    pub kinds: Vec<String>,
    /// Null for a runtime built before schema 16.
    pub connections: Option<i32>,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub alive: bool,
    pub leader: bool,
}

/// Every runtime row, oldest first, expired ones included (marked not alive).
pub async fn runtimes_list(conn: &mut PgConnection) -> Result<Vec<RuntimeRow>, Error> {
    sqlx::query_as(
        "select r.id, r.host, r.pid, r.version, r.queues, r.limits, r.kinds, r.connections,
             r.started_at, r.heartbeat_at,
             r.expires_at, r.expires_at >= now() as alive,
             coalesce(l.expires_at >= now(), false) as leader
         from lq.runtimes r
         left join lq.leader l on l.name = 'maintenance' and l.holder = r.id
         order by r.started_at, r.id",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("runtimes_list"))
}

/// The kinds the current leader declares and the queues it serves, if a valid
/// lease and its holder's row exist: it schedules the recurring kinds among the
/// first whose queue is among the second.
pub async fn leader_kinds(
    conn: &mut PgConnection,
) -> Result<Option<(Vec<String>, Vec<String>)>, Error> {
    sqlx::query_as(
        "select r.kinds, array(select pg_catalog.jsonb_object_keys(r.queues)) as queues
         from lq.leader l join lq.runtimes r on r.id = l.holder
         where l.name = 'maintenance' and l.expires_at >= now()",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("leader_kinds"))
}
