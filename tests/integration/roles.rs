//! Roles and trust: least-privilege roles, privilege and connection checks at
//! start, search_path hijacks, spoofed cancel notifications, schemas squatted by
//! another role, and two applications sharing one database.
//!
//! Roles are cluster-wide: each test makes its own with a random suffix and drops
//! them (best effort) after its database is gone. Every job type here has a queue
//! of its own, served only by the runtimes of the test that uses it.

use std::{
    collections::{BTreeSet, HashSet},
    str::FromStr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use lq_runtime::{
    control, CoreError, EnqueueOptions, Error, Job, JobContext, JobError, JobState, Perform,
    Runtime, RuntimeConfig,
};
use lq_tests::{admin_url, TestDb};
use serde::{Deserialize, Serialize};
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    Connection, PgConnection, PgPool,
};

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(30);

/// The grants of a role that only enqueues (`{role}` is replaced by its name);
/// docs/roles.md shows the same statements.
const PRODUCER_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant insert (kind, queue, priority, payload, run_at, max_attempts, unique_key)
        on lq.jobs to {role};
    grant select (id, kind, unique_key, run_at) on lq.jobs to {role};";

/// Each privilege of [`PRODUCER_GRANTS`] on `lq.jobs`, one at a time, to show that
/// an enqueue needs every one of them.
const PRODUCER_PRIVILEGES: &[&str] = &[
    "insert (kind)",
    "insert (queue)",
    "insert (priority)",
    "insert (payload)",
    "insert (run_at)",
    "insert (max_attempts)",
    "insert (unique_key)",
    "select (id)",
    "select (kind)",
    "select (unique_key)",
    "select (run_at)",
];

/// The grants of a role that runs a runtime; docs/roles.md shows the same.
pub(crate) const WORKER_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant select, insert, update, delete on lq.jobs, lq.finished_jobs to {role};
    grant select, insert, update on lq.cron_schedules to {role};
    grant select, insert, delete on lq.cron_ticks to {role};
    grant select on lq.schema_migrations, lq.queues to {role};
    grant select, insert, update on lq.rate_limits to {role};
    grant select, insert, update, delete on lq.runtimes, lq.leader, lq.stats_minute to {role};
    grant select, insert, delete on lq.id_marks to {role};
    grant usage on sequence lq.jobs_id_seq to {role};";

/// Roles made for one test, dropped when the value drops. Declare it before the
/// test's [`TestDb`], so the database (and what the roles own in it) goes first.
#[derive(Default)]
pub(crate) struct Roles(Vec<String>);

impl Roles {
    /// Creates a login role `{prefix}_{random}` with `options` (such as
    /// `connection limit 3`) and returns its name.
    pub(crate) async fn create(&mut self, prefix: &str, options: &str) -> String {
        let name = format!("{prefix}_{:08x}", fastrand::u32(..));
        let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
        sqlx::raw_sql(&format!("create role {name} login {options}"))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.ok();
        self.0.push(name.clone());
        name
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let drops = self
            .0
            .drain(..)
            .map(|name| format!("drop role if exists {name}"))
            .collect();
        lq_tests::run_as_admin_from_drop(drops);
    }
}

/// Connect options for `db` as `role` (trust authentication: no password).
fn options_as(db: &TestDb, role: &str) -> PgConnectOptions {
    PgConnectOptions::from_str(&db.url).unwrap().username(role)
}

/// A pool on `db` whose connections log in as `role`.
pub(crate) async fn pool_as(db: &TestDb, role: &str, max: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max)
        .connect_with(options_as(db, role))
        .await
        .unwrap()
}

/// Runs `grants` (with `{role}` replaced by `role`) on `pool`.
pub(crate) async fn grant(pool: &PgPool, grants: &str, role: &str) {
    sqlx::raw_sql(&grants.replace("{role}", role))
        .execute(pool)
        .await
        .unwrap();
}

/// The test database's name.
async fn db_name(db: &TestDb) -> String {
    sqlx::query_scalar("select current_database()::text")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Drops schema `lq`, leaving the database as if litequeue never migrated it.
async fn unmigrate(db: &TestDb) {
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Waits until job `id` is in `state`.
async fn wait_state(db: &TestDb, id: i64, state: &str) {
    db.wait_for(
        &format!("job {id} to be {state}"),
        &format!("select exists (select 1 from lq.all_jobs where id = {id} and state = '{state}')"),
        LIMIT,
    )
    .await;
}

/// A job's state, read by the admin.
async fn state_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("select state::text from lq.all_jobs where id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// 1. search_path hijack
// ---------------------------------------------------------------------------

/// What a [`HijackProbe`] does when it runs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
enum Act {
    /// Succeeds.
    Succeed,
    /// Fails until [`HijackState::allow`] is set.
    FailUntilAllowed,
    /// Waits for its cancellation signal.
    WaitForCancel,
}

/// Carries awkward text and nested JSON through every enqueue path.
#[derive(Serialize, Deserialize, Job, Debug, Clone, PartialEq)]
#[job(
    kind = "roles.hijack_probe",
    queue = "roles_hijack_q",
    max_attempts = 1
)]
struct HijackProbe {
    act: Act,
    text: String,
    nested: serde_json::Value,
    n: i64,
}

/// Shared with the [`HijackProbe`] handlers: whether failing probes may succeed.
#[derive(Clone, Default)]
struct HijackState(Arc<AtomicBool>);

impl Perform for HijackProbe {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        match self.act {
            Act::Succeed => Ok(()),
            Act::FailUntilAllowed if ctx.state::<HijackState>().0.load(Ordering::SeqCst) => Ok(()),
            Act::FailUntilAllowed => Err("not allowed yet".into()),
            Act::WaitForCancel => {
                ctx.cancelled().await;
                Err("stopped by its cancellation signal".into())
            }
        }
    }
}

