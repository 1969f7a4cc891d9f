//! Execution backends of the forward pass: `cpu` ([`crate::model::Forward`], the reference)
//! and `opencl` ([`opencl::ClForward`], fused kernels on an OpenCL device). An
//! [`crate::session::Engine`] holds one [`Backend`]; each session runs an [`Exec`] of it.

pub mod opencl;

use crate::error::{Error, Result};
use crate::kv::KvCache;
use crate::model::{Counters, Forward, Model};

/// Which backend to run, as chosen on the command line.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub enum BackendChoice {
    #[default]
    Cpu,
    OpenCl(opencl::ClOptions),
}

/// Backend kind names accepted by `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Cpu,
    OpenCl,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::OpenCl => "opencl",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(BackendKind::Cpu),
            "opencl" | "cl" => Ok(BackendKind::OpenCl),
            _ => Err(Error::InvalidArgument {
                what: "backend".into(),
                reason: format!("`{s}`: expected cpu or opencl"),
            }),
        }
    }
}

/// An engine's backend: nothing extra for the CPU, the device state for OpenCL.
#[derive(Default)]
pub enum Backend {
    #[default]
    Cpu,
    OpenCl(Box<opencl::ClEngine>),
}

impl Backend {
    /// Opens the chosen backend for `model` (for OpenCL: device, kernels, weights).
    pub fn open(model: &Model, choice: &BackendChoice) -> Result<Self> {
        Ok(match choice {
            BackendChoice::Cpu => Backend::Cpu,
            BackendChoice::OpenCl(o) => Backend::OpenCl(Box::new(opencl::ClEngine::new(model, o)?)),
        })
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Cpu => BackendKind::Cpu,
            Backend::OpenCl(_) => BackendKind::OpenCl,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    pub fn opencl(&self) -> Option<&opencl::ClEngine> {
        match self {
            Backend::OpenCl(e) => Some(e),
            Backend::Cpu => None,
        }
    }
}

/// The forward-pass state of one session on its engine's backend.
// One per session, never moved in a hot loop: keeping the CPU state inline costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Exec {
    Cpu(Forward),
    OpenCl(Box<opencl::ClForward>),
    /// A session of an OpenCL batch ([`crate::session::BatchDecoder::session`]).
    ClLane(Box<opencl::ClLane>),
}

impl Exec {
    pub fn forward(&mut self, model: &Model, tokens: &[u32]) -> Result<&[f32]> {
        match self {
            Exec::Cpu(f) => f.forward(model, tokens),
            Exec::OpenCl(f) => f.forward(tokens),
            Exec::ClLane(f) => f.forward(tokens),
        }
    }

    pub fn logits(&self) -> &[f32] {
        match self {
            Exec::Cpu(f) => f.logits(),
            Exec::OpenCl(f) => f.logits(),
            Exec::ClLane(f) => f.logits(),
        }
    }

    pub fn reset(&mut self) {
        match self {
            Exec::Cpu(f) => f.reset(),
            Exec::OpenCl(f) => f.reset(),
            Exec::ClLane(f) => f.reset(),
        }
    }

    pub fn set_logits_all(&mut self, on: bool) -> Result<()> {
        match self {
            Exec::Cpu(f) => f.set_logits_all(on),
            Exec::OpenCl(f) => f.set_logits_all(on),
            Exec::ClLane(f) => f.set_logits_all(on),
        }
    }

    pub fn truncate(&mut self, n: usize) -> Result<()> {
        match self {
            Exec::Cpu(f) => f.truncate(n),
            Exec::OpenCl(f) => f.truncate(n),
            Exec::ClLane(f) => f.truncate(n),
        }
    }

    pub fn n_past(&self) -> usize {
        match self {
            Exec::Cpu(f) => f.n_past(),
            Exec::OpenCl(f) => f.n_past(),
            Exec::ClLane(f) => f.n_past(),
        }
    }

    pub fn counters(&self) -> Counters {
        match self {
            Exec::Cpu(f) => f.counters,
            Exec::OpenCl(f) => f.counters(),
            Exec::ClLane(f) => f.counters(),
        }
    }

    /// Launch, transfer and kernel-time counters (OpenCL only).
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        match self {
            Exec::Cpu(_) => None,
            Exec::OpenCl(f) => Some(f.device_counters()),
            Exec::ClLane(f) => Some(f.device_counters()),
        }
    }

    /// The ring's slot bookkeeping (capacity, policy, occupancy).
    pub fn kv(&self) -> &KvCache {
        match self {
            Exec::Cpu(f) => f.kv(),
            Exec::OpenCl(f) => f.kv(),
            Exec::ClLane(f) => f.kv(),
        }
    }

    pub fn cpu(&self) -> Option<&Forward> {
        match self {
            Exec::Cpu(f) => Some(f),
            Exec::OpenCl(_) => None,
            Exec::ClLane(_) => None,
        }
    }
}

/// Totals of one kind of forward call (decode = one token, prefill = a batch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PhaseCounters {
    pub calls: u64,
    pub tokens: u64,
    /// Kernel launches.
    pub launches: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    /// Device time of the profiled launches, nanoseconds.
    pub kernel_ns: u64,
    pub profiled_launches: u64,
    /// `kernel_ns` split by kernel.
    pub per_kernel_ns: KernelTimes,
}

