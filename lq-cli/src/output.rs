//! Output: aligned tables for people, JSON for scripts.

use std::time::Duration;

use comfy_table::{presets, Table};

/// How `lq` prints results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// One JSON document on stdout.
    Json,
}

/// Where a command's results go.
pub(crate) struct Out {
    format: Format,
}

impl Out {
    pub fn new(format: Format) -> Self {
        Self { format }
    }

    /// True when results are JSON (commands skip decorations then).
    pub fn is_json(&self) -> bool {
        self.format == Format::Json
    }

    /// Prints `json` (JSON format) or the table `table` builds (table format).
    /// `json` is written as it serialises, never through a `serde_json::Value`:
    /// a job's raw payload goes out as stored, however deeply nested.
    pub fn emit(&self, json: &impl serde::Serialize, table: impl FnOnce() -> Table) {
        match self.format {
            Format::Json => outln!("{}", to_json(json)),
            Format::Table => {
                for line in table().to_string().lines() {
                    outln!("{}", printable(line.trim_end()));
                }
            }
        }
    }
}

/// `value` as indented JSON. Serialising a plain structure to text cannot fail
/// (its keys are strings); should it, the error is the document printed.
pub(crate) fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string())
}

/// A table with `headers`, plain aligned columns (easy to read and to grep).
pub(crate) fn table(headers: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(headers.iter().copied());
    t
}

/// A duration for people: `850ms`, `12s`, `3m 20s`, `2h 5m`.
pub(crate) fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let rounded = Duration::from_secs(if secs >= 3600 { secs / 60 * 60 } else { secs });
    humantime::format_duration(rounded).to_string()
}

/// `text` safe to write to a terminal: every control character but newline and
/// tab written as its escape (`\u{1b}`). Job errors, unique keys, worker names
/// and pause notes come from applications and their upstreams; raw, an escape
/// sequence in one could rewrite the operator's screen or clipboard.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if unsafe_char(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// `text` cut to `max` characters with an ellipsis.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut s: String = one_line.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Set once stdout could not be written: the reader went away (`lq jobs list
/// | head`), or the output is gone.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes `args` to stdout. Once a write fails (a reader that went away, as
/// with `| head`), later output is dropped rather than `println!`'s panic on
/// the broken pipe; the command ends with its own exit code (a failed doctor
/// check still exits 1), and a loop stops at [`stdout_closed`].
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::{io::Write, sync::atomic::Ordering};
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("lq: cannot write the output: {e}");
        }
    }
}

/// Whether stdout could not be written (see [`write_stdout`]).
pub(crate) fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_secs(200)), "3m 20s");
        assert_eq!(human(Duration::from_secs(7530)), "2h 5m");
    }

    #[test]
    fn control_characters_are_shown_escaped_and_plain_text_is_untouched() {
        assert_eq!(
            printable("boom \u{1b}]52;c;aGk=\u{7}\u{9b}2J"),
            "boom \\u{1b}]52;c;aGk=\\u{7}\\u{9b}2J"
        );
        assert!(matches!(
            printable("näive\ttext\n"),
            std::borrow::Cow::Borrowed("näive\ttext\n")
        ));
    }

    #[test]
    fn long_text_is_cut_on_one_line() {
        assert_eq!(cut("a\nb", 10), "a b");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