/// A unique job enqueued (delayed) next to the probes; never served.
#[derive(Serialize, Deserialize, Job, Debug, Clone, PartialEq)]
#[job(
    kind = "roles.hijack_unique",
    queue = "roles_hijack_unique_q",
    unique_key = "u:{key}"
)]
struct HijackUnique {
    key: String,
}

impl Perform for HijackUnique {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Functions another role plants in schema `public`, each with the signature
/// PostgreSQL would pick over `pg_catalog`'s for a statement that names it
/// unqualified while `public` is on the search_path: `(label, signature, return
/// type, the pg_catalog expression it stands in for)`.
const TRAP_FUNCTIONS: &[(&str, &str, &str, &str)] = &[
    ("now()", "now()", "timestamptz", "pg_catalog.now()"),
    (
        "make_interval",
        "make_interval(years int4 default 0, months int4 default 0, weeks int4 default 0,
             days int4 default 0, hours int4 default 0, mins int4 default 0,
             secs float8 default 0.0)",
        "interval",
        "pg_catalog.make_interval(years, months, weeks, days, hours, mins, secs)",
    ),
    (
        "array_position(text[], text)",
        "array_position(a text[], e text)",
        "int4",
        "pg_catalog.array_position(a, e)",
    ),
    (
        "jsonb_build_object(text, int4, text, timestamptz, text, text)",
        "jsonb_build_object(a text, b int4, c text, d timestamptz, e text, f text)",
        "jsonb",
        "pg_catalog.jsonb_build_object(a, b, c, d, e, f)",
    ),
    (
        "jsonb_build_array(jsonb)",
        "jsonb_build_array(a jsonb)",
        "jsonb",
        "pg_catalog.jsonb_build_array(a)",
    ),
    (
        "jsonb_path_query_array",
        "jsonb_path_query_array(target jsonb, path jsonpath, vars jsonb default '{}',
             silent boolean default false)",
        "jsonb",
        "pg_catalog.jsonb_path_query_array(target, path, vars, silent)",
    ),
    (
        "gen_random_uuid()",
        "gen_random_uuid()",
        "uuid",
        "pg_catalog.gen_random_uuid()",
    ),
    (
        "pg_notify",
        "pg_notify(c text, p text)",
        "void",
        "pg_catalog.pg_notify(c, p)",
    ),
    (
        "set_config",
        "set_config(n text, v text, l boolean)",
        "text",
        "pg_catalog.set_config(n, v, l)",
    ),
    (
        "current_setting",
        "current_setting(n text)",
        "text",
        "pg_catalog.current_setting(n)",
    ),
    (
        "to_regclass",
        "to_regclass(n text)",
        "regclass",
        "pg_catalog.to_regclass(n)",
    ),
    (
        "has_table_privilege",
        "has_table_privilege(t text, p text)",
        "boolean",
        "pg_catalog.has_table_privilege(t, p)",
    ),
    (
        "has_schema_privilege",
        "has_schema_privilege(s text, p text)",
        "boolean",
        "pg_catalog.has_schema_privilege(s, p)",
    ),
    (
        "has_sequence_privilege",
        "has_sequence_privilege(s text, p text)",
        "boolean",
        "pg_catalog.has_sequence_privilege(s, p)",
    ),
    (
        "pg_get_serial_sequence",
        "pg_get_serial_sequence(t text, c text)",
        "text",
        "pg_catalog.pg_get_serial_sequence(t, c)",
    ),
    (
        "pg_has_role",
        "pg_has_role(r oid, p text)",
        "boolean",
        "pg_catalog.pg_has_role(r, p)",
    ),
    (
        "pg_get_userbyid",
        "pg_get_userbyid(r oid)",
        "name",
        "pg_catalog.pg_get_userbyid(r)",
    ),
];

/// Set-returning functions planted the same way: `(label, signature, element type)`.
const TRAP_SETOF: &[(&str, &str, &str)] = &[
    ("unnest(text[])", "unnest(a text[])", "text"),
    ("unnest(bigint[])", "unnest(a int8[])", "int8"),
];

/// Operators planted the same way: `(operator, left, right, result, the
/// pg_catalog expression over $1 and $2)`.
const TRAP_OPERATORS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "=",
        "text",
        "text",
        "boolean",
        "$1 operator(pg_catalog.=) $2",
    ),
    (
        "<>",
        "text",
        "text",
        "boolean",
        "$1 operator(pg_catalog.<>) $2",
    ),
    (
        "||",
        "text",
        "text",
        "text",
        "$1 operator(pg_catalog.||) $2",
    ),
    (
        "=",
        "name",
        "name",
        "boolean",
        "$1 operator(pg_catalog.=) $2",
    ),
    (
        "=",
        "int8",
        "int8",
        "boolean",
        "$1 operator(pg_catalog.=) $2",
    ),
    ("-", "int8", "int8", "int8", "$1 operator(pg_catalog.-) $2"),
    ("+", "int4", "int4", "int4", "$1 operator(pg_catalog.+) $2"),
    (
        ">",
        "int8",
        "int4",
        "boolean",
        "$1 operator(pg_catalog.>) $2",
    ),
    (
        "=",
        "uuid",
        "uuid",
        "boolean",
        "$1 operator(pg_catalog.=) $2",
    ),
    (
        "||",
        "jsonb",
        "jsonb",
        "jsonb",
        "$1 operator(pg_catalog.||) $2",
    ),
    (
        "+",
        "timestamptz",
        "interval",
        "timestamptz",
        "$1 operator(pg_catalog.+) $2",
    ),
    (
        "-",
        "timestamptz",
        "interval",
        "timestamptz",
        "$1 operator(pg_catalog.-) $2",
    ),
    (
        "-",
        "timestamptz",
        "timestamptz",
        "interval",
        "$1 operator(pg_catalog.-) $2",
    ),
    (
        "<=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "$1 operator(pg_catalog.<=) $2",
    ),
    (
        "<",
        "timestamptz",
        "timestamptz",
        "boolean",
        "$1 operator(pg_catalog.<) $2",
    ),
];

