//! Terminal progress for long work: shown on a TTY, silent otherwise (CI logs, pipes) — except
//! [`RunProgress`], the progress of a `pocketperf run`, which off a terminal prints one
//! heartbeat line every [`HEARTBEAT`] instead, so a CI log shows the run is alive.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pocketperf_scenarios::{Phase, Progress};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A spinner with elapsed time, for work of unknown length.
pub fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, target());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]") {
        pb.set_style(style);
    }
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A bar over `len` items.
pub fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), target());
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})")
    {
        pb.set_style(style);
    }
    pb.set_message(msg.to_string());
    pb
}

/// Interval of the heartbeat lines a run prints when stderr is not a terminal.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Environment variable overriding [`HEARTBEAT`], in milliseconds (at least 1; tests use a
/// short one).
pub const ENV_HEARTBEAT_MS: &str = "POCKETPERF_HEARTBEAT_MS";
/// Redraw interval of the terminal bar.
const REDRAW: Duration = Duration::from_millis(250);

/// The heartbeat interval in effect: [`ENV_HEARTBEAT_MS`] when set, else [`HEARTBEAT`].
pub fn heartbeat_interval() -> anyhow::Result<Duration> {
    match std::env::var(ENV_HEARTBEAT_MS) {
        Err(_) => Ok(HEARTBEAT),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms >= 1 => Ok(Duration::from_millis(ms)),
            _ => {
                anyhow::bail!("{ENV_HEARTBEAT_MS}={v:?}: expected a whole number of ms, at least 1")
            }
        },
    }
}

/// What a run must reach before it may end: the figures its progress is measured against.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// First word of each line (`single-stream`, `dialogue`, …).
    pub label: String,
    /// What is counted (`queries`, `dialogues`).
    pub unit: &'static str,
    /// Minimum count (LoadGen's `min_query_count`; the dialogue count).
    pub min_count: u64,
    /// Minimum duration of the timed pass (zero: none).
    pub min_duration: Duration,
    /// Longest the timed pass may issue for (`max_duration`), when bounded.
    pub max_duration: Option<Duration>,
}

/// One reading of a run's progress.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub phase: Option<Phase>,
    /// Units done in the timed pass.
    pub done: u64,
    /// The count the pass runs to: its fixed size (Offline, dialogues) or the minimum.
    pub target: u64,
    /// Output tokens of the timed pass so far.
    pub tokens: u64,
    /// Since the current pass started.
    pub elapsed: Duration,
}

/// Seconds left, as far as the run so far tells: the longer of the time to reach the target
/// count at the rate so far and the time to the minimum duration, cut at the maximum
/// duration. `None` before anything is done while the count still decides.
pub fn eta(plan: &RunPlan, s: &Snapshot) -> Option<Duration> {
    let by_time = plan.min_duration.saturating_sub(s.elapsed);
    let by_count = if s.done >= s.target {
        Duration::ZERO
    } else if s.done == 0 {
        return None;
    } else {
        s.elapsed
            .mul_f64((s.target - s.done) as f64 / s.done as f64)
    };
    let left = by_time.max(by_count);
    Some(match plan.max_duration {
        Some(m) => left.min(m.saturating_sub(s.elapsed)),
        None => left,
    })
}

/// The status line of a snapshot (the terminal message and the heartbeat line).
pub fn status_line(plan: &RunPlan, s: &Snapshot) -> String {
    let secs = s.elapsed.as_secs_f64();
    match s.phase {
        None => format!("{}: setting up", plan.label),
        Some(Phase::Warmup) => format!("{}: warm-up, {secs:.0} s", plan.label),
        Some(Phase::Timed) => {
            let rate = if secs > 0.0 {
                s.tokens as f64 / secs
            } else {
                0.0
            };
            let min_d = plan.min_duration.as_secs_f64();
            let eta = eta(plan, s).map_or("?".into(), |d| format!("{:.0} s", d.as_secs_f64()));
            format!(
                "{}: {}/{} {}, {secs:.0}/{min_d:.0} s (min duration), {rate:.1} tokens/s, ETA {eta}",
                plan.label, s.done, s.target, plan.unit
            )
        }
    }
}

#[derive(Debug)]
struct Shared {
    plan: RunPlan,
    /// 0 set-up, 1 warm-up, 2 timed.
    phase: AtomicU8,
    done: AtomicU64,
    tokens: AtomicU64,
    /// Fixed size of the current pass, `u64::MAX` when none.
    planned: AtomicU64,
    started: Mutex<Instant>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn snapshot(&self) -> Snapshot {
        let phase = match self.phase.load(Ordering::Relaxed) {
            1 => Some(Phase::Warmup),
            2 => Some(Phase::Timed),
            _ => None,
        };
        let planned = self.planned.load(Ordering::Relaxed);
        let started = self.started.lock().map_or_else(|e| *e.into_inner(), |g| *g);
        Snapshot {
            phase,
            done: self.done.load(Ordering::Relaxed),
            target: if planned == u64::MAX {
                self.plan.min_count
            } else {
                planned
            },
            tokens: self.tokens.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
        }
    }
}

/// The progress of one run: a [`Progress`] observer of the scenario engine (or of the
/// dialogue loop) whose figures a thread shows, on a terminal as a bar with the status line,
/// elsewhere as a heartbeat line on stderr every [`heartbeat_interval`].
pub struct RunProgress {
    shared: Arc<Shared>,
    ticker: Option<JoinHandle<()>>,
}

