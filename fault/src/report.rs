//! One summary row per scenario.

use crate::classify::Verdict;

/// The header of the summary table.
pub const HEADER: &str =
    "scenario   |  jobs | lost | dupl | unjust dupl | unexp | expired-running | recovery       |    wall | result";

/// The outcome of one scenario.
#[derive(Debug, Default)]
pub struct Row {
    /// Scenario name.
    pub name: &'static str,
    /// The classification (default when the scenario did not get that far).
    pub verdict: Verdict,
    /// Recovery times seen (fault to first completion after it), in seconds.
    pub recoveries: Vec<f64>,
    /// Wall time in seconds.
    pub wall: f64,
    /// Reasons to fail beyond the counts (scenario checks, errors, timeouts).
    pub failures: Vec<String>,
    /// Lines printed under the row (e.g. the cron scenario's tick histogram).
    pub notes: Vec<String>,
}

impl Row {
    /// Pass: nothing lost or unexpected, no unjustified duplicate, nothing left
    /// running under an expired lease, and every scenario check held.
    pub fn passed(&self) -> bool {
        let v = &self.verdict;
        self.failures.is_empty()
            && v.problems.iter().all(|p| !p.contains("wrong end state"))
            && v.lost == 0
            && v.unexpected == 0
            && v.unjustified == 0
            && v.expired_running == 0
    }

    /// The row as printed.
    pub fn line(&self) -> String {
        let v = &self.verdict;
        let recovery = match self.recoveries.iter().copied().reduce(f64::max) {
            None => "-".to_owned(),
            Some(max) if self.recoveries.len() == 1 => format!("{max:.2}s"),
            Some(max) => format!("max {max:.2}s ({})", self.recoveries.len()),
        };
        format!(
            "{:<10} | {:>5} | {:>4} | {:>4} | {:>11} | {:>5} | {:>15} | {:<14} | {:>6.1}s | {}",
            self.name,
            v.jobs,
            v.lost,
            v.duplicated,
            v.unjustified,
            v.unexpected,
            v.expired_running,
            recovery,
            self.wall,
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}
