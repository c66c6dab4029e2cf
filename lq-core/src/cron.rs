//! Recurring jobs: which ticks of a schedule are due, and firing them exactly once.
//!
//! Every decision uses the database's clock. A scheduler locks the kind's row in
//! `lq.cron_schedules` (skipping it when another runtime holds it), computes the due
//! ticks between the last decided tick and `now()`, and in the same transaction
//! writes one `lq.cron_ticks` row (primary key `(kind, tick)`) and one job per tick,
//! then advances the row. Restarts neither skip nor repeat a tick.
//!
//! Ticks older than [`LATE_AFTER`] when first seen (more, as [`MissedTicks`]
//! allows: a runtime allows for a leader's lease running out) were missed while
//! no runtime was running; [`CatchUp`] decides their fate: `Once` runs one job
//! for the whole missed window, `Skip` drops them.

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::{
    parser::{CronParser, Seconds, Year},
    Cron,
};
use sqlx::{Connection, PgConnection};

use crate::{db, CatchUp, Error, JobOptions};

/// A due tick older than this counts as missed (every runtime was down), unless
/// the caller allows more ([`MissedTicks::late_after`]).
pub const LATE_AFTER: Duration = Duration::from_secs(10);

/// What a scheduling pass does with ticks it sees late: a tick older than
/// `late_after` when first seen counts as missed, and `catch_up` decides its
/// fate. A [`CatchUp`] alone means `late_after` = [`LATE_AFTER`].
///
/// A runtime allows more than [`LATE_AFTER`] when a pass can come later than
/// that with every runtime up: after a leader dies, the others fire its
/// schedules once its lease has run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissedTicks {
    /// `Once` runs one job for the missed window, `Skip` drops it.
    pub catch_up: CatchUp,
    /// How late a tick may be seen and still fire as on time.
    pub late_after: Duration,
}

impl From<CatchUp> for MissedTicks {
    fn from(catch_up: CatchUp) -> Self {
        MissedTicks {
            catch_up,
            late_after: LATE_AFTER,
        }
    }
}

/// A parsed cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses a 5-field (or 6-field, seconds first) expression read in IANA zone `tz`.
    ///
    /// ```
    /// use lq_core::cron::Schedule;
    /// let s = Schedule::parse("*/5 * * * *", "Europe/Paris").unwrap();
    /// let t = "2026-01-01T10:02:00Z".parse().unwrap();
    /// assert_eq!(s.next_after(t).unwrap().to_rfc3339(), "2026-01-01T10:05:00+00:00");
    /// ```
    pub fn parse(expr: &str, tz: &str) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidCron {
            expr: expr.to_owned(),
            reason,
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| invalid(e.to_string()))?;
        let tz = Tz::from_str(tz).map_err(|e| invalid(format!("unknown time zone {tz:?}: {e}")))?;
        Ok(Self { cron, tz })
    }

    /// The first tick strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The last tick at or before `t`.
    pub fn last_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&self.tz);
        self.cron
            .find_previous_occurrence(&local, true)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }
}

/// The cron tick a recurring job stands for, as [`crate::JobContext::cron`]
/// shows it. Stored in the job's `meta` as `{"lq": {"cron": {"tick", "catch_up",
/// "ticks"}}}` by the scheduler that fired it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CronTick {
    /// The scheduled instant (UTC) this run stands for; for a catch-up run, the
    /// newest tick of the missed window.
    pub tick: DateTime<Utc>,
    /// True when this run stands for ticks missed while no runtime ran
    /// ([`CatchUp::Once`]).
    pub catch_up: bool,
    /// How many scheduled ticks this run covers: 1 on time; for a catch-up run,
    /// the number missed (counted up to 10,000).
    pub ticks_covered: u32,
}

/// The metadata key litequeue keeps for its own records (the cron tick); an
/// enqueue that sets it is refused.
pub(crate) const META_KEY: &str = "lq";

impl CronTick {
    /// A tick, as a test builds one for `testing::TestContext::cron` (with the
    /// `testing` feature).
    pub fn new(tick: DateTime<Utc>, catch_up: bool, ticks_covered: u32) -> Self {
        Self {
            tick,
            catch_up,
            ticks_covered,
        }
    }

    /// The job metadata that records this tick.
    pub fn to_meta(&self) -> serde_json::Value {
        serde_json::json!({(META_KEY): {"cron": {
            "tick": self.tick,
            "catch_up": self.catch_up,
            "ticks": self.ticks_covered,
        }}})
    }

