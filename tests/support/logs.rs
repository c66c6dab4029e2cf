//! The runtime's log events at info and above, captured in memory, so a test can
//! check what an operator would read (each failed attempt, each dead job, the
//! warnings at start) without parsing text output.

use std::{
    fmt::Debug,
    sync::Mutex,
    time::{Duration, Instant},
};

use tracing::{
    field::{Field, Visit},
    Event, Level, Subscriber,
};
use tracing_subscriber::{layer::Context, Layer};

/// One captured event: its level, target, message and other fields as text.
#[derive(Debug, Clone)]
pub struct LogEvent {
    /// The event's level.
    pub level: Level,
    /// The module that logged it, e.g. `lq_runtime::executor`.
    pub target: String,
    /// The event's message.
    pub message: String,
    /// Every other field, in order, as `(name, value)`.
    pub fields: Vec<(String, String)>,
}

impl LogEvent {
    /// The value of field `name`, as `Display` or `Debug` wrote it (strings
    /// recorded with `Debug` keep their quotes stripped).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

static EVENTS: Mutex<Vec<LogEvent>> = Mutex::new(Vec::new());

/// The layer that fills [`EVENTS`] with litequeue's events at info and above.
pub(crate) struct Capture;

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() > Level::INFO || !meta.target().starts_with("lq_") {
            return;
        }
        let mut visitor = Fields::default();
        event.record(&mut visitor);
        EVENTS.lock().unwrap().push(LogEvent {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: visitor.message,
            fields: visitor.fields,
        });
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let text = format!("{value:?}");
        let text = text
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .map(str::to_owned)
            .unwrap_or(text);
        self.put(field, text);
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = value;
        } else {
            self.fields.push((field.name().to_owned(), value));
        }
    }
}

/// Every captured event so far that `pred` accepts. Events of every test in the
/// process are captured: match on something only your test's jobs have (a kind).
pub fn logged(pred: impl Fn(&LogEvent) -> bool) -> Vec<LogEvent> {
    crate::init_tracing();
    EVENTS
        .lock()
        .unwrap()
        .iter()
        .filter(|e| pred(e))
        .cloned()
        .collect()
}

/// Waits until `count` captured events match `pred` (an event may be logged just
/// after the database write a test waited for); panics after `limit`.
pub async fn wait_logged(
    count: usize,
    limit: Duration,
    pred: impl Fn(&LogEvent) -> bool,
) -> Vec<LogEvent> {
    let until = Instant::now() + limit;
    loop {
        let found = logged(&pred);
        if found.len() >= count {
            return found;
        }
        assert!(
            Instant::now() < until,
            "expected {count} log events, found {}: {found:#?}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