/// Aggregates planted the same way: `(label, signature, state type, state function)`.
/// Each notes itself in its final function, which runs even over no rows.
const TRAP_AGGREGATES: &[(&str, &str, &str, &str, &str)] = &[
    (
        "count(*)",
        "count(*)",
        "int8",
        "pg_catalog.int8inc",
        "initcond = '0',",
    ),
    (
        "array_agg(bigint)",
        "array_agg(int8)",
        "int8[]",
        "pg_catalog.array_append",
        "",
    ),
    (
        "max(integer)",
        "max(int4)",
        "int4",
        "pg_catalog.int4larger",
        "",
    ),
];

/// The label a trap operator notes.
fn operator_label(op: &str, left: &str, right: &str) -> String {
    format!("{op} ({left}, {right})")
}

/// Every trap's label.
fn trap_labels() -> BTreeSet<String> {
    let mut labels: BTreeSet<String> = TRAP_FUNCTIONS.iter().map(|t| t.0.to_owned()).collect();
    labels.extend(TRAP_SETOF.iter().map(|t| t.0.to_owned()));
    labels.extend(
        TRAP_OPERATORS
            .iter()
            .map(|(op, l, r, _, _)| operator_label(op, l, r)),
    );
    labels.extend(TRAP_AGGREGATES.iter().map(|t| t.0.to_owned()));
    labels
}

/// The SQL that plants every trap in `public`. Each trap does what the function
/// it shadows does, so nothing visibly breaks, and notes that it ran: a row in
/// `public.hijack_log` (with the statement), and a step of `public.hijack_seq`,
/// which no rollback undoes.
fn trap_sql() -> String {
    let mut sql = String::from(
        "create sequence public.hijack_seq;
         create table public.hijack_log (what text not null, query text,
             role text not null default current_user);
         grant usage, select, update on sequence public.hijack_seq to public;
         grant insert, select on public.hijack_log to public;
         create function public.hijack_note(what text) returns void language plpgsql volatile
             set search_path = pg_catalog, pg_temp as $t$
         begin
             perform pg_catalog.nextval('public.hijack_seq'::pg_catalog.regclass);
             insert into public.hijack_log (what, query) values (what, pg_catalog.current_query());
         end $t$;\n",
    );
    let function = |signature: &str, returns: &str, label: &str, body: &str| {
        format!(
            "create function public.{signature} returns {returns} language plpgsql volatile
                 set search_path = pg_catalog, pg_temp as $t$
             begin perform public.hijack_note('{label}'); {body}; end $t$;\n"
        )
    };
    for (label, signature, returns, expr) in TRAP_FUNCTIONS {
        let body = if *returns == "void" {
            format!("perform {expr}")
        } else {
            format!("return {expr}")
        };
        sql += &function(signature, returns, label, &body);
    }
    for (label, signature, element) in TRAP_SETOF {
        sql += &function(
            signature,
            &format!("setof {element}"),
            label,
            "return query select pg_catalog.unnest(a)",
        );
    }
    for (i, (op, left, right, result, expr)) in TRAP_OPERATORS.iter().enumerate() {
        let label = operator_label(op, left, right);
        sql += &function(
            &format!("trap_op_{i}({left}, {right})"),
            result,
            &label,
            &format!("return {expr}"),
        );
        sql += &format!(
            "create operator public.{op} (leftarg = {left}, rightarg = {right},
                 function = public.trap_op_{i});\n"
        );
    }
    for (i, (label, signature, stype, sfunc, init)) in TRAP_AGGREGATES.iter().enumerate() {
        sql += &function(
            &format!("trap_agg_final_{i}(s {stype})"),
            stype,
            label,
            "return s",
        );
        sql += &format!(
            "create aggregate public.{signature} (sfunc = {sfunc}, stype = {stype}, {init}
                 finalfunc = public.trap_agg_final_{i});\n"
        );
    }
    sql
}

/// A statement naming each trap unqualified, to show the traps are armed for a
/// statement that does not pin its names.
const NAIVE_STATEMENTS: &[&str] = &[
    "select now()",
    "select make_interval(secs => 1.5)",
    "select array_position('{a}'::text[], 'a'::text)",
    "select jsonb_build_object('a'::text, 1, 'b'::text, now(), 'c'::text, 'd'::text)",
    "select jsonb_build_array('{}'::jsonb)",
    "select jsonb_path_query_array('[1]'::jsonb, '$[0]')",
    "select gen_random_uuid()",
    "select pg_notify('roles_nobody_listens', 'x')",
    "select set_config('application_name', 'naive', false)",
    "select current_setting('search_path')",
    "select to_regclass('lq.jobs')",
    "select has_table_privilege('lq.jobs', 'SELECT')",
    "select has_schema_privilege('lq', 'USAGE')",
    "select has_sequence_privilege('lq.jobs_id_seq', 'USAGE')",
    "select pg_get_serial_sequence('lq.jobs', 'id')",
    "select pg_has_role(10::oid, 'MEMBER')",
    "select pg_get_userbyid(10::oid)",
    "select unnest('{a}'::text[])",
    "select unnest('{1}'::int8[])",
    "select 'a'::text = 'b'::text, 'a'::text <> 'b'::text, 'a'::text || 'b'::text",
    "select 'a'::name = 'b'::name, 1::int8 = 2::int8, 2::int8 - 1::int8, 1 + 1, 2::int8 > 1",
    "select gen_random_uuid() = gen_random_uuid(), '{}'::jsonb || '{}'::jsonb",
    "select now() + '1s'::interval, now() - '1s'::interval, now() - now()",
    "select now() <= now(), now() < now()",
    "select count(*), array_agg(1::int8), max(1) from (values (1)) v",
];

