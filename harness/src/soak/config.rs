//! Soak settings: durations with units, the check thresholds and the analysis windows, with
//! the defaults documented in `docs/SOAK.md`. The whole [`SoakConfig`] is written into the
//! journal's header, so `--resume` continues with exactly the settings the run started with.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A duration that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{flag} `{value}`: {reason} (examples: 72h, 10m, 90s, 500ms, 1h30m)")]
pub struct DurationError {
    pub flag: String,
    pub value: String,
    pub reason: String,
}

/// Parses `72h`, `10m`, `90s`, `250ms`, `2d`, `1h30m`, `1.5h` into seconds. Units: `ms`, `s`,
/// `m`, `h`, `d`. With `bare_unit_s`, a bare number is that many units (e.g. minutes for
/// `--probe-every`); without, a bare number is an error.
pub fn parse_duration(
    flag: &str,
    value: &str,
    bare_unit_s: Option<f64>,
) -> Result<f64, DurationError> {
    let err = |reason: &str| DurationError {
        flag: flag.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let v = value.trim();
    if v.is_empty() {
        return Err(err("empty"));
    }
    if let Ok(n) = v.parse::<f64>() {
        return match bare_unit_s {
            Some(unit) if n.is_finite() && n >= 0.0 => Ok(n * unit),
            Some(_) => Err(err("must be a finite number ≥ 0")),
            None => Err(err("needs a unit")),
        };
    }
    let mut total = 0.0;
    let mut rest = v;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("a number without a unit at the end"))?;
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| err("not a number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(err("unknown unit (use ms, s, m, h or d)")),
        };
        rest = &rest[unit_len..];
        total += n * unit;
    }
    if !total.is_finite() {
        return Err(err("too large"));
    }
    Ok(total)
}

/// `3723` → `1h02m03s`; below a minute with decimals.
pub fn format_duration(s: f64) -> String {
    if !s.is_finite() {
        return "?".into();
    }
    if s < 60.0 {
        return format!("{s:.1}s");
    }
    let t = s.round() as u64;
    let (h, m, sec) = (t / 3600, (t % 3600) / 60, t % 60);
    if h > 0 {
        format!("{h}h{m:02}m{sec:02}s")
    } else {
        format!("{m}m{sec:02}s")
    }
}

/// Major faults per hour a soak tolerates by default: a served model that stays resident
/// takes none after its first pass; a thousand an hour is the weights being read back from
/// storage over and over (memory pressure evicting them).
fn default_major_faults_per_h() -> f64 {
    1000.0
}

/// Thresholds of the checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// SUT crashes tolerated.
    pub max_crashes: u64,
    /// Stalled queries (timeouts) tolerated.
    pub max_timeouts: u64,
    /// RSS growth tolerated, MiB per hour (Theil–Sen slope).
    pub max_rss_growth_mib_per_h: f64,
    /// Major page faults of the server per hour after the warm-up, at most.
    #[serde(default = "default_major_faults_per_h")]
    pub max_major_faults_per_h: f64,
    /// Probe results that differ from the first round tolerated.
    pub max_output_drift: u64,
    /// P99 TPOT of the last window over the first steady window, minus 1 (0.10 = +10%).
    pub max_tpot_drift: f64,
    /// Worst window throughput / best, at least.
    pub min_stability: f64,
    /// SoC (die) temperature limit, °C.
    pub soc_limit_c: f64,
    /// Skin temperature limit, °C.
    pub skin_limit_c: f64,
    /// Time above either limit tolerated, s.
    pub max_time_above_limit_s: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_crashes: 0,
            max_timeouts: 0,
            max_rss_growth_mib_per_h: 1.0,
            max_major_faults_per_h: default_major_faults_per_h(),
            max_output_drift: 0,
            max_tpot_drift: 0.10,
            min_stability: 0.95,
            soc_limit_c: 95.0,
            skin_limit_c: 43.0,
            max_time_above_limit_s: 0.0,
        }
    }
}

/// Analysis windows, s. `None` = scaled from the duration (see [`Windows::resolve`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Windows {
    /// Latency-drift window ("hour").
    pub latency_s: Option<f64>,
    /// Warm-up excluded from the RSS fit, latency drift and stability.
    pub warmup_s: Option<f64>,
    /// Stability window ("5 minutes").
    pub stability_s: Option<f64>,
}

/// Windows with every value decided.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedWindows {
    pub latency_s: f64,
    pub warmup_s: f64,
    pub stability_s: f64,
}

