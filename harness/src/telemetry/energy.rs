//! Energy meters: turn successive raw counter readings into cumulative energy.
//!
//! Preference order (chosen by the probe): Pixel ODPM rail counters (µW·s, summed over
//! rails), Linux powercap `energy_uj` (unwrapped at `max_energy_range_uj`), battery
//! `energy_counter` (µWh), battery `charge_counter` (µAh) × `voltage_now`, and finally the
//! trapezoid integral of `voltage_now` × `current_now`. Counters are cumulative, so a missed
//! sample loses no energy: the next delta spans the gap.

use std::collections::HashMap;

/// Accumulates energy from successive readings of one meter.
#[derive(Debug, Clone, Default)]
pub struct EnergyAccumulator {
    total_mj: f64,
    last: Option<MeterReading>,
}

/// One raw reading of the selected meter, taken at `t_s`.
#[derive(Debug, Clone, PartialEq)]
pub enum MeterReading {
    /// ODPM: per (device, channel) accumulated µW·s.
    Odpm(HashMap<(usize, u32), u64>),
    /// powercap: per zone (`energy_uj`, `max_energy_range_uj`).
    Powercap(Vec<(u64, Option<u64>)>),
    /// Battery energy counter, µWh (remaining energy: falls while discharging).
    EnergyCounter(i64),
    /// Battery charge counter, µAh (remaining: falls while discharging), and voltage, mV.
    ChargeCounter {
        /// µAh.
        uah: i64,
        /// mV.
        mv: f64,
    },
    /// Instantaneous discharge power, mW, at `t_s` (for the trapezoid).
    Power {
        /// Seconds on the caller's clock.
        t_s: f64,
        /// mW, discharge positive.
        mw: f64,
    },
}

/// Energy increment between two counter values that may have wrapped at `range`.
pub fn wrapped_delta(prev: u64, now: u64, range: Option<u64>) -> u64 {
    if now >= prev {
        now - prev
    } else {
        match range {
            // The counter ran up to `range` and restarted at 0.
            Some(r) if r >= prev => (r - prev) + now,
            // Unknown range or a reset: count what accumulated since the restart.
            _ => now,
        }
    }
}

impl EnergyAccumulator {
    /// A fresh accumulator at 0 mJ.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cumulative energy so far, mJ.
    pub fn total_mj(&self) -> f64 {
        self.total_mj
    }

    /// Feeds a new reading; returns the cumulative energy (mJ). A reading of a different
    /// shape than the previous one restarts the baseline without adding energy.
    pub fn push(&mut self, reading: MeterReading) -> f64 {
        if let Some(prev) = &self.last {
            self.total_mj += increment_mj(prev, &reading);
        }
        self.last = Some(reading);
        self.total_mj
    }
}

fn increment_mj(prev: &MeterReading, now: &MeterReading) -> f64 {
    match (prev, now) {
        (MeterReading::Odpm(a), MeterReading::Odpm(b)) => {
            let uws: u64 = b
                .iter()
                .map(|(k, &v)| match a.get(k) {
                    Some(&p) => wrapped_delta(p, v, None),
                    // A channel that appeared: its baseline starts now.
                    None => 0,
                })
                .sum();
            uws as f64 / 1000.0
        }
        (MeterReading::Powercap(a), MeterReading::Powercap(b)) if a.len() == b.len() => {
            let uj: u64 = a
                .iter()
                .zip(b)
                .map(|(&(p, _), &(n, r))| wrapped_delta(p, n, r))
                .sum();
            uj as f64 / 1000.0
        }
        (MeterReading::EnergyCounter(a), MeterReading::EnergyCounter(b)) => {
            // µWh → mJ: 1 µWh = 3.6 mJ. Remaining energy falls while discharging.
            (a - b) as f64 * 3.6
        }
        (
            MeterReading::ChargeCounter { uah: a, mv: va },
            MeterReading::ChargeCounter { uah: b, mv: vb },
        ) => {
            // µAh × V = 3.6 mJ; the mean terminal voltage over the interval.
            (a - b) as f64 * 3.6 * ((va + vb) / 2.0) / 1000.0
        }
        (MeterReading::Power { t_s: ta, mw: pa }, MeterReading::Power { t_s: tb, mw: pb }) => {
            let dt = tb - ta;
            if dt > 0.0 { (pa + pb) / 2.0 * dt } else { 0.0 }
        }
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powercap_wrap_counts_across_the_range() {
        // 262143328850 is a typical RAPL range; 1000 µJ before the wrap, 500 after.
        let r = 262_143_328_850u64;
        assert_eq!(wrapped_delta(r - 1000, 500, Some(r)), 1500);
        assert_eq!(wrapped_delta(10, 30, Some(r)), 20);
    }

    #[test]
    fn charge_counter_energy_is_charge_times_mean_voltage() {
        let mut acc = EnergyAccumulator::new();
        acc.push(MeterReading::ChargeCounter {
            uah: 1_000_000,
            mv: 4000.0,
        });
        // 1000 µAh at 3.9 V mean = 3.6 C × 3.9 V = 14.04 J.
        let e = acc.push(MeterReading::ChargeCounter {
            uah: 999_000,
            mv: 3800.0,
        });
        assert!((e - 14_040.0).abs() < 1e-6, "{e}");
    }

    #[test]
    fn trapezoid_of_power() {
        let mut acc = EnergyAccumulator::new();
        acc.push(MeterReading::Power {
            t_s: 0.0,
            mw: 1000.0,
        });
        let e = acc.push(MeterReading::Power {
            t_s: 2.0,
            mw: 3000.0,
        });
        assert!((e - 4000.0).abs() < 1e-9);
    }
}