/// Trap notes so far: `(what, query, role)` rows, and the sequence's position.
async fn hijack_notes(db: &TestDb) -> (Vec<(String, String, String)>, i64) {
    let rows = sqlx::query_as("select what, coalesce(query, ''), role from public.hijack_log")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let seq = sqlx::query_scalar("select last_value from public.hijack_seq")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    (rows, seq)
}

/// An application whose connections put `public` before `pg_catalog` on the
/// search_path, where another role has planted look-alike functions and
/// operators: enqueue (one, many, unique, in a transaction and on the pool),
/// migrate, a runtime and every control call run none of them, and payloads
/// arrive unchanged.
#[tokio::test]
async fn a_hostile_search_path_runs_no_function_of_another_role() {
    let mut roles = Roles::default();
    let evil = roles.create("lq_evil", "").await;
    let db = TestDb::new().await;
    sqlx::raw_sql("grant create on schema public to public")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut planter = PgConnection::connect_with(&options_as(&db, &evil))
        .await
        .unwrap();
    sqlx::raw_sql(&trap_sql())
        .execute(&mut planter)
        .await
        .unwrap();
    planter.close().await.unwrap();

    // The application: a superuser whose every connection searches public first.
    let app_options = PgConnectOptions::from_str(&db.url)
        .unwrap()
        .options([("search_path", "public,pg_catalog")]);
    let app = PgPoolOptions::new()
        .max_connections(6)
        .connect_with(app_options)
        .await
        .unwrap();
    let path: String = sqlx::query_scalar("show search_path")
        .fetch_one(&app)
        .await
        .unwrap();
    assert_eq!(path.replace(' ', ""), "public,pg_catalog");

    // The traps are armed: a statement that names them unqualified runs each one.
    for statement in NAIVE_STATEMENTS {
        sqlx::query(statement).execute(&app).await.unwrap();
    }
    let (armed, _) = hijack_notes(&db).await;
    let armed: BTreeSet<String> = armed.into_iter().map(|(what, _, _)| what).collect();
    assert_eq!(
        armed,
        trap_labels(),
        "every trap runs for a naive statement"
    );
    sqlx::raw_sql("delete from public.hijack_log")
        .execute(&db.pool)
        .await
        .unwrap();
    let (_, seq_before) = hijack_notes(&db).await;

    // Everything litequeue does for the application, on its connections.
    lq_runtime::migrate(&app).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&app).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    let allow = HijackState::default();
    let rt = Runtime::builder(app.clone())
        .config(quick())
        .queue("roles_hijack_q", 4)
        .state(allow.clone())
        .start()
        .await
        .unwrap();

    let probe = |act: Act, n: i64| {
        HijackProbe {
        act,
        text: format!("it's a \"quote\" \\ back\\slash, é ✓ 😀, tab\t, newline\n #{n} $1 %s '; drop table lq.jobs; --"),
        nested: serde_json::json!({"a": [1, 2.5, null, true, "x"], "b": {"c": {"d": []}}, "big": i64::MAX, "n": n}),
        n,
    }
    };
    let mut sent: Vec<(i64, HijackProbe)> = Vec::new();
    let mut tx = app.begin().await.unwrap();
    let one = probe(Act::Succeed, 1);
    sent.push((one.enqueue(&mut tx).await.unwrap().id, one));
    tx.commit().await.unwrap();
    let two = probe(Act::Succeed, 2);
    sent.push((two.enqueue(&app).await.unwrap().id, two));
    let many: Vec<HijackProbe> = (3..6).map(|n| probe(Act::Succeed, n)).collect();
    let done = HijackProbe::enqueue_many(&app, many.clone(), EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!(done.ids.len(), 3);
    sent.extend(done.ids.iter().copied().zip(many));
    let mut tx = app.begin().await.unwrap();
    let more: Vec<HijackProbe> = (6..8).map(|n| probe(Act::Succeed, n)).collect();
    let done = HijackProbe::enqueue_many(&mut tx, more.clone(), EnqueueOptions::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sent.extend(done.ids.iter().copied().zip(more));
    let failing = probe(Act::FailUntilAllowed, 8);
    let failing_id = failing.enqueue(&app).await.unwrap().id;
    let waiting = probe(Act::WaitForCancel, 9);
    let waiting_id = waiting.enqueue(&app).await.unwrap().id;

    // Unique keys, single and bulk, in a transaction and on the pool; delayed, so
    // they stay live.
    let later = || EnqueueOptions::new().delay(Duration::from_secs(3600));
    let unique = |key: &str| HijackUnique {
        key: key.to_owned(),
    };
    let mut tx = app.begin().await.unwrap();
    let first = unique("a").enqueue_with(&mut tx, later()).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!first.existing);
    let again = unique("a").enqueue_with(&app, later()).await.unwrap();
    assert_eq!((again.id, again.existing), (first.id, true));
    let bulk = HijackUnique::enqueue_many(&app, ["b", "a", "c"].map(unique), later())
        .await
        .unwrap();
    assert_eq!((bulk.ids.len(), bulk.skipped), (2, 1));
    let unique_ids: Vec<i64> = [first.id].into_iter().chain(bulk.ids).collect();

    for (id, _) in &sent {
        wait_state(&db, *id, "succeeded").await;
    }
    wait_state(&db, failing_id, "dead").await;
    wait_state(&db, waiting_id, "running").await;

    for (id, job) in &sent {
        let row = control::get(&app, *id).await.unwrap();
        assert_eq!(row.state, JobState::Succeeded);
        assert_eq!(&row.payload_as::<HijackProbe>().unwrap(), job);
        let stored: bool =
            sqlx::query_scalar("select payload = $2::jsonb from lq.all_jobs where id = $1")
                .bind(id)
                .bind(serde_json::to_string(job).unwrap())
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert!(stored, "job {id}'s payload changed");
    }
    let dead = control::get(&app, failing_id).await.unwrap();
    assert_eq!(dead.payload_as::<HijackProbe>().unwrap(), failing);
    assert_eq!(dead.errors[0].attempt, 1);
    assert_eq!(dead.errors[0].error, "not allowed yet");
    let listed = control::list(
        &app,
        &lq_runtime::JobFilter::new()
            .state(JobState::Dead)
            .queue("roles_hijack_q"),
        10,
    )
    .await
    .unwrap();
    assert_eq!(
        listed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![failing_id]
    );

    assert_eq!(
        control::cancel(&app, waiting_id).await.unwrap(),
        JobState::Running
    );
    wait_state(&db, waiting_id, "cancelled").await;
    assert_eq!(
        control::get(&app, waiting_id)
            .await
            .unwrap()
            .payload_as::<HijackProbe>()
            .unwrap(),
        waiting
    );

    // The retried job succeeds this time.
    allow.0.store(true, Ordering::SeqCst);
    control::retry_now(&app, failing_id).await.unwrap();
    wait_state(&db, failing_id, "succeeded").await;
    rt.shutdown().await.unwrap();

    for id in &unique_ids {
        assert_eq!(control::cancel(&app, *id).await.unwrap(), JobState::Queued);
        assert_eq!(
            control::get(&app, *id).await.unwrap().state,
            JobState::Cancelled
        );
    }
    let all = control::list(&app, &lq_runtime::JobFilter::new(), 100)
        .await
        .unwrap();
    assert_eq!(all.len(), sent.len() + 2 + unique_ids.len());
    control::oldest_transaction_age(&app).await.unwrap();
    // A recurring job fired by hand on the application's connection.
    let mut conn = app.acquire().await.unwrap();
    let schedule = lq_runtime::cron::Schedule::parse("* * * * * *", "UTC").unwrap();
    for now in ["2030-01-01T00:00:00.500Z", "2030-01-01T00:00:01.500Z"] {
        lq_runtime::cron::fire_due(
            &mut conn,
            crate::cron::EverySecond::KIND,
            &crate::cron::EverySecond::OPTIONS,
            &schedule,
            lq_runtime::CatchUp::Once,
            "null",
            Some(now.parse().unwrap()),
        )
        .await
        .unwrap();
    }
    drop(conn);

    let (notes, seq_after) = hijack_notes(&db).await;
    assert!(
        notes.is_empty() && seq_after == seq_before,
        "functions of another role ran in litequeue's statements ({} times): {notes:#?}",
        seq_after - seq_before
    );
    drop(app);
    drop(db);
}

