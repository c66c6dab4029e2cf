//! The raw-SQL ceiling (`../shared/bench/ceiling`): run it or read its output, and
//! find the row that matches a litequeue figure.

use std::{path::Path, process::Command};

use anyhow::{bail, Context, Result};
use sqlx::postgres::PgConnectOptions;

/// One line of the ceiling's output.
#[derive(Debug, Clone)]
pub struct Row {
    pub label: String,
    pub clients: u32,
    pub rate: f64,
    /// The ceiling's drain ran out of backlog within its time (`backlog
    /// exhausted`): the rate is a floor, and a ratio to it an upper bound.
    pub floor: bool,
}

impl Row {
    pub fn describe(&self) -> String {
        format!(
            "{}, {} client(s): {}{}/s{}",
            self.label,
            self.clients,
            if self.floor { "≥ " } else { "" },
            crate::stats::thousands(self.rate),
            if self.floor {
                " (its backlog ran dry: the ratio is an upper bound)"
            } else {
                ""
            }
        )
    }
}

/// The ceiling's parsed output.
#[derive(Debug, Clone, Default)]
pub struct Ceiling {
    pub header: String,
    pub rows: Vec<Row>,
    pub raw: String,
}

impl Ceiling {
    /// Parses lines like `drain claim_then_update batch=100      clients=4       65000 jobs/s`.
    pub fn parse(text: &str) -> Ceiling {
        let mut c = Ceiling {
            raw: text.to_owned(),
            ..Default::default()
        };
        for line in text.lines() {
            if line.starts_with('#') {
                c.header = line.trim_start_matches('#').trim().to_owned();
                continue;
            }
            let Some((label, rest)) = line.split_once("clients=") else {
                continue;
            };
            let mut f = rest.split_whitespace();
            let (Some(clients), Some(rate)) = (f.next(), f.next()) else {
                continue;
            };
            if let (Ok(clients), Ok(rate)) = (clients.parse(), rate.parse()) {
                c.rows.push(Row {
                    label: label.trim().to_owned(),
                    clients,
                    rate,
                    floor: rest.contains("backlog exhausted"),
                });
            }
        }
        c
    }

    pub fn find(&self, label: &str, clients: u32) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.label == label && r.clients == clients)
    }

    pub fn enqueue_single(&self, clients: u32) -> Option<&Row> {
        self.find("enqueue single-row autocommit", clients)
    }

    pub fn enqueue_unnest(&self) -> Option<&Row> {
        self.find("enqueue 1000-row unnest", 1)
    }

    /// claim_then_update (4 clients) at the measured batch size nearest `batch` (log scale).
    pub fn drain_near(&self, batch: f64) -> Option<&Row> {
        let b = batch.max(1.0).ln();
        self.rows
            .iter()
            .filter(|r| r.label.starts_with("drain claim_then_update batch=") && r.clients == 4)
            .min_by(|x, y| {
                let d = |r: &Row| (drain_batch(r).max(1.0).ln() - b).abs();
                d(x).total_cmp(&d(y))
            })
    }

    pub fn drain_batch1(&self) -> Option<&Row> {
        self.find("drain claim_then_update batch=1", 4)
    }

    /// Claim, then delete the batch, batch 100 (4 clients): the shape of
    /// litequeue's drain, which deletes finished jobs from `lq.jobs`.
    pub fn drain_delete_100(&self) -> Option<&Row> {
        self.find("drain claim_then_delete batch=100", 4)
    }

    /// The one-statement bound: the acknowledgement of one batch and the claim
    /// of the next in one statement, batch 100 (4 clients; full ceiling only).
    pub fn drain_one_statement_100(&self) -> Option<&Row> {
        self.find("drain claim_delete_1tx batch=100", 4)
    }
}

fn drain_batch(r: &Row) -> f64 {
    r.label
        .rsplit('=')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// Runs `script quick` (or `full` when `LQ_CEILING_MODE=full`: it adds the
/// one-statement drain bound) against the server of `admin`, returning its
/// stdout.
pub fn run(script: &Path, admin: &PgConnectOptions) -> Result<String> {
    let mode = match std::env::var("LQ_CEILING_MODE").as_deref() {
        Ok("full") => "full",
        _ => "quick",
    };
    eprintln!(
        "ceiling: running {} {mode} (about {} minutes)",
        script.display(),
        if mode == "full" { 6 } else { 2 }
    );
    let out = Command::new(script)
        .arg(mode)
        .env("PGHOST", admin.get_host())
        .env("PGPORT", admin.get_port().to_string())
        .env("PGUSER", admin.get_username())
        // The same transport as sqlx (no TLS), as for the paired runs.
        .env("PGSSLMODE", "disable")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "ceiling failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_that_ran_dry_is_read_as_a_floor() {
        let c = Ceiling::parse(
            "# ceiling (full)\n\
             drain claim_then_delete batch=100  clients=4       86050 jobs/s\n\
             drain claim_delete_1tx batch=100   clients=4      100000 jobs/s  (backlog exhausted: raise B)\n",
        );
        let full = c.drain_delete_100().expect("the delete row");
        let dry = c.drain_one_statement_100().expect("the bound row");
        assert!(!full.floor);
        assert!(dry.floor);
        assert!(dry.describe().contains("≥ 100,000/s"), "{}", dry.describe());
    }
}
