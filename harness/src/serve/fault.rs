//! Fault injection for robustness tests: the faults a soak must detect, injected into a real
//! `pocketperf serve` process. Enabled only by `POCKETPERF_FAULT` in the server's environment
//! or its hidden `--fault` flag; the `hello` event announces an active fault so no result is
//! ever mistaken for a clean one.
//!
//! Spec: comma-separated `key=value` pairs (`docs/SOAK.md`):
//! - `crash_after=K`: the request after the K-th completed `query`/`score` aborts the process
//!   (SIGABRT), a `query` after streaming its first token;
//! - `leak_kib=N`: every `query`/`score` leaks N KiB of touched heap;
//! - `flip_after=K`: from the (K+1)-th request on, outputs change: the first generated token
//!   of a `query` is replaced by the next id, the first log-probability of a `score` moves by
//!   one unit in the last place;
//! - `stall_after=K`: the request after the K-th sleeps `stall_ms` (default one hour) before
//!   it starts, without a word on stdout;
//! - `refuse_stats_after=K`: once K `query`/`score` requests are completed, every `stats`
//!   request is refused with a `runtime` error (the server stays up): memory sampling that
//!   gives no figure.

use std::fmt;

/// Environment variable holding a fault spec.
pub const FAULT_ENV: &str = "POCKETPERF_FAULT";

/// A parsed fault spec. `None` fields are off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultSpec {
    pub crash_after: Option<u64>,
    pub leak_kib: Option<u64>,
    pub flip_after: Option<u64>,
    pub stall_after: Option<u64>,
    pub stall_ms: u64,
    pub refuse_stats_after: Option<u64>,
}

/// A spec that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "fault spec `{spec}`: {reason} (expected comma-separated crash_after=K, leak_kib=N, flip_after=K, stall_after=K, stall_ms=MS, refuse_stats_after=K)"
)]
pub struct FaultSpecError {
    pub spec: String,
    pub reason: String,
}

const DEFAULT_STALL_MS: u64 = 3_600_000;
/// Most KiB `leak_kib` may leak per request: 1 GiB, enough to exhaust a phone in a few
/// requests, while the size of one allocation stays far from overflowing.
pub const MAX_LEAK_KIB: u64 = 1 << 20;
/// Longest `stall_ms`: one day, far beyond any query timeout a soak uses.
pub const MAX_STALL_MS: u64 = 86_400_000;

impl FaultSpec {
    /// Parses a spec; an empty string is no fault.
    pub fn parse(spec: &str) -> Result<Self, FaultSpecError> {
        let err = |reason: String| FaultSpecError {
            spec: spec.to_string(),
            reason,
        };
        let mut f = FaultSpec {
            stall_ms: DEFAULT_STALL_MS,
            ..Default::default()
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| err(format!("`{part}` has no `=`")))?;
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| err(format!("`{v}` in `{part}` is not a whole number")))?;
            let bounded = |key: &str, max: u64| {
                if n <= max {
                    Ok(n)
                } else {
                    Err(err(format!(
                        "{key}={n} is out of range: allowed 0 to {max}"
                    )))
                }
            };
            match k.trim() {
                "crash_after" => f.crash_after = Some(n),
                "leak_kib" => f.leak_kib = Some(bounded("leak_kib", MAX_LEAK_KIB)?),
                "flip_after" => f.flip_after = Some(n),
                "stall_after" => f.stall_after = Some(n),
                "stall_ms" => f.stall_ms = bounded("stall_ms", MAX_STALL_MS)?,
                "refuse_stats_after" => f.refuse_stats_after = Some(n),
                other => return Err(err(format!("unknown fault `{other}`"))),
            }
        }
        Ok(f)
    }

    /// Whether any fault is on.
    pub fn is_active(&self) -> bool {
        self.crash_after.is_some()
            || self.leak_kib.is_some()
            || self.flip_after.is_some()
            || self.stall_after.is_some()
            || self.refuse_stats_after.is_some()
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(k) = self.crash_after {
            parts.push(format!("crash_after={k}"));
        }
        if let Some(n) = self.leak_kib {
            parts.push(format!("leak_kib={n}"));
        }
        if let Some(k) = self.flip_after {
            parts.push(format!("flip_after={k}"));
        }
        if let Some(k) = self.stall_after {
            parts.push(format!("stall_after={k}"));
            parts.push(format!("stall_ms={}", self.stall_ms));
        }
        if let Some(k) = self.refuse_stats_after {
            parts.push(format!("refuse_stats_after={k}"));
        }
        f.write_str(&parts.join(","))
    }
}

