//! `lq-fault-worker-old`: a worker of the previous release, which lacks the
//! kind `fault.deploy` (see `lq-fault-worker`); the deploy scenario rolls from
//! it to the current one.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_fault::worker::main().await
}