    /// Reads a tick back from job metadata; `None` when absent or malformed.
    pub fn from_meta(meta: &serde_json::Value) -> Option<Self> {
        let cron = meta.get(META_KEY)?.get("cron")?;
        Some(Self {
            tick: serde_json::from_value(cron.get("tick")?.clone()).ok()?,
            catch_up: cron.get("catch_up")?.as_bool()?,
            ticks_covered: u32::try_from(cron.get("ticks")?.as_u64()?).ok()?,
        })
    }
}

/// What to fire for one kind at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickPlan {
    /// Ticks to fire, oldest first; `(tick, stands_for_missed_window)`.
    pub fire: Vec<(DateTime<Utc>, bool)>,
    /// Newest tick decided (fired or skipped); the schedule advances to it.
    pub advance_to: Option<DateTime<Utc>>,
    /// How many missed ticks were folded into one job or skipped (at least 1 when
    /// a missed window was found; exact up to 10,000).
    pub missed: usize,
}

/// Plans the ticks in `(last, now]`: on-time ticks fire one job each; ticks older
/// than `late_after` were missed and follow `catch_up`.
///
/// ```
/// use lq_core::{cron::{plan, Schedule}, CatchUp};
/// use std::time::Duration;
/// let s = Schedule::parse("* * * * * *", "UTC").unwrap(); // every second
/// let last = "2026-01-01T00:00:00Z".parse().unwrap();
/// let now = "2026-01-01T01:00:00Z".parse().unwrap();    // down for an hour
/// let p = plan(&s, last, now, Duration::from_secs(10), CatchUp::Once);
/// assert_eq!(p.fire.len(), 11);                          // 1 for the window + 10 on time
/// assert!(p.fire[0].1);
/// ```
pub fn plan(
    schedule: &Schedule,
    last: DateTime<Utc>,
    now: DateTime<Utc>,
    late_after: Duration,
    catch_up: CatchUp,
) -> TickPlan {
    let boundary = now - chrono::Duration::from_std(late_after).unwrap_or(chrono::Duration::zero());
    let mut fire = Vec::new();
    let mut missed = 0;
    let mut advance_to = None;
    if last < boundary {
        if let Some(latest_missed) = schedule.last_at_or_before(boundary).filter(|t| *t > last) {
            missed = count_between(schedule, last, latest_missed, 10_000);
            if catch_up == CatchUp::Once {
                fire.push((latest_missed, true));
            }
            advance_to = Some(latest_missed);
        }
    }
    let mut cursor = last.max(boundary);
    while let Some(t) = schedule.next_after(cursor).filter(|t| *t <= now) {
        fire.push((t, false));
        advance_to = Some(t);
        cursor = t;
    }
    TickPlan {
        fire,
        advance_to,
        missed,
    }
}

fn count_between(
    schedule: &Schedule,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
    cap: usize,
) -> usize {
    let mut n = 0;
    let mut cursor = after;
    while let Some(t) = schedule.next_after(cursor).filter(|t| *t <= until) {
        n += 1;
        if n >= cap {
            break;
        }
        cursor = t;
    }
    n
}

/// What one scheduling pass did for a kind.
#[derive(Debug, Clone, Default)]
pub struct FireReport {
    /// `(tick, job id)` for every job enqueued.
    pub fired: Vec<(DateTime<Utc>, i64)>,
    /// Ticks folded or skipped as missed.
    pub missed: usize,
    /// The database time the pass used.
    pub now: Option<DateTime<Utc>>,
    /// The next tick after `now`.
    pub next_tick: Option<DateTime<Utc>>,
    /// True when another runtime held the schedule and this pass did nothing.
    pub busy: bool,
    /// The schedule's stored last tick when it lay in the future (written by hand
    /// or by a host whose clock ran ahead): the pass moved it back to the newest
    /// tick at or before `now`, or the schedule would never fire until then.
    pub rewound_from: Option<DateTime<Utc>>,
}

