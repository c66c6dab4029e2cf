//! Scenario 6: drain and latency again with 1,000,000 succeeded jobs kept in the table.

use anyhow::Result;
use serde_json::json;

use super::{announce, drain, latency, Ctx};
use crate::{db, stats::Spread};

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let kept: u64 = if ctx.quick { 200_000 } else { 1_000_000 };
    db::reset(&ctx.pool, None).await?;
    announce(&format!("retained: inserting {kept} succeeded jobs"));
    let marker = db::insert_retained(&ctx.pool, kept).await?;
    db::settle(&ctx.pool).await?;
    let k = format!("{}k retained", kept / 1000);

    let mut sets = vec![(
        "shipped defaults",
        drain::Settings::defaults(),
        ctx.drain_defaults,
    )];
    if let Some((best, rate)) = ctx.best.filter(|(b, _)| *b != drain::Settings::defaults()) {
        sets.push(("best of sweep", best, Some(rate)));
    }
    for (what, s, empty) in sets {
        let runs = drain::runs(ctx, s, Some(marker), &format!("{k}, {what}")).await?;
        let rate = Spread::of(&runs.iter().map(|r| r.rate).collect::<Vec<_>>());
        let claim = Spread::of(&runs.iter().map(|r| r.avg_claim).collect::<Vec<_>>()).median;
        let name = format!("6. drain, {k}, {what} ({})", s.label());
        ctx.report.row(
            &name,
            format!("{} (avg claim batch {claim:.0})", rate.rate()),
            empty.map_or("n/a (scenario 3 not run)".into(), |e| {
                format!("same on an empty table (3): {e:.0}/s")
            }),
            empty.map(|e| rate.median / e),
        );
        let runs_json: Vec<_> = runs.iter().map(drain::DrainRun::json).collect();
        ctx.report.detail(
            &name,
            json!({ "jobs_per_s": rate.json(), "runs": runs_json }),
        );
    }

    let (secs, n) = (latency::open_secs(ctx.quick), latency::serial_n(ctx.quick));
    let mut v = Vec::new();
    for i in 1..=3 {
        v.push(
            latency::open_loop(
                ctx,
                latency::OPEN_RATE,
                secs,
                true,
                Some(marker),
                &format!("{k}, run {i}/3"),
            )
            .await?,
        );
    }
    let reference = ctx.latency_open.map_or("n/a".into(), |(p50, p99)| {
        format!("empty table (5): p50 {p50:.2} / p99 {p99:.2} ms")
    });
    let name = format!(
        "6. latency open loop {:.0}/s, NOTIFY, {k}",
        latency::OPEN_RATE
    );
    let against = ctx.latency_open;
    latency::report(ctx, &name, &v, &reference, against);
    let mut v = Vec::new();
    for i in 1..=3 {
        v.push(latency::serial(ctx, n, true, Some(marker), &format!("{k}, run {i}/3")).await?);
    }
    let reference = ctx.latency_serial.map_or("n/a".into(), |(p50, p99)| {
        format!("empty table (5): p50 {p50:.2} / p99 {p99:.2} ms")
    });
    let against = ctx.latency_serial;
    latency::report(
        ctx,
        &format!("6. latency serial, NOTIFY, {k}"),
        &v,
        &reference,
        against,
    );
    ctx.report.note("6.: the ratio is empty-table figure / retained figure for latency p50 (and retained / empty for drain rates); ≥ 0.95 meets the 5 % budget");
    db::reset(&ctx.pool, None).await?;
    Ok(())
}
