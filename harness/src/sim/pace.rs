//! The simulated handset's CPU clock imposed on the real runtime: when the handset runs below
//! its fastest OPP (the vendor's thermal cap, or a governor's frequency cap), the real decode
//! is stretched to the speed the handset would have, and the handset's power model counts the
//! stretch as busy time at that OPP.
//!
//! [`SimPace`] is shared by the driver thread that steps the handset ([`super::SimDriver`])
//! and the decode loop: the loop asks for an OPP ([`SimPace::request`]; the fastest unless a
//! governor caps it), the driver publishes the OPP in force after the vendor's cap at every
//! step. [`Pacer`] runs in the decode loop: after each token it sleeps the time since its
//! mark times `f_top / f_in_force − 1` (decode is compute-bound in the model:
//! `tps = base · f/f_max`) and adds the process CPU time of that token, times the same factor,
//! to a counter the driver adds to the process's CPU time. Over a stretched token the handset
//! thus sees the same busy fraction as over an unstretched one, at the lower OPP's power, and
//! the real runtime's tokens/s falls by the frequency ratio, as on the phone.
//! [`SimFreqCap`] is a governor actuator over the requested OPP.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pocketperf_runtime::governor::{Actuator, ActuatorState};

use super::model::HandsetProfile;
use crate::sim::cpu_clock_ns;

/// The OPP link between a simulated handset and the real decode loop.
#[derive(Debug)]
pub struct SimPace {
    requested: Arc<AtomicUsize>,
    in_force: AtomicUsize,
    stretched_cpu_ns: AtomicU64,
    driver_cpu_ns: AtomicU64,
    freqs_khz: Vec<u32>,
}

impl SimPace {
    /// A link for `profile`, the fastest OPP requested and in force.
    pub fn new(profile: &HandsetProfile) -> Arc<Self> {
        let top = profile.max_level();
        Arc::new(Self {
            requested: Arc::new(AtomicUsize::new(top)),
            in_force: AtomicUsize::new(top),
            stretched_cpu_ns: AtomicU64::new(0),
            driver_cpu_ns: AtomicU64::new(0),
            freqs_khz: profile.opps.iter().map(|o| o.freq_khz).collect(),
        })
    }

    /// The requested OPP, as the driver reads it.
    pub fn requested(&self) -> Arc<AtomicUsize> {
        self.requested.clone()
    }

    /// Asks for OPP `level` (clamped to the table).
    pub fn request(&self, level: usize) {
        self.requested
            .store(level.min(self.top()), Ordering::Relaxed);
    }

    /// Publishes the OPP in force (the driver, after each model step).
    pub fn set_in_force(&self, level: usize) {
        self.in_force
            .store(level.min(self.top()), Ordering::Relaxed);
    }

    /// The OPP in force.
    pub fn in_force(&self) -> usize {
        self.in_force.load(Ordering::Relaxed)
    }

    /// `f_top / f_in_force` (≥ 1): how much slower the handset decodes now.
    pub fn slowdown(&self) -> f64 {
        let f = |l: usize| f64::from(self.freqs_khz.get(l).copied().unwrap_or(0));
        let now = f(self.in_force());
        if now > 0.0 {
            (f(self.top()) / now).max(1.0)
        } else {
            1.0
        }
    }

    /// CPU-equivalent ns the stretches stand for, so far.
    pub fn stretched_cpu_ns(&self) -> u64 {
        self.stretched_cpu_ns.load(Ordering::Relaxed)
    }

    /// Publishes the driver thread's own CPU time (the driver, after each model step).
    pub fn set_driver_cpu_ns(&self, ns: u64) {
        self.driver_cpu_ns.store(ns, Ordering::Relaxed);
    }

    /// The CPU time the handset counts as the workload's, ns: the process's CPU time less
    /// the driver thread's (as of its last step), plus the stretches. Its growth over wall
    /// time and the runtime's threads is the busy fraction the handset's power follows.
    pub fn counted_cpu_ns(&self) -> u64 {
        process_cpu_ns()
            .saturating_sub(self.driver_cpu_ns.load(Ordering::Relaxed))
            .saturating_add(self.stretched_cpu_ns())
    }

    fn top(&self) -> usize {
        self.freqs_khz.len().saturating_sub(1)
    }
}

/// Stretches the real decode to the simulated handset's OPP, one token at a time.
#[derive(Debug)]
pub struct Pacer {
    pace: Arc<SimPace>,
    wall: Instant,
    cpu_ns: u64,
    stretched: Duration,
}

impl Pacer {
    /// A pacer over `pace`, marked now.
    pub fn new(pace: Arc<SimPace>) -> Self {
        Self {
            pace,
            wall: Instant::now(),
            cpu_ns: process_cpu_ns(),
            stretched: Duration::ZERO,
        }
    }

    /// Marks the start of work (a generation, or the end of a pause that is not work).
    pub fn mark(&mut self) {
        self.wall = Instant::now();
        self.cpu_ns = process_cpu_ns();
    }

    /// After a token: sleeps the stretch of the work since the mark, counts its CPU time for
    /// the handset, marks again and returns the stretch.
    pub fn after_token(&mut self) -> Duration {
        let extra = self.pace.slowdown() - 1.0;
        let mut stretch = Duration::ZERO;
        if extra > 1e-9 {
            let wall = self.wall.elapsed();
            let cpu = process_cpu_ns().saturating_sub(self.cpu_ns);
            stretch = wall.mul_f64(extra);
            self.pace
                .stretched_cpu_ns
                .fetch_add((cpu as f64 * extra) as u64, Ordering::Relaxed);
            std::thread::sleep(stretch);
            self.stretched += stretch;
        }
        self.mark();
        stretch
    }

    /// Total stretch inserted so far.
    pub fn stretched(&self) -> Duration {
        self.stretched
    }
}

fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// A governor actuator over a simulated handset's requested OPP: level k asks for the k-th
/// OPP from the top (the vendor's cap still applies on top). The decode loop hands the
/// request to the handset ([`SimPace::request`] with [`SimFreqCap::wanted`]).
#[derive(Debug)]
pub struct SimFreqCap {
    wanted: Arc<AtomicUsize>,
    freqs_khz: Vec<u32>,
}

impl SimFreqCap {
    /// Caps over `profile`'s OPP table, the fastest wanted.
    pub fn new(profile: &HandsetProfile) -> Self {
        Self {
            wanted: Arc::new(AtomicUsize::new(profile.max_level())),
            freqs_khz: profile.opps.iter().map(|o| o.freq_khz).collect(),
        }
    }

    /// The OPP wanted now.
    pub fn wanted(&self) -> Arc<AtomicUsize> {
        self.wanted.clone()
    }
}

impl Actuator for SimFreqCap {
    fn levels(&self) -> usize {
        self.freqs_khz.len()
    }

    fn apply(&mut self, level: usize) -> pocketperf_runtime::Result<()> {
        let n = self.freqs_khz.len();
        if level >= n {
            return Err(pocketperf_runtime::Error::Governor(format!(
                "simulated cap level {level} ≥ {n} levels"
            )));
        }
        self.wanted.store(n - 1 - level, Ordering::Relaxed);
        Ok(())
    }

    fn state(&self) -> ActuatorState {
        let l = self.wanted.load(Ordering::Relaxed);
        ActuatorState {
            caps: self
                .freqs_khz
                .get(l)
                .map(|f| u64::from(*f))
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }
}