/// Device time by kernel, nanoseconds (the seven kernels of the OpenCL backend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelTimes {
    pub embed: u64,
    pub attn_qkv: u64,
    pub attention: u64,
    pub attn_out: u64,
    pub ffn_gate_up: u64,
    pub ffn_down: u64,
    pub head: u64,
}

impl KernelTimes {
    /// Adds `ns` to the kernel called `name` (unknown names are ignored).
    pub fn add(&mut self, name: &str, ns: u64) {
        let slot = match name {
            "embed" => &mut self.embed,
            "attn_qkv" => &mut self.attn_qkv,
            "attention" | "attention_exact" => &mut self.attention,
            "attn_out" => &mut self.attn_out,
            "ffn_gate_up" => &mut self.ffn_gate_up,
            "ffn_down" => &mut self.ffn_down,
            "head" => &mut self.head,
            _ => return,
        };
        *slot += ns;
    }

    fn zip(&self, o: &KernelTimes, f: impl Fn(u64, u64) -> u64) -> KernelTimes {
        KernelTimes {
            embed: f(self.embed, o.embed),
            attn_qkv: f(self.attn_qkv, o.attn_qkv),
            attention: f(self.attention, o.attention),
            attn_out: f(self.attn_out, o.attn_out),
            ffn_gate_up: f(self.ffn_gate_up, o.ffn_gate_up),
            ffn_down: f(self.ffn_down, o.ffn_down),
            head: f(self.head, o.head),
        }
    }
}

impl PhaseCounters {
    pub(crate) fn add(&mut self, o: &PhaseCounters) {
        self.calls += o.calls;
        self.tokens += o.tokens;
        self.launches += o.launches;
        self.h2d_bytes += o.h2d_bytes;
        self.d2h_bytes += o.d2h_bytes;
        self.kernel_ns += o.kernel_ns;
        self.profiled_launches += o.profiled_launches;
        self.per_kernel_ns = self.per_kernel_ns.zip(&o.per_kernel_ns, |a, b| a + b);
    }

    /// `self - earlier` (counters only grow).
    pub fn since(&self, earlier: &PhaseCounters) -> PhaseCounters {
        PhaseCounters {
            calls: self.calls.saturating_sub(earlier.calls),
            tokens: self.tokens.saturating_sub(earlier.tokens),
            launches: self.launches.saturating_sub(earlier.launches),
            h2d_bytes: self.h2d_bytes.saturating_sub(earlier.h2d_bytes),
            d2h_bytes: self.d2h_bytes.saturating_sub(earlier.d2h_bytes),
            kernel_ns: self.kernel_ns.saturating_sub(earlier.kernel_ns),
            profiled_launches: self
                .profiled_launches
                .saturating_sub(earlier.profiled_launches),
            per_kernel_ns: self
                .per_kernel_ns
                .zip(&earlier.per_kernel_ns, u64::saturating_sub),
        }
    }

    /// Averages per token (`None` before any token).
    pub fn per_token(&self) -> Option<PerToken> {
        if self.tokens == 0 {
            return None;
        }
        let n = self.tokens as f64;
        Some(PerToken {
            tokens: self.tokens,
            launches: self.launches as f64 / n,
            h2d_bytes: self.h2d_bytes as f64 / n,
            d2h_bytes: self.d2h_bytes as f64 / n,
            kernel_ms: (self.profiled_launches > 0 && self.profiled_launches == self.launches)
                .then(|| self.kernel_ns as f64 / 1e6 / n),
        })
    }
}

/// Per-token averages of a [`PhaseCounters`].
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PerToken {
    pub tokens: u64,
    pub launches: f64,
    pub h2d_bytes: f64,
    pub d2h_bytes: f64,
    /// Device kernel time per token; `None` when the device could not profile every launch.
    pub kernel_ms: Option<f64>,
}

/// Device counters of a session, split by decode and prefill calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCounters {
    pub decode: PhaseCounters,
    pub prefill: PhaseCounters,
}

impl DeviceCounters {
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            decode: self.decode.since(&earlier.decode),
            prefill: self.prefill.since(&earlier.prefill),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_token_averages_and_deltas() {
        let a = PhaseCounters {
            calls: 2,
            tokens: 2,
            launches: 304,
            h2d_bytes: 24,
            d2h_bytes: 2 * 196_608,
            kernel_ns: 4_000_000,
            profiled_launches: 304,
            per_kernel_ns: KernelTimes {
                head: 1_000_000,
                ..Default::default()
            },
        };
        let p = a.per_token().unwrap();
        assert_eq!(p.launches, 152.0);
        assert_eq!(p.h2d_bytes, 12.0);
        assert_eq!(p.kernel_ms, Some(2.0));
        let mut b = a;
        b.add(&a);
        assert_eq!(b.since(&a), a);
        let unprofiled = PhaseCounters {
            profiled_launches: 0,
            ..a
        };
        assert_eq!(unprofiled.per_token().unwrap().kernel_ms, None);
        assert!(PhaseCounters::default().per_token().is_none());
        assert_eq!(
            "OpenCL".parse::<BackendKind>().unwrap(),
            BackendKind::OpenCl
        );
        assert!("cuda".parse::<BackendKind>().is_err());
    }
}
