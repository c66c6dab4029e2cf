//! The one table (markdown) and the JSON document.

use serde_json::{json, Map, Value};

use crate::ceiling::{self, Ceiling};

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub figure: String,
    /// The matching ceiling row (or other reference), described.
    pub reference: String,
    /// figure / reference, when both are rates.
    pub ratio: Option<f64>,
    /// The figure's median rate and its ceiling row, when the reference is one,
    /// so the ratio can be taken again against a ceiling measured after the run.
    pub against: Option<(f64, ceiling::Row)>,
    /// figure / the same ceiling row measured after every scenario.
    pub ratio_after: Option<f64>,
}

/// Everything a run produced.
#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    pub details: Map<String, Value>,
}

impl Report {
    pub fn row(
        &mut self,
        scenario: impl Into<String>,
        figure: impl Into<String>,
        reference: impl Into<String>,
        ratio: Option<f64>,
    ) {
        self.push(Row {
            scenario: scenario.into(),
            figure: figure.into(),
            reference: reference.into(),
            ratio,
            against: None,
            ratio_after: None,
        });
    }

    /// A rate whose reference is ceiling row `reference` (if the ceiling ran).
    pub fn row_vs_ceiling(
        &mut self,
        scenario: impl Into<String>,
        figure: impl Into<String>,
        median: f64,
        reference: Option<&ceiling::Row>,
    ) {
        self.push(Row {
            scenario: scenario.into(),
            figure: figure.into(),
            reference: reference.map_or("n/a".into(), |r| r.describe()),
            ratio: reference.map(|r| median / r.rate),
            against: reference.map(|r| (median, r.clone())),
            ratio_after: None,
        });
    }

    /// Takes every ceiling ratio again against `after`, the ceiling measured once
    /// more when the scenarios are done: the host's speed drifts within a run, so
    /// the two ratios bracket the figure.
    pub fn rerate(&mut self, after: &Ceiling) {
        for r in &mut self.rows {
            if let Some((median, row)) = &r.against {
                r.ratio_after = after.find(&row.label, row.clients).map(|a| median / a.rate);
            }
        }
    }

    fn push(&mut self, row: Row) {
        println!(
            "  => {} | {} | {} | {}",
            row.scenario,
            row.figure,
            row.reference,
            fmt_ratio(row.ratio)
        );
        self.rows.push(row);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        println!("  note: {note}");
        self.notes.push(note);
    }

    pub fn detail(&mut self, key: &str, value: Value) {
        self.details.insert(key.to_owned(), value);
    }

    pub fn markdown(&self, header: &str) -> String {
        let after = self.rows.iter().any(|r| r.ratio_after.is_some());
        let mut s = if after {
            format!("{header}\n\n| scenario | litequeue | matching ceiling row (before the run) | ratio | ratio vs the ceiling after the run |\n|---|---|---|---|---|\n")
        } else {
            format!("{header}\n\n| scenario | litequeue | matching ceiling row | ratio |\n|---|---|---|---|\n")
        };
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} | {} |",
                r.scenario,
                r.figure,
                r.reference,
                fmt_ratio(r.ratio)
            );
            if after {
                s += &format!(" {} |", fmt_ratio(r.ratio_after));
            }
            s += "\n";
        }
        if !self.notes.is_empty() {
            s += "\n";
            for n in &self.notes {
                s += &format!("- {n}\n");
            }
        }
        s
    }

    pub fn json(&self, header: &str) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| json!({"scenario": r.scenario, "figure": r.figure, "reference": r.reference, "ratio": r.ratio, "ratio_vs_ceiling_after": r.ratio_after}))
            .collect();
        json!({ "header": header, "rows": rows, "notes": self.notes, "details": self.details })
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r.is_finite() => format!("{r:.2}"),
        _ => "—".into(),
    }
}
