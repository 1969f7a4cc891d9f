//! The runtime's unprivileged actuators: the duty cycle (idle between decode steps), the
//! kernels' thread count, and their composition ([`Chain`]).

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};

pub(super) fn busy_for_level(level: usize, levels: usize, min_busy: f64) -> f64 {
    if levels <= 1 {
        return 1.0;
    }
    1.0 - (1.0 - min_busy) * level.min(levels - 1) as f64 / (levels - 1) as f64
}

/// Duty-cycle actuator: level k makes the decode loop busy a fraction
/// `1 − (1 − min_busy)·k/(levels − 1)` of the time by idling after each token. Needs no
/// privileges. The decode loop holds a [`DutyCycleHandle`] and sleeps for
/// [`DutyCycleHandle::pause_after_token`] after each token.
#[derive(Debug, Clone)]
pub struct DutyCycle {
    levels: usize,
    min_busy: f64,
    busy_bits: Arc<AtomicU64>,
}

/// The decode loop's view of a [`DutyCycle`]; cheap to clone, safe to share across threads.
#[derive(Debug, Clone)]
pub struct DutyCycleHandle {
    busy_bits: Arc<AtomicU64>,
}

impl DutyCycle {
    /// `levels` ≥ 1 duty steps from 100 % busy down to `min_busy` (0 < min_busy ≤ 1).
    pub fn new(levels: usize, min_busy: f64) -> Result<Self> {
        if levels == 0 || !(min_busy > 0.0 && min_busy <= 1.0) {
            return Err(Error::InvalidArgument {
                what: "duty_cycle".into(),
                reason: format!("need levels ≥ 1 and 0 < min_busy ≤ 1 (got {levels}, {min_busy})"),
            });
        }
        Ok(Self {
            levels,
            min_busy,
            busy_bits: Arc::new(AtomicU64::new(1.0f64.to_bits())),
        })
    }

    pub fn handle(&self) -> DutyCycleHandle {
        DutyCycleHandle {
            busy_bits: Arc::clone(&self.busy_bits),
        }
    }

    /// Busy fraction of `level`.
    pub fn busy_at(&self, level: usize) -> f64 {
        busy_for_level(level, self.levels, self.min_busy)
    }

    pub fn busy(&self) -> f64 {
        self.handle().busy()
    }

    /// See [`DutyCycleHandle::pause_after_token`].
    pub fn pause_after_token(&self, token_time: Duration) -> Duration {
        self.handle().pause_after_token(token_time)
    }
}

impl DutyCycleHandle {
    pub fn busy(&self) -> f64 {
        f64::from_bits(self.busy_bits.load(Ordering::Relaxed))
    }

    /// Idle time to insert after a token that took `token_time`, so that busy time over
    /// busy + idle time equals the current busy fraction: pause = t·(1 − b)/b.
    pub fn pause_after_token(&self, token_time: Duration) -> Duration {
        let b = self.busy();
        if b >= 1.0 || b <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(token_time.as_secs_f64() * (1.0 - b) / b)
    }
}

impl Actuator for DutyCycle {
    fn levels(&self) -> usize {
        self.levels
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.levels {
            return Err(Error::Governor(format!(
                "duty level {level} ≥ {} levels",
                self.levels
            )));
        }
        self.busy_bits
            .store(self.busy_at(level).to_bits(), Ordering::Relaxed);
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        ActuatorState {
            busy: Some(self.busy()),
            ..Default::default()
        }
    }
}

/// Called with the new thread count whenever a [`ThreadCount`] level is applied.
pub type ThreadSink = Arc<dyn Fn(usize) + Send + Sync>;

/// Thread-count actuator: level k runs `max_threads − k` decode threads (never below 1).
/// With a sink ([`ThreadCount::with_sink`], e.g. `Engine::set_active_threads`), applying a
/// level changes the threads the kernels use at once.
#[derive(Clone)]
pub struct ThreadCount {
    max_threads: usize,
    threads: Arc<AtomicUsize>,
    sink: Option<ThreadSink>,
}

impl std::fmt::Debug for ThreadCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadCount")
            .field("max_threads", &self.max_threads)
            .field("threads", &self.threads())
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

impl ThreadCount {
    pub fn new(max_threads: usize) -> Result<Self> {
        if max_threads == 0 {
            return Err(Error::InvalidArgument {
                what: "threads".into(),
                reason: "must be ≥ 1".into(),
            });
        }
        Ok(Self {
            max_threads,
            threads: Arc::new(AtomicUsize::new(max_threads)),
            sink: None,
        })
    }

    /// Like [`ThreadCount::new`], calling `sink(threads)` on every apply.
    pub fn with_sink(max_threads: usize, sink: ThreadSink) -> Result<Self> {
        let mut t = Self::new(max_threads)?;
        t.sink = Some(sink);
        Ok(t)
    }
    /// Shared counter the decode loop reads before each token.
    pub fn shared(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.threads)
    }
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::Relaxed)
    }
}

impl Actuator for ThreadCount {
    fn levels(&self) -> usize {
        self.max_threads
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.max_threads {
            return Err(Error::Governor(format!(
                "thread level {level} ≥ {} levels",
                self.max_threads
            )));
        }
        let n = self.max_threads - level;
        self.threads.store(n, Ordering::Relaxed);
        if let Some(sink) = &self.sink {
            sink(n);
        }
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        ActuatorState {
            threads: Some(self.threads()),
            ..Default::default()
        }
    }
}

/// Actuators used one after another: the first throttles through all its levels, then the
/// next one starts while the first stays at its most throttled level, and so on. E.g.
/// frequency caps from the top OPP down to the lowest, then duty cycle at the lowest OPP.
/// Levels: `1 + Σ (levels_i − 1)`.
pub struct Chain {
    parts: Vec<Box<dyn Actuator>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let levels: Vec<usize> = self.parts.iter().map(|p| p.levels()).collect();
        f.debug_struct("Chain").field("levels", &levels).finish()
    }
}

impl Chain {
    /// Errors when `parts` is empty or a part has no levels.
    pub fn new(parts: Vec<Box<dyn Actuator>>) -> Result<Self> {
        if parts.is_empty() || parts.iter().any(|p| p.levels() == 0) {
            return Err(Error::Governor(
                "a chain needs at least one actuator, each with ≥ 1 level".into(),
            ));
        }
        Ok(Self { parts })
    }

    /// The level of each part at chain level `level`.
    pub fn split(&self, level: usize) -> Vec<usize> {
        let mut left = level;
        self.parts
            .iter()
            .map(|p| {
                let take = left.min(p.levels() - 1);
                left -= take;
                take
            })
            .collect()
    }
}

impl Actuator for Chain {
    fn levels(&self) -> usize {
        1 + self.parts.iter().map(|p| p.levels() - 1).sum::<usize>()
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.levels() {
            return Err(Error::Governor(format!(
                "chain level {level} ≥ {} levels",
                self.levels()
            )));
        }
        let split = self.split(level);
        for (p, l) in self.parts.iter_mut().zip(split) {
            p.apply(l)?;
        }
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        self.parts
            .iter()
            .fold(ActuatorState::default(), |acc, p| acc.merge(p.state()))
    }
}
