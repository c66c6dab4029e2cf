//! Two types with one kind: the runtime refuses to start and names both.
//! (Its own binary, because the registry is per binary.)

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use serde::{Deserialize, Serialize};

mod billing {
    use super::*;
    #[derive(Serialize, Deserialize, Job)]
    #[job(kind = "charge")]
    pub struct Charge;
    impl Perform for Charge {
        async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
}

mod legacy {
    use super::*;
    #[derive(Serialize, Deserialize, Job)]
    #[job(kind = "charge")]
    pub struct OldCharge;
    impl Perform for OldCharge {
        async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
}

#[tokio::test]
async fn two_types_with_one_kind_refuse_to_start_naming_both() {
    let db = lq_tests::TestDb::new().await;
    let err = Runtime::builder(db.pool.clone())
        .queue("default", 1)
        .start()
        .await
        .err()
        .expect("must refuse");
    let msg = err.to_string();
    assert!(msg.contains("\"charge\""), "{msg}");
    assert!(
        msg.contains("billing::Charge") && msg.contains("legacy::OldCharge"),
        "{msg}"
    );
    assert!(matches!(
        err,
        lq_runtime::Error::Core(lq_runtime::CoreError::DuplicateKind { .. })
    ));
}
