//! PostgreSQL error codes that litequeue's tools act on, found anywhere in an
//! error's source chain: one place for the CLI, the dashboard and the runtime's
//! start-up checks to ask "was this a missing grant?" or "is the schema missing?".

use std::error::Error as StdError;

/// PostgreSQL's `insufficient_privilege`.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// PostgreSQL's codes for a name that resolves to nothing: `undefined_table`,
/// `undefined_column`, `invalid_schema_name`, `undefined_function` and
/// `undefined_object` (a type).
const UNDEFINED_NAME: [&str; 5] = ["42P01", "42703", "3F000", "42883", "42704"];

/// The SQLSTATE of the first database error in `error`'s source chain, if any.
///
/// ```
/// let refused = std::io::Error::other("no database here");
/// assert_eq!(lq_core::sqlstate_in(&refused), None);
/// ```
pub fn sqlstate_in(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(sqlx::Error::Database(d)) = e.downcast_ref::<sqlx::Error>() {
            return d.code().map(|c| c.into_owned());
        }
        next = e.source();
    }
    None
}

/// Whether PostgreSQL refused a statement in `error`'s chain because the role
/// lacks a grant (SQLSTATE 42501, `insufficient_privilege`). `docs/roles.md`
/// lists the grants each litequeue role needs.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) {
/// if let Err(e) = lq_core::control::get(&pool, 1).await {
///     if lq_core::lacks_grant(&e) {
///         eprintln!("grant the operator role what docs/roles.md lists: {e}");
///     }
/// }
/// # }
/// ```
pub fn lacks_grant(error: &(dyn StdError + 'static)) -> bool {
    sqlstate_in(error).as_deref() == Some(INSUFFICIENT_PRIVILEGE)
}

/// Whether PostgreSQL refused a statement in `error`'s chain because a table,
/// column, type or function it names does not exist: on litequeue's own
/// statements, the database holds no `lq` schema or an older one (a tool
/// pointed at the wrong database, or run before `lq migrate`).
/// [`schema_version`](crate::schema_version) tells which.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) {
/// if let Err(e) = lq_core::control::get(&pool, 1).await {
///     if lq_core::names_missing_object(&e) {
///         let found = lq_core::schema_version(&pool).await;
///         eprintln!("the lq schema here is at version {found:?}: run `lq migrate`");
///     }
/// }
/// # }
/// ```
pub fn names_missing_object(error: &(dyn StdError + 'static)) -> bool {
    sqlstate_in(error).is_some_and(|code| UNDEFINED_NAME.contains(&code.as_str()))
}
