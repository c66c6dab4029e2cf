//! search_path hijacks: functions, set-returning functions, operators and
//! aggregates another role plants in `public`, shadowing `pg_catalog`'s for an
//! unqualified name, never run inside litequeue's statements.

use super::*;

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
