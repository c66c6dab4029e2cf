//! Waiting for the kernel to write dirty pages back to disk before a run, so a
//! run does not pay for the previous run's I/O.

use std::time::{Duration, Instant};

/// Most dirty or in-writeback memory tolerated before a run starts.
const SETTLED_KB: u64 = 64 * 1024;

/// Waits (at most 2 minutes) until the kernel's dirty and writeback pages are
/// under [`SETTLED_KB`]; says so when it had to wait. A no-op where
/// `/proc/meminfo` is unreadable (the server may also be on another machine).
pub async fn wait() {
    let started = Instant::now();
    while let Some(kb) = unwritten_kb() {
        if kb < SETTLED_KB || started.elapsed() > Duration::from_secs(120) {
            if started.elapsed() > Duration::from_secs(1) {
                println!(
                    "    (waited {:.0} s for {} MB of disk writeback to finish)",
                    started.elapsed().as_secs_f64(),
                    kb / 1024
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `Dirty` + `Writeback` from `/proc/meminfo`, in kB.
fn unwritten_kb() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some(field("Dirty:")? + field("Writeback:")?)
}