// ---------------------------------------------------------------------------
// 2. and 3. migrate and the schema's owner
// ---------------------------------------------------------------------------

/// A role that got to create schema `lq` first is not trusted: `migrate()` by
/// another role refuses to build in it, naming its owner, whether or not the
/// squatter lets others into the schema, and leaves it empty.
#[tokio::test]
async fn migrate_refuses_a_schema_owned_by_another_role() {
    let mut roles = Roles::default();
    let squatter = roles.create("lq_squatter", "").await;
    let app = roles.create("lq_app", "").await;
    let db = TestDb::new().await;
    unmigrate(&db).await;
    let name = db_name(&db).await;
    sqlx::raw_sql(&format!(
        "grant create on database {name} to {squatter}, {app}"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let squatter_pool = pool_as(&db, &squatter, 1).await;
    let app_pool = pool_as(&db, &app, 2).await;
    sqlx::raw_sql("create schema lq")
        .execute(&squatter_pool)
        .await
        .unwrap();

    for (how, setup) in [
        ("open to all", "grant usage, create on schema lq to public"),
        ("closed", "revoke all on schema lq from public"),
    ] {
        sqlx::raw_sql(setup).execute(&squatter_pool).await.unwrap();
        let err = lq_runtime::migrate(&app_pool).await.unwrap_err();
        assert!(
            matches!(&err, CoreError::SchemaNotOwned { owner } if *owner == squatter),
            "schema lq {how}: expected SchemaNotOwned {{ owner: {squatter:?} }}, got {err:?}"
        );
        let objects: i64 = sqlx::query_scalar(
            "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace
             where n.nspname = 'lq'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(objects, 0, "schema lq {how}: migrate created objects in it");
    }

    // A squatter's version table that claims to be current, as a view over a
    // function of the squatter's: reading it would run that function as the
    // reader. Neither migrate() nor a runtime's start reads it.
    sqlx::raw_sql(&format!(
        "create table lq.calls (who text);
         grant insert on lq.calls to public;
         create function lq.claimed_version() returns int language sql
             as 'insert into lq.calls values (current_user) returning {}';
         create view lq.schema_migrations as select lq.claimed_version() as version;
         grant select on lq.schema_migrations to public;",
        lq_runtime::SCHEMA_VERSION
    ))
    .execute(&squatter_pool)
    .await
    .unwrap();
    let err = lq_runtime::migrate(&app_pool).await.unwrap_err();
    assert!(
        matches!(&err, CoreError::SchemaTampered { what } if what.contains("\"v\"")),
        "{err:?}"
    );
    let started = Runtime::builder(app_pool.clone())
        .queue("default", 1)
        .start()
        .await;
    assert!(
        started.is_err(),
        "a runtime started on the squatter's schema"
    );
    let calls: i64 = sqlx::query_scalar("select count(*) from lq.calls")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(calls, 0, "the squatter's function ran");
    drop((squatter_pool, app_pool));
    drop(db);
}

/// On a schema already at the current version `migrate()` only reads: a role with
/// no CREATE anywhere, only USAGE on `lq` and SELECT on its version table, may
/// call it at start-up.
#[tokio::test]
async fn migrate_at_the_current_version_needs_no_create_privilege() {
    let mut roles = Roles::default();
    let reader = roles.create("lq_reader", "").await;
    let db = TestDb::new().await; // migrated by the superuser
    let name = db_name(&db).await;
    sqlx::raw_sql(&format!(
        "revoke all on database {name} from public;
         grant connect on database {name} to {reader};
         grant usage on schema lq to {reader};
         grant select on lq.schema_migrations to {reader};"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = pool_as(&db, &reader, 2).await;
    let may_create: (bool, bool) = sqlx::query_as(
        "select has_database_privilege(current_database(), 'CREATE'),
                has_schema_privilege('lq', 'CREATE')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(may_create, (false, false));
    lq_runtime::migrate(&pool).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    drop(pool);
    drop(db);
}

// ---------------------------------------------------------------------------
// 4. spoofed cancel notifications
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// 5. least-privilege roles
// ---------------------------------------------------------------------------

/// Succeeds, or always fails when `fail`.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.least", queue = "roles_least_q", max_attempts = 2, backoff = fixed("10ms"))]
struct Least {
    n: u32,
    fail: bool,
}

impl Perform for Least {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        if self.fail {
            return Err(format!("least {} fails", self.n).into());
        }
        Ok(())
    }
}

/// Has a unique key.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "roles.least_unique",
    queue = "roles_least_q",
    unique_key = "lu:{n}"
)]
struct LeastUnique {
    n: u32,
}

impl Perform for LeastUnique {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The schema's owner applies a later release's migration without CREATE on
/// the database, which it needed only to create the schema (docs/roles.md); a
/// worker that starts first is told to let the owner migrate.
#[tokio::test]
async fn the_schemas_owner_migrates_a_later_release_without_create_on_the_database() {
    let mut roles = Roles::default();
    let migrator = roles.create("lq_migrator", "").await;
    let worker = roles.create("lq_worker", "").await;
    let db = TestDb::new().await;
    unmigrate(&db).await;
    let name = db_name(&db).await;
    let database_grant = |verb: &str| {
        format!(
            "{verb} create on database {name} {} {migrator}",
            if verb == "grant" { "to" } else { "from" }
        )
    };
    sqlx::raw_sql(&database_grant("grant"))
        .execute(&db.pool)
        .await
        .unwrap();
    let migrator_pool = pool_as(&db, &migrator, 1).await;
    lq_runtime::migrate(&migrator_pool).await.unwrap();
    grant(&migrator_pool, WORKER_GRANTS, &worker).await;
    let worker_pool = pool_as(&db, &worker, 1).await;
    sqlx::raw_sql(&database_grant("revoke"))
        .execute(&db.pool)
        .await
        .unwrap();
    // A release with one more migration: the last one (the history pruned by
    // id), not applied yet.
    crate::prune_marks::back_to_version_14(&db).await;
    let early = lq_runtime::migrate(&worker_pool).await.unwrap_err();
    assert!(
        matches!(&early, CoreError::SchemaBehind { owner, .. } if *owner == migrator),
        "{early:?}"
    );
    lq_runtime::migrate(&migrator_pool).await.unwrap();
    // The worker, who prunes the history, was given the new table's grants.
    let marks_granted: bool = sqlx::query_scalar(&format!(
        "select has_table_privilege('{worker}', 'lq.id_marks', 'insert')"
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(marks_granted, "the pending migration was applied");
    lq_runtime::migrate(&worker_pool).await.unwrap();
    drop((migrator_pool, worker_pool));
    drop(db);
}

/// Three roles, none a superuser or the tables' owner but the migrator: the
/// migrator builds the schema and grants exactly docs/roles.md's privileges, the
/// producer enqueues every way, and the worker's runtime runs every job to its end.
#[tokio::test]
async fn least_privilege_migrator_producer_and_worker_run_every_job() {
    let mut roles = Roles::default();
    let migrator = roles.create("lq_migrator", "").await;
    let producer = roles.create("lq_producer", "").await;
    let worker = roles.create("lq_worker", "").await;
    let db = TestDb::new().await;
    unmigrate(&db).await;
    let name = db_name(&db).await;
    sqlx::raw_sql(&format!("grant create on database {name} to {migrator}"))
        .execute(&db.pool)
        .await
        .unwrap();
    let migrator_pool = pool_as(&db, &migrator, 2).await;
    lq_runtime::migrate(&migrator_pool).await.unwrap();
    let owner: String =
        sqlx::query_scalar("select nspowner::regrole::text from pg_namespace where nspname = 'lq'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(owner, migrator);
    let sequence: String = sqlx::query_scalar("select pg_get_serial_sequence('lq.jobs', 'id')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(sequence, "lq.jobs_id_seq", "the name WORKER_GRANTS uses");
    grant(&migrator_pool, PRODUCER_GRANTS, &producer).await;
    grant(&migrator_pool, WORKER_GRANTS, &worker).await;

    let producer_pool = pool_as(&db, &producer, 2).await;
    let worker_pool = pool_as(&db, &worker, 2).await;
    // The worker may call migrate() at start-up: the schema is current.
    lq_runtime::migrate(&worker_pool).await.unwrap();

    // Each of the producer's privileges is needed by an enqueue of a unique job
    // inside a transaction (the statement that also decides the NOTIFY).
    for privilege in PRODUCER_PRIVILEGES {
        sqlx::raw_sql(&format!("revoke {privilege} on lq.jobs from {producer}"))
            .execute(&migrator_pool)
            .await
            .unwrap();
        let mut tx = producer_pool.begin().await.unwrap();
        let err = LeastUnique { n: 999 }.enqueue(&mut tx).await.unwrap_err();
        tx.rollback().await.unwrap();
        assert!(
            err.to_string().contains("permission denied")
                || lq_runtime::chain(&err).contains("permission denied"),
            "without {privilege}: {}",
            lq_runtime::chain(&err)
        );
        sqlx::raw_sql(&format!("grant {privilege} on lq.jobs to {producer}"))
            .execute(&migrator_pool)
            .await
            .unwrap();
    }

    let mut ids = Vec::new();
    let mut tx = producer_pool.begin().await.unwrap();
    ids.push(
        Least { n: 1, fail: false }
            .enqueue(&mut tx)
            .await
            .unwrap()
            .id,
    );
    tx.commit().await.unwrap();
    ids.push(
        Least { n: 2, fail: false }
            .enqueue(&producer_pool)
            .await
            .unwrap()
            .id,
    );
    let many = (3..6).map(|n| Least { n, fail: false });
    ids.extend(
        Least::enqueue_many(&producer_pool, many, EnqueueOptions::new())
            .await
            .unwrap()
            .ids,
    );
    // An enqueuer's own connections log in as the pool's role; calls made
    // together may share a statement.
    let enqueuer = lq_runtime::Enqueuer::new(&producer_pool);
    let shared: Vec<_> = (6..9).map(|n| Least { n, fail: false }).collect();
    for done in futures_util::future::join_all(shared.iter().map(|j| j.enqueue(&enqueuer))).await {
        ids.push(done.unwrap().id);
    }
    // Unique keys: one held while queued (the worker is not running yet).
    let first = LeastUnique { n: 1 }.enqueue(&producer_pool).await.unwrap();
    let dup = LeastUnique { n: 1 }.enqueue(&producer_pool).await.unwrap();
    assert_eq!((dup.id, dup.existing), (first.id, true));
    let bulk = LeastUnique::enqueue_many(
        &producer_pool,
        [2, 1, 3].map(|n| LeastUnique { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!((bulk.ids.len(), bulk.skipped), (2, 1));
    ids.push(first.id);
    ids.extend(bulk.ids);
    let doomed = Least { n: 9, fail: true }
        .enqueue(&producer_pool)
        .await
        .unwrap()
        .id;
    // The producer reads nothing but the columns its enqueue needs.
    let read = sqlx::query("select payload from lq.jobs")
        .execute(&producer_pool)
        .await;
    assert!(read.is_err(), "the producer may read payloads");

    let rt = Runtime::builder(worker_pool.clone())
        .config(quick())
        .queue("roles_least_q", 4)
        .start()
        .await
        .unwrap();
    for id in &ids {
        wait_state(&db, *id, "succeeded").await;
    }
    wait_state(&db, doomed, "dead").await;
    let errors: serde_json::Value =
        sqlx::query_scalar("select errors from lq.all_jobs where id = $1")
            .bind(doomed)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(errors.as_array().map(Vec::len), Some(2), "{errors}");
    let owners: Vec<Option<String>> =
        sqlx::query_scalar("select distinct lease_owner from lq.all_jobs")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(owners, vec![Some(rt.owner().to_owned())]);

    // Job control as the worker, once it may read lq.all_jobs too.
    sqlx::raw_sql(&format!("grant select on lq.all_jobs to {worker}"))
        .execute(&migrator_pool)
        .await
        .unwrap();
    let dead = control::list(
        &worker_pool,
        &lq_runtime::JobFilter::new().state(JobState::Dead),
        10,
    )
    .await
    .unwrap();
    assert_eq!(dead.iter().map(|r| r.id).collect::<Vec<_>>(), vec![doomed]);
    control::retry_now(&worker_pool, doomed).await.unwrap();
    wait_state(&db, doomed, "dead").await;
    let late = Least { n: 10, fail: false }
        .enqueue_with(
            &producer_pool,
            EnqueueOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;
    assert_eq!(
        control::cancel(&worker_pool, late).await.unwrap(),
        JobState::Queued
    );
    assert_eq!(
        control::get(&worker_pool, late).await.unwrap().state,
        JobState::Cancelled
    );
    rt.shutdown().await.unwrap();
    drop((migrator_pool, producer_pool, worker_pool));
    drop(db);
}

// ---------------------------------------------------------------------------
// 6. and 7. checks at start
// ---------------------------------------------------------------------------

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
            assert!(needed > limit, "needed {needed}");
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
// 8. two applications in one database
// ---------------------------------------------------------------------------

/// Application A's job.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.app_a", queue = "app_a_q")]
struct AppA {
    n: u32,
}

impl Perform for AppA {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Application B's job.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.app_b", queue = "app_b_q")]
struct AppB {
    n: u32,
}

impl Perform for AppB {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Settings that claim and bury unknown kinds at once.
fn eager() -> RuntimeConfig {
    RuntimeConfig {
        rescue_interval: Duration::from_millis(50),
        unknown_kind_grace: Some(Duration::from_millis(1)),
        ..quick()
    }
}

/// Inserts a queued job of a kind no type in this binary declares (a job of the
/// other application's binary) on `queue`.
async fn insert_foreign(db: &TestDb, queue: &str) -> i64 {
    sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         values ('roles.only_in_another_binary', $1, '{}', 1) returning id",
    )
    .bind(queue)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Two applications share a database with queues of their own: each runtime claims
/// only jobs on its queues (though this binary could run both kinds), and buries
/// unknown kinds only on its queues, never the other's jobs.
#[tokio::test]
async fn two_applications_in_one_database_keep_to_their_queues() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    // B's work first, then A's: A's claims see B's jobs waiting.
    let b_ids = AppB::enqueue_many(&db.pool, (0..5).map(|n| AppB { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let b_foreign = insert_foreign(&db, "app_b_q").await;
    let a_ids = AppA::enqueue_many(&db.pool, (0..5).map(|n| AppA { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let a_foreign = insert_foreign(&db, "app_a_q").await;

    let rt_a = Runtime::builder(db.pool.clone())
        .config(eager())
        .queue("app_a_q", 10)
        .start()
        .await
        .unwrap();
    for id in &a_ids {
        wait_state(&db, *id, "succeeded").await;
    }
    // A's unknown-kind check buried the foreign job on its own queue; the same
    // statement saw B's foreign job, queued as long, and left it.
    wait_state(&db, a_foreign, "dead").await;
    assert_eq!(state_of(&db, b_foreign).await, "queued");
    for id in &b_ids {
        assert_eq!(state_of(&db, *id).await, "queued", "A touched B's job {id}");
    }
    let a_owner = rt_a.owner().to_owned();
    rt_a.shutdown().await.unwrap();

    // Now B alone, with fresh work of A's waiting.
    let a_late = AppA::enqueue_many(&db.pool, (5..8).map(|n| AppA { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let a_late_foreign = insert_foreign(&db, "app_a_q").await;
    let rt_b = Runtime::builder(db.pool.clone())
        .config(eager())
        .queue("app_b_q", 10)
        .start()
        .await
        .unwrap();
    for id in &b_ids {
        wait_state(&db, *id, "succeeded").await;
    }
    wait_state(&db, b_foreign, "dead").await;
    for id in a_late.iter().chain([&a_late_foreign]) {
        assert_eq!(state_of(&db, *id).await, "queued", "B touched A's job {id}");
    }
    let b_owner = rt_b.owner().to_owned();
    rt_b.shutdown().await.unwrap();
    assert_ne!(a_owner, b_owner);

    let owner_of = |ids: Vec<i64>| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "select lease_owner from lq.all_jobs where id = any($1) order by id",
            )
            .bind(ids)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        owner_of(a_ids.clone()).await,
        vec![Some(a_owner.clone()); a_ids.len()]
    );
    assert_eq!(
        owner_of(b_ids.clone()).await,
        vec![Some(b_owner.clone()); b_ids.len()]
    );
    let buried: Vec<(i64, String)> = sqlx::query_as(
        "select id, errors->0->>'error' from lq.all_jobs where state = 'dead' order by id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        buried.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![b_foreign, a_foreign]
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    for (id, error) in &buried {
        let queue = if *id == a_foreign {
            "app_a_q"
        } else {
            "app_b_q"
        };
        assert!(error.contains(queue), "job {id}: {error}");
    }
}

// ---------------------------------------------------------------------------
// 9. what a non-owner worker cannot do, it says
// ---------------------------------------------------------------------------

/// With autovacuum off on `lq.jobs`, a worker that does not own the table cannot
/// vacuum it either: nothing would, so the runtime says so at its first check.
#[tokio::test]
async fn a_worker_that_cannot_vacuum_warns_when_autovacuum_is_off() {
    lq_tests::init_tracing();
    let mut roles = Roles::default();
    let worker = roles.create("lq_novac", "").await;
    let db = TestDb::new().await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    sqlx::raw_sql("alter table lq.jobs set (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    let pool = pool_as(&db, &worker, 2).await;
    let rt = Runtime::builder(pool.clone())
        .config(quick())
        .queue("roles_vacuum_q", 1)
        .start()
        .await
        .unwrap();
    let warned = lq_tests::logs::wait_logged(1, LIMIT, |e| {
        e.target == "lq_runtime::vacuumer"
            && e.field("table") == Some("lq.jobs")
            && e.message.contains("does not own it")
    })
    .await;
    assert!(
        warned[0].message.contains("autovacuum is off"),
        "{warned:#?}"
    );
    rt.shutdown().await.unwrap();
    drop(pool);
    drop(db);
}

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
/// their own, and every job on every queue succeeds. (Before, 150 queues on a
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
    let rt = builder.start().await.unwrap();
    for id in &ids {
        wait_state(&db, *id, "succeeded").await;
    }
    rt.shutdown().await.unwrap();
    drop(pool);
    drop(db);
}