/// Fires the due ticks of one recurring kind, exactly once each, in one transaction.
///
/// `now` overrides the database clock (for tests that simulate time); in
/// production pass `None`. `payload` is the JSON of one tick's job. `missed`
/// is a [`CatchUp`], or a [`MissedTicks`] that also says how late a tick may be.
/// The runtime's leader calls it for every recurring kind; call it yourself to
/// fire a schedule from a script or a test, with no runtime running. The
/// schedule's row is made on the first call, which fires nothing: ticks count
/// from then.
///
/// ```no_run
/// # async fn f(conn: &mut sqlx::PgConnection) -> Result<(), lq_core::Error> {
/// use lq_core::{cron::{fire_due, Schedule}, CatchUp, JobOptions};
///
/// let schedule = Schedule::parse("0 3 * * *", "Europe/Paris")?;
/// let options = JobOptions { queue: "reports", ..JobOptions::DEFAULT };
/// let report = fire_due(conn, "app.nightly_report", &options, &schedule, CatchUp::Once, "{}", None).await?;
/// println!("enqueued {} jobs, next tick at {:?}", report.fired.len(), report.next_tick);
/// # Ok(()) }
/// ```
pub async fn fire_due(
    conn: &mut PgConnection,
    kind: &str,
    options: &JobOptions,
    schedule: &Schedule,
    missed: impl Into<MissedTicks>,
    payload: &str,
    now: Option<DateTime<Utc>>,
) -> Result<FireReport, Error> {
    let MissedTicks {
        catch_up,
        late_after,
    } = missed.into();
    let mut tx = conn.begin().await.map_err(db::err("cron_begin"))?;
    // Public, and so called on any connection: its statements name functions
    // and types unqualified.
    db::pin_search_path(&mut tx).await?;
    let Some((now, last)) = db::cron::cron_schedule_lock(&mut tx, kind, now).await? else {
        return Ok(FireReport {
            busy: true,
            ..FireReport::default()
        });
    };
    let mut rewound_from = None;
    let last = if last > now {
        let to = schedule.last_at_or_before(now).unwrap_or(now);
        db::cron::cron_schedule_rewind(&mut tx, kind, to, now).await?;
        rewound_from = Some(last);
        to
    } else {
        last
    };
    let plan = plan(schedule, last, now, late_after, catch_up);
    let mut report = FireReport {
        rewound_from,
        missed: plan.missed,
        now: Some(now),
        next_tick: schedule.next_after(now),
        ..FireReport::default()
    };
    // A tick whose key a live job holds (the last tick's job still queued or
    // running, when the type has a `unique_key`) enqueues nothing: see
    // `cron_tick_fire`.
    for (tick, catch_up) in plan.fire {
        let covered = if catch_up { plan.missed } else { 1 };
        let covered = u32::try_from(covered).unwrap_or(u32::MAX);
        let meta = CronTick::new(tick, catch_up, covered).to_meta();
        if let Some(id) =
            db::cron::cron_tick_fire(&mut tx, kind, options, payload, tick, catch_up, &meta).await?
        {
            report.fired.push((tick, id));
        }
    }
    if let Some(to) = plan.advance_to {
        db::cron::cron_schedule_advance(&mut tx, kind, to, now).await?;
    }
    tx.commit().await.map_err(db::err("cron_commit"))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn on_time_ticks_fire_each() {
        let s = Schedule::parse("*/5 * * * *", "UTC").unwrap();
        let p = plan(
            &s,
            t("2026-01-01T10:00:00Z"),
            t("2026-01-01T10:05:03Z"),
            LATE_AFTER,
            CatchUp::Once,
        );
        assert_eq!(p.fire, vec![(t("2026-01-01T10:05:00Z"), false)]);
        assert_eq!(p.advance_to, Some(t("2026-01-01T10:05:00Z")));
    }

    #[test]
    fn nothing_is_due_before_the_tick() {
        let s = Schedule::parse("*/5 * * * *", "UTC").unwrap();
        let p = plan(
            &s,
            t("2026-01-01T10:00:00Z"),
            t("2026-01-01T10:04:59Z"),
            LATE_AFTER,
            CatchUp::Once,
        );
        assert!(p.fire.is_empty());
        assert_eq!(p.advance_to, None);
    }

    #[test]
    fn missed_window_runs_once_or_is_skipped() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let (last, now) = (t("2026-01-01T00:00:00Z"), t("2026-01-01T05:30:00Z"));
        let once = plan(&s, last, now, LATE_AFTER, CatchUp::Once);
        assert_eq!(once.fire, vec![(t("2026-01-01T05:00:00Z"), true)]);
        assert_eq!(once.missed, 5);
        let skip = plan(&s, last, now, LATE_AFTER, CatchUp::Skip);
        assert!(skip.fire.is_empty());
        assert_eq!(skip.advance_to, Some(t("2026-01-01T05:00:00Z")));
    }

    #[test]
    fn time_zone_moves_the_tick() {
        let s = Schedule::parse("0 9 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            s.next_after(t("2026-01-01T00:00:00Z")),
            Some(t("2026-01-01T08:00:00Z"))
        );
        assert_eq!(
            s.next_after(t("2026-07-01T00:00:00Z")),
            Some(t("2026-07-01T07:00:00Z"))
        );
    }

    #[test]
    fn invalid_expressions_and_zones_are_typed_errors() {
        assert!(matches!(
            Schedule::parse("61 * * * *", "UTC"),
            Err(Error::InvalidCron { .. })
        ));
        assert!(matches!(
            Schedule::parse("* * * * *", "Mars/Olympus"),
            Err(Error::InvalidCron { .. })
        ));
    }
}
