//! Every `#[job(...)]` key at once, and the values they produce.

use std::time::Duration;

use lq_runtime::{Backoff, CatchUp, Job};
use serde::{Deserialize, Serialize};

fn slow(attempt: u32) -> Duration {
    Duration::from_secs(u64::from(attempt) * 7)
}

#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "send_welcome_email",
    queue = "emails",
    priority = 10,
    max_attempts = 5
)]
#[job(backoff = exponential(base = "2s", max = "1h", jitter = 0.1))]
#[job(
    unique_key = "welcome:{user_id}:{{literal}}",
    timeout = "1m 30s",
    lease = "90s"
)]
#[job(crate = "lq_runtime")]
struct SendWelcomeEmail {
    user_id: i64,
}

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 */5 * * * *", cron_tz = "Europe/Paris", cron_catch_up = "skip", backoff = slow)]
struct Sweep;

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "pair:{1}-{0}", backoff = fixed("250ms"), priority = -32768)]
struct Pair(u8, String);

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = linear(step = "10s", max = "10m"), unique_key = "singleton")]
struct r#Raw {
    r#type: u8,
}

/// `Self::` in a custom backoff names the type's own associated function.
#[derive(Serialize, Deserialize, Job)]
#[job(backoff = Self::retry_delay)]
struct Retrying;

impl Retrying {
    fn retry_delay(attempt: u32) -> Duration {
        Duration::from_secs(u64::from(attempt) * 3)
    }
}

/// A cron job named like the expansion's helper traits still compiles.
#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "@daily")]
struct ViaDefault;

fn main() {
    let job = SendWelcomeEmail { user_id: 4 };
    assert_eq!(job.unique_key().as_deref(), Some("welcome:4:{literal}"));
    assert_eq!(SendWelcomeEmail::KIND, "send_welcome_email");
    let o = SendWelcomeEmail::OPTIONS;
    assert_eq!((o.queue, o.priority, o.max_attempts), ("emails", 10, 5));
    let expected = Backoff::Exponential {
        base: Duration::from_secs(2),
        max: Duration::from_secs(3600),
        jitter: 0.1,
    };
    assert_eq!(format!("{:?}", o.backoff), format!("{expected:?}"));
    assert_eq!(o.timeout, Some(Duration::from_secs(90)));
    assert_eq!(o.lease, Duration::from_secs(90));
    assert!(o.cron.is_none());

    let cron = Sweep::OPTIONS.cron.expect("a cron job");
    assert_eq!(
        (cron.expr, cron.tz, cron.catch_up),
        ("0 */5 * * * *", "Europe/Paris", CatchUp::Skip)
    );
    assert_eq!((cron.build)(), serde_json::Value::Null);
    assert_eq!(Sweep::OPTIONS.backoff.delay(2), Duration::from_secs(14));
    assert_eq!(Sweep.unique_key(), None);

    assert_eq!(
        Pair(1, "a".into()).unique_key().as_deref(),
        Some("pair:a-1")
    );
    assert_eq!(Pair::OPTIONS.backoff.delay(9), Duration::from_millis(250));
    assert_eq!(Raw { r#type: 1 }.unique_key().as_deref(), Some("singleton"));
    assert_eq!(Raw::KIND, "Raw");
    assert_eq!(Raw::OPTIONS.backoff.delay(3), Duration::from_secs(30));

    assert_eq!(Retrying::OPTIONS.backoff.delay(2), Duration::from_secs(6));
    let cron = ViaDefault::OPTIONS.cron.expect("a cron job");
    assert_eq!((cron.build)(), serde_json::Value::Null);
}
