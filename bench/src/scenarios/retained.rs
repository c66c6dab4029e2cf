//! Scenario 6: drain and latency again with 1,000,000 succeeded jobs kept in the table.
//!
//! This host's speed drifts by up to 2× within a full run, so each figure with the
//! jobs kept is paired with the same measurement on an empty table taken minutes
//! before it: three blocks, each measuring everything on an empty table, then
//! inserting the million, then measuring everything again. The ratio is the median
//! of the three per-block ratios.

use anyhow::Result;
use serde_json::json;

use super::{announce, drain, latency, Ctx};
use crate::{db, stats::Spread};

const BLOCKS: usize = 3;

/// One block's measurements on one table: drains per settings, then latencies.
struct Block {
    drains: Vec<drain::DrainRun>,
    open: latency::LatRun,
    serial: latency::LatRun,
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let kept: u64 = if ctx.quick { 200_000 } else { 1_000_000 };
    let k = format!("{}k retained", kept / 1000);
    let mut sets = vec![("shipped defaults", drain::Settings::defaults())];
    if let Some((best, _)) = ctx.best.filter(|(b, _)| *b != drain::Settings::defaults()) {
        sets.push(("best of sweep", best));
    }
    let (mut empty, mut full) = (Vec::new(), Vec::new());
    for block in 1..=BLOCKS {
        let what = format!("empty table, block {block}/{BLOCKS}");
        empty.push(measure(ctx, &sets, None, &what).await?);
        db::reset(&ctx.pool, None).await?;
        announce(&format!("retained: inserting {kept} succeeded jobs"));
        let marker = db::insert_retained(&ctx.pool, kept).await?;
        db::settle(&ctx.pool).await?;
        let what = format!("{k}, block {block}/{BLOCKS}");
        full.push(measure(ctx, &sets, Some(marker), &what).await?);
    }
    for (i, (what, s)) in sets.iter().enumerate() {
        let rates = |b: &[Block]| b.iter().map(|b| b.drains[i].rate).collect::<Vec<_>>();
        let (e, f) = (Spread::of(&rates(&empty)), Spread::of(&rates(&full)));
        let pairs = Spread::of(&ratios(&rates(&full), &rates(&empty)));
        let claim = Spread::of(
            &full
                .iter()
                .map(|b| b.drains[i].avg_claim)
                .collect::<Vec<_>>(),
        );
        let name = format!("6. drain, {k}, {what} ({})", s.label());
        ctx.report.row(
            &name,
            format!("{} (avg claim batch {:.0})", f.rate(), claim.median),
            format!(
                "empty table, right before in each block: {}; per-block ratios {}",
                e.rate(),
                pairs.plain(2)
            ),
            Some(pairs.median),
        );
        let runs = |b: &[Block]| b.iter().map(|b| b.drains[i].json()).collect::<Vec<_>>();
        ctx.report.detail(
            &name,
            json!({ "jobs_per_s": f.json(), "empty_jobs_per_s": e.json(), "ratio": pairs.json(),
                    "runs": runs(&full), "empty_runs": runs(&empty) }),
        );
    }
    let open = format!(
        "6. latency open loop {:.0}/s, NOTIFY, {k}",
        latency::OPEN_RATE
    );
    report_latency(ctx, &open, &empty, &full, |b| &b.open);
    let serial = format!("6. latency serial, NOTIFY, {k}");
    report_latency(ctx, &serial, &empty, &full, |b| &b.serial);
    ctx.report.note("6.: each block measures on an empty table, then with the jobs kept; the ratio is the median per-block ratio: retained / empty for drain rates, empty / retained for latency p50; ≥ 0.95 meets the 5 % budget");
    db::reset(&ctx.pool, None).await?;
    Ok(())
}

/// Every measurement of one block on the table as it is (`keep_upto` set: the
/// retained jobs stay).
async fn measure(
    ctx: &Ctx,
    sets: &[(&str, drain::Settings)],
    keep_upto: Option<i64>,
    what: &str,
) -> Result<Block> {
    let mut drains = Vec::new();
    for (name, s) in sets {
        let n = drain::backlog(ctx.quick);
        drains.push(drain::once(ctx, n, *s, keep_upto, &format!("{what}, {name}")).await?);
    }
    let (secs, n) = (latency::open_secs(ctx.quick), latency::serial_n(ctx.quick));
    let rate = latency::OPEN_RATE;
    let open = latency::open_loop(ctx, rate, secs, true, keep_upto, what).await?;
    let serial = latency::serial(ctx, n, true, keep_upto, what).await?;
    Ok(Block {
        drains,
        open,
        serial,
    })
}

fn report_latency(
    ctx: &mut Ctx,
    name: &str,
    empty: &[Block],
    full: &[Block],
    pick: fn(&Block) -> &latency::LatRun,
) {
    let p50 = |b: &[Block]| b.iter().map(|b| pick(b).p50).collect::<Vec<_>>();
    let pairs = Spread::of(&ratios(&p50(empty), &p50(full)));
    let e = Spread::of(&p50(empty));
    let e99 = Spread::of(&empty.iter().map(|b| pick(b).p99).collect::<Vec<_>>());
    let reference = format!(
        "empty table, right before in each block: p50 {} / p99 {} ms; per-block p50 ratios {}",
        e.plain(2),
        e99.plain(2),
        pairs.plain(2)
    );
    let runs: Vec<latency::LatRun> = full.iter().map(|b| pick(b).clone()).collect();
    latency::report(ctx, name, &runs, &reference, Some(pairs.median));
}

/// `a[i] / b[i]` for each pair.
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / b).collect()
}
