//! Worker processes: spawn, signal, supervise and restart `lq-fault-worker`s.

use std::{
    fs::File,
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use tokio::process::{Child, Command};

/// How the workers of one fleet are started.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The `lq-fault-worker` binary.
    pub exe: PathBuf,
    /// `DATABASE_URL` of the scenario.
    pub db_url: String,
    /// Directory for one log file per worker.
    pub log_dir: PathBuf,
    /// Job slots on queue `default`.
    pub slots: usize,
    /// Shutdown grace period.
    pub grace_ms: u64,
    /// Leave SIGTERM to `Runtime::shutdown_on_signal`.
    pub builtin_signal: bool,
    /// Job slots on the cron queue (0: not served, so the worker schedules no
    /// recurring job).
    pub cron_slots: usize,
    /// `unknown_kind_grace` (the runtime's default when `None`).
    pub unknown_kind_grace_ms: Option<u64>,
}

/// One running worker process.
pub struct Worker {
    /// Its lease owner name.
    pub owner: String,
    /// Its process id.
    pub pid: u32,
    child: Child,
}

impl Worker {
    /// Starts a worker named `owner`; its output goes to `<log_dir>/<owner>.log`.
    pub fn spawn(spec: &WorkerSpec, owner: &str) -> Result<Self> {
        std::fs::create_dir_all(&spec.log_dir)?;
        let log = File::create(spec.log_dir.join(format!("{owner}.log")))?;
        let mut cmd = Command::new(&spec.exe);
        cmd.args([
            "--owner",
            owner,
            "--slots",
            &spec.slots.to_string(),
            "--grace-ms",
            &spec.grace_ms.to_string(),
        ]);
        if spec.builtin_signal {
            cmd.arg("--builtin-signal");
        }
        if let Some(ms) = spec.unknown_kind_grace_ms {
            cmd.args(["--unknown-kind-grace-ms", &ms.to_string()]);
        }
        if spec.cron_slots > 0 {
            cmd.args(["--cron-slots", &spec.cron_slots.to_string()]);
        }
        let child = cmd
            .env("DATABASE_URL", &spec.db_url)
            .env(
                "RUST_LOG",
                std::env::var("LQ_FAULT_WORKER_LOG").unwrap_or_else(|_| "info,sqlx=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", spec.exe.display()))?;
        let pid = child.id().context("worker exited at once")?;
        Ok(Self {
            owner: owner.to_owned(),
            pid,
            child,
        })
    }

    /// Sends `sig` (a name `kill -s` knows: STOP, CONT, TERM, KILL).
    pub fn signal(&self, sig: &str) -> Result<()> {
        let st = std::process::Command::new("kill")
            .args(["-s", sig, &self.pid.to_string()])
            .status()?;
        if !st.success() {
            bail!("kill -s {sig} {} failed", self.pid);
        }
        Ok(())
    }

    /// `kill -9`, then reaps the process.
    pub async fn kill9(&mut self) -> Result<ExitStatus> {
        self.child.start_kill()?;
        Ok(self.child.wait().await?)
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Waits up to `limit` for the process to exit.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<ExitStatus> {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(st) => Ok(st?),
            Err(_) => bail!("worker {} did not exit within {limit:?}", self.owner),
        }
    }
}

/// A worker that exited on its own, noticed by [`Fleet::supervise`].
#[derive(Debug)]
pub struct Exit {
    /// Its lease owner name.
    pub owner: String,
    /// How it ended.
    pub status: ExitStatus,
}

/// Numbered worker slots of one scenario; a restarted worker gets a new owner name.
pub struct Fleet {
    scenario: &'static str,
    spec: WorkerSpec,
    workers: Vec<Option<Worker>>,
    generation: Vec<u32>,
}

impl Fleet {
    /// An empty fleet.
    pub fn new(scenario: &'static str, spec: WorkerSpec) -> Self {
        Self {
            scenario,
            spec,
            workers: Vec::new(),
            generation: Vec::new(),
        }
    }

    /// Starts `n` more workers; returns their indices.
    pub fn start(&mut self, n: usize) -> Result<Vec<usize>> {
        (0..n).map(|_| self.start_one(self.spec.clone())).collect()
    }

    /// Starts one more worker with its own settings; returns its index.
    pub fn start_one(&mut self, spec: WorkerSpec) -> Result<usize> {
        let i = self.workers.len();
        let w = Worker::spawn(&spec, &format!("{}-w{i}-g0", self.scenario))?;
        self.workers.push(Some(w));
        self.generation.push(0);
        Ok(i)
    }

    /// The worker at `i`, if running.
    pub fn get(&self, i: usize) -> Option<&Worker> {
        self.workers.get(i).and_then(Option::as_ref)
    }

    /// The worker at `i` (mutable), if running.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Worker> {
        self.workers.get_mut(i).and_then(Option::as_mut)
    }

    /// Indices and owner names of running workers.
    pub fn live(&self) -> Vec<(usize, String)> {
        self.workers
            .iter()
            .enumerate()
            .filter_map(|(i, w)| w.as_ref().map(|w| (i, w.owner.clone())))
            .collect()
    }

    /// `kill -9` of worker `i`, then a replacement under a new owner name.
    /// Returns the victim's owner name.
    pub async fn kill9_and_restart(&mut self, i: usize) -> Result<String> {
        let mut w = self.workers[i].take().context("no worker at that index")?;
        w.kill9().await?;
        self.respawn(i)?;
        Ok(w.owner)
    }

    fn respawn(&mut self, i: usize) -> Result<()> {
        self.generation[i] += 1;
        let owner = format!("{}-w{i}-g{}", self.scenario, self.generation[i]);
        self.workers[i] = Some(Worker::spawn(&self.spec, &owner)?);
        Ok(())
    }

    /// Restarts every worker that exited on its own; returns how each ended.
    pub fn supervise(&mut self) -> Result<Vec<Exit>> {
        let mut exits = Vec::new();
        for i in 0..self.workers.len() {
            let Some(w) = self.workers[i].as_mut() else {
                continue;
            };
            if let Some(status) = w.exited()? {
                exits.push(Exit {
                    owner: w.owner.clone(),
                    status,
                });
                self.respawn(i)?;
            }
        }
        Ok(exits)
    }

    /// Takes worker `i` out of the fleet (not restarted).
    pub fn take(&mut self, i: usize) -> Option<Worker> {
        self.workers.get_mut(i).and_then(Option::take)
    }

    /// SIGTERM to every worker, then waits for each (graceful shutdown). Returns
    /// the owners that failed to stop cleanly, with why.
    pub async fn stop_all(&mut self, limit: Duration) -> Vec<String> {
        let mut bad = Vec::new();
        for w in self.workers.iter().flatten() {
            if let Err(e) = w.signal("TERM") {
                bad.push(format!("{}: {e}", w.owner));
            }
        }
        for slot in &mut self.workers {
            let Some(mut w) = slot.take() else { continue };
            match w.wait_exit(limit).await {
                Ok(st) if st.success() => {}
                Ok(st) => bad.push(format!("{} exited with {st} after SIGTERM", w.owner)),
                Err(e) => bad.push(e.to_string()),
            }
        }
        bad
    }
}
