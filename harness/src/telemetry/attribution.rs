//! Energy and temperature attribution to intervals of a run (queries, dialogues, idle
//! windows), and the dialogue energy summary.
//!
//! Energy between two instants is the difference of the cumulative meter curve, with the
//! counter interpolated linearly between the samples that bracket each boundary. Net energy
//! subtracts an idle baseline: `net = gross − P_idle × duration`, where `P_idle` is the mean
//! power of an idle window measured before the run. Temperatures are the time-weighted mean
//! (trapezoid) and the peak of the piecewise-linear signal over the interval. The dialogue
//! mean carries a Student-t 95 % confidence interval.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::sampler::SamplerOutput;

/// mWh per J.
pub const MWH_PER_J: f64 = 1.0 / 3.6;

/// Linear interpolation of a time series at `t` (ns); None outside its range.
pub fn interpolate(series: &[(u64, f64)], t: u64) -> Option<f64> {
    let first = series.first()?;
    let last = series.last()?;
    if t < first.0 || t > last.0 {
        return None;
    }
    let idx = series.partition_point(|p| p.0 < t);
    let (t1, v1) = series[idx];
    if t1 == t || idx == 0 {
        return Some(v1);
    }
    let (t0, v0) = series[idx - 1];
    let x = (t - t0) as f64 / (t1 - t0) as f64;
    Some(v0 + x * (v1 - v0))
}

/// Time-weighted mean and peak of the piecewise-linear signal over `[t0, t1]`.
pub fn mean_and_peak(series: &[(u64, f64)], t0: u64, t1: u64) -> Option<(f64, f64)> {
    if t1 < t0 {
        return None;
    }
    let a = interpolate(series, t0)?;
    let b = interpolate(series, t1)?;
    let mut pts = vec![(t0, a)];
    pts.extend(series.iter().copied().filter(|p| p.0 > t0 && p.0 < t1));
    pts.push((t1, b));
    let peak = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    if t1 == t0 {
        return Some((a, peak));
    }
    let area: f64 = pts
        .windows(2)
        .map(|w| (w[1].0 - w[0].0) as f64 * (w[0].1 + w[1].1) / 2.0)
        .sum();
    Some((area / (t1 - t0) as f64, peak))
}

/// Gross energy (J) between two instants of a recording; None if either lies outside the
/// metered range.
pub fn energy_between_j(out: &SamplerOutput, t0: u64, t1: u64) -> Option<f64> {
    let e = out.series(out.col_energy);
    let a = interpolate(&e, t0)?;
    let b = interpolate(&e, t1)?;
    Some((b - a) / 1000.0)
}

/// Mean power (W) over a window: the idle baseline when the window is idle.
pub fn mean_power_w(out: &SamplerOutput, t0: u64, t1: u64) -> Option<f64> {
    if t1 <= t0 {
        return None;
    }
    energy_between_j(out, t0, t1).map(|j| j / ((t1 - t0) as f64 / 1e9))
}

/// Energy and temperatures attributed to one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalEnergy {
    /// Interval start, caller clock ns.
    pub start_ns: u64,
    /// Interval end, caller clock ns.
    pub end_ns: u64,
    /// Duration, s.
    pub duration_s: f64,
    /// Gross energy, J.
    pub gross_j: f64,
    /// Net energy (gross − idle baseline × duration), J; None without a baseline.
    pub net_j: Option<f64>,
    /// Gross energy, mWh.
    pub gross_mwh: f64,
    /// Net energy, mWh.
    pub net_mwh: Option<f64>,
    /// Mean SoC temperature, °C.
    pub soc_mean_c: Option<f64>,
    /// Peak SoC temperature, °C.
    pub soc_peak_c: Option<f64>,
    /// Mean skin temperature, °C.
    pub skin_mean_c: Option<f64>,
    /// Peak skin temperature, °C.
    pub skin_peak_c: Option<f64>,
}

/// Attributes energy and temperatures to each `(start_ns, end_ns)` interval. Intervals outside
/// the metered range (or reversed) get no entry's energy: they are returned as None.
pub fn attribute(
    out: &SamplerOutput,
    intervals: &[(u64, u64)],
    idle_power_w: Option<f64>,
) -> Vec<Option<IntervalEnergy>> {
    let soc = out.col_soc.map(|c| out.series(c));
    let skin = out.col_skin.map(|c| out.series(c));
    intervals
        .iter()
        .map(|&(t0, t1)| {
            if t1 < t0 {
                return None;
            }
            let gross_j = energy_between_j(out, t0, t1)?;
            let duration_s = (t1 - t0) as f64 / 1e9;
            let net_j = idle_power_w.map(|p| gross_j - p * duration_s);
            let s = soc.as_deref().and_then(|s| mean_and_peak(s, t0, t1));
            let k = skin.as_deref().and_then(|s| mean_and_peak(s, t0, t1));
            Some(IntervalEnergy {
                start_ns: t0,
                end_ns: t1,
                duration_s,
                gross_j,
                net_j,
                gross_mwh: gross_j * MWH_PER_J,
                net_mwh: net_j.map(|j| j * MWH_PER_J),
                soc_mean_c: s.map(|v| v.0),
                soc_peak_c: s.map(|v| v.1),
                skin_mean_c: k.map(|v| v.0),
                skin_peak_c: k.map(|v| v.1),
            })
        })
        .collect()
}

