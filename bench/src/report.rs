//! The one table (markdown) and the JSON document.

use serde_json::{json, Map, Value};

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub figure: String,
    /// The matching ceiling row (or other reference), described.
    pub reference: String,
    /// figure / reference, when both are rates.
    pub ratio: Option<f64>,
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
        let row = Row {
            scenario: scenario.into(),
            figure: figure.into(),
            reference: reference.into(),
            ratio,
        };
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
        let mut s = format!("{header}\n\n| scenario | litequeue | matching ceiling row | ratio |\n|---|---|---|---|\n");
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} | {} |\n",
                r.scenario,
                r.figure,
                r.reference,
                fmt_ratio(r.ratio)
            );
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
            .map(|r| json!({"scenario": r.scenario, "figure": r.figure, "reference": r.reference, "ratio": r.ratio}))
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
