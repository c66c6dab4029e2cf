//! `lq doctor`: every health check, exit 1 when one fails.

use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

pub(crate) async fn run(pool: &PgPool, out: &Out) -> Result<Outcome, Failure> {
    let checks = lq_runtime::control::doctor(pool).await?;
    out.emit(
        &json!({"checks": checks.iter().map(|c| json!({"name": c.name, "ok": c.ok, "detail": c.detail})).collect::<Vec<_>>()}),
        || {
            let mut t = crate::output::table(&["check", "", "detail"]);
            for c in &checks {
                t.add_row(vec![c.name, if c.ok { "ok" } else { "FAIL" }, &c.detail]);
            }
            t
        },
    );
    Ok(if checks.iter().all(|c| c.ok) {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
