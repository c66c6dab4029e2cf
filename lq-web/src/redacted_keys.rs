//! Unique keys while payloads are redacted: a unique key is a template over the
//! payload's fields (`"charge:{card}"`), so a dashboard that hides payload
//! values ([`crate::WebConfig::redact`]) hides the keys too, on the job page and
//! in the refusals that name one ([`lq_core::Error::UniqueKeyHeld`],
//! [`lq_core::Error::ScheduleKeyHeld`]).

use lq_core::{control::BulkReport, Error};

/// What the dashboard shows in place of a unique key while payloads are redacted.
pub(crate) const HIDDEN_KEY: &str = "(hidden while payloads are redacted)";

/// `e` with any unique key it names replaced by [`HIDDEN_KEY`] when `redacted`.
pub(crate) fn error(e: Error, redacted: bool) -> Error {
    if !redacted {
        return e;
    }
    match e {
        Error::UniqueKeyHeld { id, holder, .. } => Error::UniqueKeyHeld {
            id,
            holder,
            key: HIDDEN_KEY.to_owned(),
        },
        Error::ScheduleKeyHeld { kind, holder, .. } => Error::ScheduleKeyHeld {
            kind,
            holder,
            key: HIDDEN_KEY.to_owned(),
        },
        Error::BulkStopped {
            action,
            report,
            source,
        } => Error::BulkStopped {
            action,
            report: Box::new(report_of(*report, redacted)),
            source: Box::new(error(*source, redacted)),
        },
        other => other,
    }
}

/// `r` with the keys of its refusals hidden when `redacted`.
pub(crate) fn report_of(mut r: BulkReport, redacted: bool) -> BulkReport {
    if redacted {
        r.refused = r
            .refused
            .into_iter()
            .map(|(id, e)| (id, error(e, redacted)))
            .collect();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_naming_a_key_hides_it_only_while_payloads_are_redacted() {
        let held = || Error::UniqueKeyHeld {
            id: 1,
            holder: 2,
            key: "card:4111".into(),
        };
        assert!(error(held(), false).to_string().contains("card:4111"));
        let hidden = error(held(), true).to_string();
        assert!(!hidden.contains("card:4111"), "{hidden}");
        assert!(hidden.contains(HIDDEN_KEY), "{hidden}");
        let mut report = BulkReport::default();
        report.refused.push((1, held()));
        let shown = report_of(report, true);
        assert!(!shown.refused[0].1.to_string().contains("card:4111"));
        let run_now = || Error::ScheduleKeyHeld {
            kind: "reports.nightly".into(),
            holder: 2,
            key: "tenant:acme".into(),
        };
        assert!(error(run_now(), false).to_string().contains("tenant:acme"));
        let hidden = error(run_now(), true).to_string();
        assert!(!hidden.contains("tenant:acme"), "{hidden}");
        assert!(hidden.contains(HIDDEN_KEY), "{hidden}");
    }
}
