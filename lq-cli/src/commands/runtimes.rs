//! `lq runtimes`: the cluster's runtimes and its leader.

use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

pub(crate) async fn run(pool: &PgPool, out: &Out) -> Result<Outcome, Failure> {
    let runtimes = lq_runtime::control::runtimes(pool).await?;
    out.emit(
        &json!({"runtimes": runtimes.iter().map(|r| json!({
            "id": r.id, "host": r.host, "pid": r.pid, "version": r.version,
            "queues": r.queues,
            "limits": r.limits.iter().map(|(q, l)| (q.clone(), l.to_json()))
                .collect::<serde_json::Map<_, _>>(),
            "kinds": r.kinds, "connections": r.connections, "started_at": r.started_at,
            "heartbeat_at": r.heartbeat_at, "alive": r.alive, "leader": r.leader,
        })).collect::<Vec<_>>()}),
        || {
            let mut t = crate::output::table(&[
                "id",
                "host",
                "pid",
                "version",
                "queues",
                "connections",
                "started",
                "last beat",
                "",
            ]);
            for r in &runtimes {
                let queues = r.queues_described();
                let role = match (r.alive, r.leader) {
                    (false, _) => "gone",
                    (true, true) => "leader",
                    (true, false) => "",
                };
                t.add_row(vec![
                    r.id.clone(),
                    r.host.clone(),
                    r.pid.to_string(),
                    r.version.clone(),
                    queues.join(" "),
                    r.connections
                        .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                    r.started_at.format("%F %T").to_string(),
                    r.heartbeat_at.format("%T").to_string(),
                    role.to_owned(),
                ]);
            }
            t
        },
    );
    Ok(Outcome::Clean)
}
