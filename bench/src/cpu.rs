//! CPU time of this process and of every `postgres` process, from /proc.

use std::collections::HashMap;

/// Clock ticks per second of /proc/*/stat (USER_HZ, 100 on Linux).
const HZ: f64 = 100.0;

/// CPU ticks at one moment.
pub struct CpuSnap {
    me: u64,
    pg: HashMap<u32, u64>,
}

fn ticks(pid: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    // fields after comm: state(0) ... utime(11) stime(12)
    let t = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((comm, t))
}

impl CpuSnap {
    pub fn now() -> CpuSnap {
        let me = ticks("self").map_or(0, |(_, t)| t);
        let mut pg = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let name = e.file_name();
                let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if let Some((comm, t)) = ticks(&pid.to_string()) {
                    if comm.starts_with("postgres") || comm.starts_with("postmaster") {
                        pg.insert(pid, t);
                    }
                }
            }
        }
        CpuSnap { me, pg }
    }

    /// (this process, all postgres processes) CPU seconds since `earlier`.
    pub fn since(&self, earlier: &CpuSnap) -> (f64, f64) {
        let me = self.me.saturating_sub(earlier.me) as f64 / HZ;
        let pg: u64 = self
            .pg
            .iter()
            .map(|(pid, t)| t.saturating_sub(earlier.pg.get(pid).copied().unwrap_or(0)))
            .sum();
        (me, pg as f64 / HZ)
    }
}
