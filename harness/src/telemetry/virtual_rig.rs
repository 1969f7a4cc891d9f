//! Virtual time: a simulated handset and the telemetry sampler stepped in lockstep on a
//! virtual clock, so a run of minutes takes milliseconds and is exactly repeatable.
//!
//! The rig holds the workload's [`Activity`] piecewise constant: [`VirtualRig::advance`]
//! moves the clock, stepping the handset model only where something happens — the activity
//! changes, a sample is due (every sampler period, on the period grid), or the caller asks
//! for the ground truth. At each sample instant the model is stepped to that instant, its
//! sysfs tree rewritten, and [`SamplerCore::sample`] reads the tree through exactly the code
//! a device run uses. Every model step also appends a ground-truth point (clock, exact
//! energy), so energy the harness measures from the tree can be checked against the model.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::probe::{Probe, probe};
use super::sampler::{MonotonicClock, SamplerConfig, SamplerCore, SamplerOutput};
use super::{TelemetryError, TelemetryReport};
use crate::sim::model::{Activity, HandsetModel};
use crate::sim::{SimDevice, TruthPoint};

/// A simulated handset and a sampler on one virtual clock.
pub struct VirtualRig {
    device: SimDevice,
    now: Arc<AtomicU64>,
    probe: Probe,
    core: SamplerCore,
    period_ns: u64,
    next_sample_ns: u64,
    /// Activity in force since `sim_ns` (the model has been stepped up to `sim_ns`).
    activity: Activity,
    sim_ns: u64,
    trace: Vec<TruthPoint>,
}

/// What a finished rig hands back.
pub struct VirtualRecording {
    /// The report (probe, rows, summary) built from the recording.
    pub report: TelemetryReport,
    /// The handset (its model holds the final state).
    pub device: SimDevice,
    /// Ground-truth energy at every model step.
    pub trace: Vec<TruthPoint>,
}

impl VirtualRig {
    /// A rig for `profile` (`snapdragon-8gen3`, `pixel-8-pro`, with or without `sim:`), idle
    /// at ambient temperature, with the first sample taken at t = 0.
    pub fn new(profile: &str, config: SamplerConfig) -> Result<Self, TelemetryError> {
        let device = SimDevice::new(profile)?;
        let now = Arc::new(AtomicU64::new(0));
        let c = now.clone();
        let clock: MonotonicClock = Arc::new(move || c.load(Ordering::SeqCst));
        let probe = probe(device.root());
        let period_ns = (config.period.as_nanos() as u64).max(1_000_000);
        let mut core = SamplerCore::new(&probe, clock, config)?;
        let energy_j = device.energy_j();
        core.sample();
        Ok(Self {
            device,
            now,
            probe,
            core,
            period_ns,
            next_sample_ns: period_ns,
            activity: Activity {
                busy: 0.0,
                freq_level: 0,
            },
            sim_ns: 0,
            trace: vec![TruthPoint { t_ns: 0, energy_j }],
        })
    }

    /// The virtual clock (ns), for the code under test to timestamp with.
    pub fn clock(&self) -> MonotonicClock {
        let c = self.now.clone();
        Arc::new(move || c.load(Ordering::SeqCst))
    }

    /// Virtual time now, ns.
    pub fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    /// What the probe found on the simulated tree.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// The handset (its state as of the last model step).
    pub fn device(&self) -> &SimDevice {
        &self.device
    }

    /// The handset model (its state as of the last model step).
    pub fn model(&self) -> &HandsetModel {
        self.device.model()
    }

    /// The sampler (rows and events so far).
    pub fn sampler(&self) -> &SamplerCore {
        &self.core
    }

    /// Runs `activity` for `dt_ns`, sampling at every period boundary on the way.
    pub fn advance(&mut self, dt_ns: u64, activity: Activity) -> Result<(), TelemetryError> {
        if activity != self.activity {
            self.flush()?;
            self.activity = activity;
        }
        let end = self.now_ns().saturating_add(dt_ns);
        while self.next_sample_ns <= end {
            self.now.store(self.next_sample_ns, Ordering::SeqCst);
            self.flush()?;
            self.core.sample();
            self.next_sample_ns += self.period_ns;
        }
        self.now.store(end, Ordering::SeqCst);
        Ok(())
    }

    /// Ground-truth energy since power-on at the present instant, J (steps the model here).
    pub fn truth_j(&mut self) -> Result<f64, TelemetryError> {
        self.flush()?;
        Ok(self.device.energy_j())
    }

    /// Steps the model from where it stands to now under the activity in force.
    fn flush(&mut self) -> Result<(), TelemetryError> {
        let now = self.now_ns();
        if now > self.sim_ns {
            let dt_s = (now - self.sim_ns) as f64 / 1e9;
            self.device.step(dt_s, self.activity)?;
            self.sim_ns = now;
            self.trace.push(TruthPoint {
                t_ns: now,
                energy_j: self.device.energy_j(),
            });
        }
        Ok(())
    }

    /// Ground-truth points so far.
    pub fn trace(&self) -> &[TruthPoint] {
        &self.trace
    }

    /// Takes a last sample now, stops, and builds the report (`idle_window` on this clock).
    pub fn finish(
        mut self,
        idle_window: Option<(u64, u64)>,
    ) -> Result<VirtualRecording, TelemetryError> {
        self.flush()?;
        if self.core.rows().last().map(|r| r.t_ns) != Some(self.now_ns()) {
            self.core.sample();
        }
        let output: SamplerOutput = self.core.finish(0.0)?;
        Ok(VirtualRecording {
            report: TelemetryReport::new(self.probe, output, idle_window),
            device: self.device,
            trace: self.trace,
        })
    }
}
