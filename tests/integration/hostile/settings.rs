//! Settings that cannot work are refused at start, naming the setting.

use super::*;

/// Succeeds at once; only here so its queue has a handler.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.settings", queue = "hostile_settings")]
pub(super) struct SettingsProbe;

impl Perform for SettingsProbe {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_at_start() {
    let db = TestDb::new().await;
    let try_start = |config: RuntimeConfig, slots: usize| {
        Runtime::builder(db.pool.clone())
            .queue("hostile_settings", slots)
            .config(config)
            .start()
    };
    let cases = [
        (
            "max_claim_batch",
            RuntimeConfig {
                max_claim_batch: 0,
                ..RuntimeConfig::default()
            },
        ),
        (
            "claim_slots",
            RuntimeConfig {
                claim_slots: Some(0),
                ..RuntimeConfig::default()
            },
        ),
        (
            "keep_dead",
            RuntimeConfig {
                keep_dead: Duration::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "keep_finished",
            RuntimeConfig {
                keep_finished: Duration::from_secs(2000 * 365 * 24 * 3600),
                ..RuntimeConfig::default()
            },
        ),
        (
            "db_timeout",
            RuntimeConfig {
                db_timeout: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "poll_interval",
            RuntimeConfig {
                poll_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "rescue_interval",
            RuntimeConfig {
                rescue_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "stats_interval",
            RuntimeConfig {
                stats_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "gauge_interval",
            RuntimeConfig {
                gauge_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "claim_ahead_wait",
            RuntimeConfig {
                claim_ahead_wait: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        // "Forever" would overflow the timers: refused, not a panic later.
        (
            "poll_interval",
            RuntimeConfig {
                poll_interval: Duration::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "leader_lease",
            RuntimeConfig {
                leader_lease: Duration::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "max_complete_batch",
            RuntimeConfig {
                max_complete_batch: usize::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "owner",
            RuntimeConfig {
                owner: String::new(),
                ..RuntimeConfig::default()
            },
        ),
        (
            "owner",
            RuntimeConfig {
                owner: "host\0pid".to_owned(),
                ..RuntimeConfig::default()
            },
        ),
    ];
    for (name, config) in cases {
        match try_start(config, 2).await {
            Err(Error::InvalidSetting { setting, .. }) => assert_eq!(setting, name),
            Err(e) => panic!("{name}: wrong error {e:?}"),
            Ok(rt) => {
                rt.shutdown().await.unwrap();
                panic!("{name}: started with an invalid setting");
            }
        }
    }
    match try_start(RuntimeConfig::default(), usize::MAX).await {
        Err(Error::ConcurrencyTooHigh {
            queue, concurrency, ..
        }) => assert_eq!(
            (queue.as_str(), concurrency),
            ("hostile_settings", usize::MAX)
        ),
        Err(e) => panic!("usize::MAX slots: wrong error {e:?}"),
        Ok(rt) => {
            rt.shutdown().await.unwrap();
            panic!("started with usize::MAX slots");
        }
    }
    for queue in ["", "two words", "semi;colon", &"q".repeat(200)] {
        let started = Runtime::builder(db.pool.clone())
            .queue(queue, 1)
            .start()
            .await;
        match started {
            Err(Error::Core(CoreError::InvalidName { what, name, .. })) => {
                assert_eq!((what, name.as_str()), ("queue", queue))
            }
            Err(e) => panic!("queue {queue:?}: wrong error {e:?}"),
            Ok(rt) => {
                rt.shutdown().await.unwrap();
                panic!("started serving queue {queue:?}");
            }
        }
    }
    // The same builder with sound settings starts.
    let rt = try_start(RuntimeConfig::default(), 2).await.unwrap();
    rt.shutdown().await.unwrap();
}