/// The fault state of one server process.
#[derive(Debug, Default)]
pub struct Faults {
    spec: FaultSpec,
    leaked: Vec<Vec<u8>>,
}

impl Faults {
    pub fn new(spec: FaultSpec) -> Self {
        Faults {
            spec,
            leaked: Vec::new(),
        }
    }

    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// The spec for the `hello` event, `None` when no fault is on.
    pub fn announce(&self) -> Option<String> {
        self.spec.is_active().then(|| self.spec.to_string())
    }

    /// Whether request number `served` (0-based count of completed query/score requests
    /// before it) must crash.
    pub fn crash_now(&self, served: u64) -> bool {
        self.spec.crash_after.is_some_and(|k| served >= k)
    }

    /// Whether outputs of request number `served` are altered.
    pub fn flip_now(&self, served: u64) -> bool {
        self.spec.flip_after.is_some_and(|k| served >= k)
    }

    /// Whether a `stats` request, after `served` completed query/score requests, is refused.
    pub fn refuse_stats_now(&self, served: u64) -> bool {
        self.spec.refuse_stats_after.is_some_and(|k| served >= k)
    }

    /// Sleeps if request number `served` must stall.
    pub fn maybe_stall(&self, served: u64) {
        if self.spec.stall_after.is_some_and(|k| served >= k) {
            eprintln!(
                "fault injection: stalling request {} for {} ms",
                served + 1,
                self.spec.stall_ms
            );
            std::thread::sleep(std::time::Duration::from_millis(self.spec.stall_ms));
        }
    }

    /// Leaks `leak_kib` KiB of heap, every page written so it is resident.
    pub fn leak(&mut self) {
        if let Some(kib) = self.spec.leak_kib
            && kib > 0
        {
            // Filled with a non-zero byte: zeroed allocations may stay unbacked.
            self.leaked
                .push(vec![0xA5u8; (kib as usize).saturating_mul(1024)]);
        }
    }

    /// Aborts the process (the injected crash).
    pub fn crash(&self, served: u64) -> ! {
        eprintln!(
            "fault injection: crashing on request {} (crash_after={})",
            served + 1,
            self.spec.crash_after.unwrap_or(0)
        );
        std::process::abort()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parses_and_prints_back() {
        let f = FaultSpec::parse(
            "crash_after=3, leak_kib=64,stall_after=2,stall_ms=50,refuse_stats_after=4",
        )
        .unwrap();
        assert_eq!(f.refuse_stats_after, Some(4));
        assert_eq!(f.crash_after, Some(3));
        assert_eq!(f.leak_kib, Some(64));
        assert_eq!(f.stall_after, Some(2));
        assert_eq!(f.stall_ms, 50);
        assert_eq!(FaultSpec::parse(&f.to_string()).unwrap(), f);
        assert!(!FaultSpec::parse("").unwrap().is_active());
        let e = FaultSpec::parse("crash_after=x").unwrap_err().to_string();
        assert!(e.contains("`x`"), "{e}");
        assert!(
            FaultSpec::parse("explode=1")
                .unwrap_err()
                .to_string()
                .contains("explode")
        );
        assert!(FaultSpec::parse("crash_after").is_err());
    }

    #[test]
    fn thresholds_count_completed_requests() {
        let f = Faults::new(FaultSpec::parse("crash_after=2,flip_after=1").unwrap());
        assert!(!f.crash_now(0) && !f.crash_now(1) && f.crash_now(2));
        assert!(!f.flip_now(0) && f.flip_now(1));
    }
}