impl RunProgress {
    /// Starts showing the progress of a run planned as `plan`.
    pub fn start(plan: RunPlan) -> anyhow::Result<Self> {
        let heartbeat = heartbeat_interval()?;
        let shared = Arc::new(Shared {
            plan,
            phase: AtomicU8::new(0),
            done: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            planned: AtomicU64::new(u64::MAX),
            started: Mutex::new(Instant::now()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let terminal = std::io::stderr().is_terminal();
        let ticker = std::thread::Builder::new()
            .name("run-progress".into())
            .spawn(move || tick(&s, terminal, heartbeat))?;
        Ok(RunProgress {
            shared,
            ticker: Some(ticker),
        })
    }

    /// Stops the display; off a terminal, one last line with the final figures.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Ok(mut stop) = self.shared.stop.lock() {
            *stop = true;
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunProgress {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Progress for RunProgress {
    fn pass_started(&self, phase: Phase, queries: Option<u64>, _t_ns: u64) {
        let s = &self.shared;
        if let Ok(mut t) = s.started.lock() {
            *t = Instant::now();
        }
        s.done.store(0, Ordering::Relaxed);
        s.tokens.store(0, Ordering::Relaxed);
        s.planned
            .store(queries.unwrap_or(u64::MAX), Ordering::Relaxed);
        s.phase.store(
            match phase {
                Phase::Warmup => 1,
                Phase::Timed => 2,
            },
            Ordering::Relaxed,
        );
    }

    fn token(&self) {
        self.shared.tokens.fetch_add(1, Ordering::Relaxed);
    }

    fn query_done(&self, tokens: u64, stamped: u64) {
        let s = &self.shared;
        s.done.fetch_add(1, Ordering::Relaxed);
        s.tokens
            .fetch_add(tokens.saturating_sub(stamped), Ordering::Relaxed);
    }
}

/// The display thread: redraws the bar every [`REDRAW`] on a terminal, else prints a line
/// every `heartbeat`; ends when told to stop.
fn tick(s: &Shared, terminal: bool, heartbeat: Duration) {
    let bar = terminal.then(|| {
        let pb =
            ProgressBar::with_draw_target(Some(s.plan.min_count), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {bar:20} {msg}") {
            pb.set_style(style);
        }
        pb
    });
    let period = if terminal { REDRAW } else { heartbeat };
    let mut stop = match s.stop.lock() {
        Ok(g) => g,
        Err(_) => return,
    };
    loop {
        // A stop asked for before this thread first took the lock is seen here, not after
        // a whole period.
        if !*stop {
            stop = match s.wake.wait_timeout(stop, period) {
                Ok((g, _)) => g,
                Err(_) => return,
            };
        }
        let snap = s.snapshot();
        let line = status_line(&s.plan, &snap);
        match &bar {
            Some(pb) => {
                pb.set_length(snap.target.max(1));
                pb.set_position(snap.done.min(snap.target));
                pb.set_message(line);
                pb.tick();
            }
            None => eprintln!("{line}"),
        }
        if *stop {
            if let Some(pb) = &bar {
                pb.finish_and_clear();
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> RunPlan {
        RunPlan {
            label: "single-stream".into(),
            unit: "queries",
            min_count: 64,
            min_duration: Duration::from_secs(5),
            max_duration: Some(Duration::from_secs(150)),
        }
    }

    fn snap(done: u64, secs: u64) -> Snapshot {
        Snapshot {
            phase: Some(Phase::Timed),
            done,
            target: 64,
            tokens: done * 32,
            elapsed: Duration::from_secs(secs),
        }
    }

    #[test]
    fn the_eta_is_the_longer_of_count_and_duration_cut_at_the_maximum() {
        // 16 of 64 in 8 s: 48 more at 2 per second.
        assert_eq!(eta(&plan(), &snap(16, 8)), Some(Duration::from_secs(24)));
        // The count is reached, the minimum duration is not: 5 − 1 s.
        assert_eq!(eta(&plan(), &snap(64, 1)), Some(Duration::from_secs(4)));
        // 1 of 64 in 100 s would take 6300 s more; the maximum duration leaves 50.
        assert_eq!(eta(&plan(), &snap(1, 100)), Some(Duration::from_secs(50)));
        assert_eq!(eta(&plan(), &snap(0, 3)), None);
    }

    #[test]
    fn the_status_line_names_count_duration_rate_and_eta() {
        let l = status_line(&plan(), &snap(16, 8));
        assert_eq!(
            l,
            "single-stream: 16/64 queries, 8/5 s (min duration), 64.0 tokens/s, ETA 24 s"
        );
        let mut s = snap(0, 3);
        s.phase = Some(Phase::Warmup);
        assert_eq!(status_line(&plan(), &s), "single-stream: warm-up, 3 s");
    }

    #[test]
    fn the_observer_counts_tokens_streamed_and_reported_at_completion() {
        let p = RunProgress::start(plan()).unwrap();
        p.pass_started(Phase::Timed, Some(3), 0);
        p.token();
        p.token();
        p.query_done(2, 2);
        p.query_done(5, 0);
        let s = p.shared.snapshot();
        assert_eq!((s.done, s.target, s.tokens), (2, 3, 7));
        p.finish();
    }
}