impl Windows {
    /// The latency window is one hour, or a sixth of the soak when that is shorter; the
    /// warm-up is one latency window; the stability window is five minutes, or a twelfth of
    /// the soak when that is shorter. A 72-hour soak gets exactly the figures (1 h,
    /// 1 h, 5 min); a 30-minute soak 5 min, 5 min, 2.5 min; a 2-minute soak 20 s, 20 s, 10 s.
    pub fn resolve(&self, duration_s: f64) -> ResolvedWindows {
        let latency_s = self
            .latency_s
            .unwrap_or_else(|| (duration_s / 6.0).min(3600.0));
        ResolvedWindows {
            latency_s,
            warmup_s: self.warmup_s.unwrap_or(latency_s),
            stability_s: self
                .stability_s
                .unwrap_or_else(|| (duration_s / 12.0).min(300.0)),
        }
    }
}

/// Everything a soak runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoakConfig {
    /// Planned soak time, s (time the harness was not running is not counted).
    pub duration_s: f64,
    /// Checkpoint (journal record + interim report) period, s.
    pub checkpoint_every_s: f64,
    /// Probe-round period, s.
    pub probe_every_s: f64,
    /// Server memory sampling period, s (0 = after every query).
    pub rss_every_s: f64,
    /// Telemetry sampling period, s.
    pub telemetry_every_s: f64,
    /// Longest silence of the SUT inside a request, s.
    pub query_timeout_s: f64,
    /// Model file (on the serving side).
    pub model: PathBuf,
    pub threads: usize,
    /// Kernel tier for the server (`None` = its best or `POCKETPERF_ISA`).
    pub isa: Option<String>,
    pub ctx: usize,
    /// The server locks the model's mapping (`--mlock`).
    #[serde(default)]
    pub mlock: bool,
    /// The server reads the whole model in at load (`--prefault`).
    #[serde(default)]
    pub prefault: bool,
    /// The server's KV policy (`--kv-policy`, the load request's `kv_policy`; absent in
    /// journals written before it existed, which means `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_policy: Option<String>,
    /// Dialogues per cycle (the first N of the committed set).
    pub dialogues: usize,
    /// Cap on the tokens generated per dialogue turn (`None` = the dataset's budgets).
    pub max_turn_tokens: Option<u32>,
    /// Greedy probe prompts per round.
    pub probe_prompts: usize,
    /// Tokens generated per greedy probe.
    pub probe_tokens: usize,
    /// MMLU questions scored per round.
    pub probe_mmlu: usize,
    /// MMLU copy (resolved at start).
    pub mmlu_dir: Option<PathBuf>,
    /// `local` or `sim:<profile>`.
    pub device: String,
    /// Sysfs root read by the telemetry sampler on `local`.
    pub sysfs_root: PathBuf,
    /// Server command line (`None` = this binary's `serve`).
    pub serve_cmd: Option<String>,
    /// Fault injection passed to the server (tests).
    pub fault: Option<String>,
    pub thresholds: Thresholds,
    pub windows: Windows,
}

impl SoakConfig {
    /// Analysis windows for this soak's duration.
    pub fn windows(&self) -> ResolvedWindows {
        self.windows.resolve(self.duration_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        let p = |s: &str| parse_duration("--duration", s, None).unwrap();
        assert_eq!(p("72h"), 259_200.0);
        assert_eq!(p("10m"), 600.0);
        assert_eq!(p("90s"), 90.0);
        assert_eq!(p("250ms"), 0.25);
        assert_eq!(p("1h30m"), 5400.0);
        assert_eq!(p("1.5h"), 5400.0);
        assert_eq!(p("2d"), 172_800.0);
        assert_eq!(
            parse_duration("--probe-every", "10", Some(60.0)).unwrap(),
            600.0
        );
        for bad in ["", "10", "h", "10x", "1h30", "-5m"] {
            let e = parse_duration("--duration", bad, None)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("--duration"), "{bad}: {e}");
        }
        assert_eq!(format_duration(3723.0), "1h02m03s");
        assert_eq!(format_duration(125.0), "2m05s");
    }

    #[test]
    fn windows_scale_with_the_duration() {
        let w = Windows::default();
        let r = w.resolve(72.0 * 3600.0);
        assert_eq!(
            (r.latency_s, r.warmup_s, r.stability_s),
            (3600.0, 3600.0, 300.0)
        );
        let r = w.resolve(1800.0);
        assert_eq!(
            (r.latency_s, r.warmup_s, r.stability_s),
            (300.0, 300.0, 150.0)
        );
        let r = w.resolve(120.0);
        assert_eq!((r.latency_s, r.warmup_s, r.stability_s), (20.0, 20.0, 10.0));
        let r = Windows {
            warmup_s: Some(0.0),
            ..Default::default()
        }
        .resolve(120.0);
        assert_eq!(r.warmup_s, 0.0);
    }
}