/// One dialogue: its interval and the tokens it generated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DialogueSpan {
    /// Start, caller clock ns.
    pub start_ns: u64,
    /// End, caller clock ns.
    pub end_ns: u64,
    /// Tokens generated.
    pub tokens: u64,
}

/// Mean of a sample with its sample standard deviation and 95 % Student-t interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeanInterval {
    /// Values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (0 for n = 1).
    pub sd: f64,
    /// 95 % interval of the mean (None for n < 2).
    pub ci95: Option<(f64, f64)>,
}

impl MeanInterval {
    /// Summarizes `xs` (None when empty).
    pub fn of(xs: &[f64]) -> Option<Self> {
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Self {
            n,
            mean,
            sd,
            ci95: t_interval_95(xs),
        })
    }
}

/// Energy per dialogue over a run: gross always, net when an idle baseline exists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DialogueSummary {
    /// Dialogues with energy.
    pub n: usize,
    /// mWh per dialogue, gross (idle included).
    pub gross_mwh: Option<MeanInterval>,
    /// mWh per dialogue, net of the idle baseline.
    pub net_mwh: Option<MeanInterval>,
    /// Tokens generated over the dialogues with energy.
    pub tokens: u64,
    /// Gross J per generated token.
    pub j_per_token_gross: Option<f64>,
    /// Net J per generated token.
    pub j_per_token_net: Option<f64>,
    /// Generated tokens per gross J.
    pub tokens_per_j_gross: Option<f64>,
    /// Generated tokens per net J.
    pub tokens_per_j_net: Option<f64>,
    /// Every dialogue's attribution, in input order (None: outside the metered range).
    pub per_dialogue: Vec<Option<IntervalEnergy>>,
    /// Dialogues left out (outside the metered range).
    pub skipped: usize,
}

/// Two-sided 95 % Student-t interval of the mean of `xs` (None for fewer than 2 values).
pub fn t_interval_95(xs: &[f64]) -> Option<(f64, f64)> {
    let n = xs.len();
    if n < 2 {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
        .ok()?
        .inverse_cdf(0.975);
    let half = t * (var / n as f64).sqrt();
    Some((mean - half, mean + half))
}

/// Summarizes energy per dialogue: gross, and net when a baseline is given.
pub fn dialogue_summary(
    out: &SamplerOutput,
    dialogues: &[DialogueSpan],
    idle_power_w: Option<f64>,
) -> DialogueSummary {
    let intervals: Vec<(u64, u64)> = dialogues.iter().map(|d| (d.start_ns, d.end_ns)).collect();
    let per_dialogue = attribute(out, &intervals, idle_power_w);
    let mut gross = Vec::new();
    let mut net = Vec::new();
    let (mut gross_j, mut net_j) = (0.0, 0.0);
    let mut tokens = 0u64;
    for (d, a) in dialogues.iter().zip(&per_dialogue) {
        if let Some(a) = a {
            gross.push(a.gross_mwh);
            gross_j += a.gross_j;
            if let Some(n) = a.net_j {
                net.push(n * MWH_PER_J);
                net_j += n;
            }
            tokens += d.tokens;
        }
    }
    let per = |j: f64| (tokens > 0).then(|| j / tokens as f64);
    let inv = |j: f64| (j > 0.0).then(|| tokens as f64 / j);
    let has_net = !net.is_empty();
    DialogueSummary {
        n: gross.len(),
        gross_mwh: MeanInterval::of(&gross),
        net_mwh: MeanInterval::of(&net),
        tokens,
        j_per_token_gross: per(gross_j),
        j_per_token_net: if has_net { per(net_j) } else { None },
        tokens_per_j_gross: inv(gross_j),
        tokens_per_j_net: if has_net { inv(net_j) } else { None },
        skipped: per_dialogue.iter().filter(|a| a.is_none()).count(),
        per_dialogue,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_and_trapezoid_mean() {
        let s = [(0u64, 0.0), (10, 10.0), (20, 10.0)];
        assert_eq!(interpolate(&s, 5), Some(5.0));
        assert_eq!(interpolate(&s, 21), None);
        // Over [5, 15]: ramp 5→10 for 5 ns (mean 7.5), flat 10 for 5 ns → 8.75.
        let (m, p) = mean_and_peak(&s, 5, 15).unwrap();
        assert!((m - 8.75).abs() < 1e-12);
        assert_eq!(p, 10.0);
    }

    #[test]
    fn t_interval_matches_table_value() {
        // n = 5, sd = sqrt(2.5), t(0.975, 4) = 2.776445 → half = 2.776445·sqrt(0.5).
        let (lo, hi) = t_interval_95(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let half = 2.776_445 * 0.5f64.sqrt();
        assert!((lo - (3.0 - half)).abs() < 1e-5 && (hi - (3.0 + half)).abs() < 1e-5);
    }
}
